package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// demoGroup is one group of the demo and its member processes.
type demoGroup struct {
	app    string
	prefix string
	// args and logs hold each member's node flags and log file, by id-1,
	// to start it again the same way.
	args [][]string
	logs []string
	urls []string

	mu struct {
		sync.Mutex
		procs []*memberProc // by id-1; replaced on restart
		views []demoView
		// now describes the latest view seen, for the progress lines.
		now string
	}
}

// procs returns the group's current member processes.
func (g *demoGroup) procs() []*memberProc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*memberProc(nil), g.mu.procs...)
}

// start starts member id, in place of any earlier process.
func (g *demoGroup) start(c *cli, id uint64) (*memberProc, error) {
	p, err := startMember(c.self, fmt.Sprintf("%s-%d", g.app, id), id, g.urls[id-1], g.args[id-1], g.logs[id-1])
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.procs[id-1] = p
	return p, nil
}

// saw records the statuses of one poll of the members.
func (g *demoGroup) saw(sts []memberStatus, at time.Duration) {
	var best *memberStatus
	serving := 0
	for i := range sts {
		s := &sts[i]
		if s.ID == 0 {
			continue // did not answer
		}
		if s.Serving {
			serving++
		}
		if best == nil || s.Epoch > best.Epoch {
			best = s
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if best == nil || best.Epoch == 0 {
		g.mu.now = "no view"
		return
	}
	g.mu.now = fmt.Sprintf("view %d %v, %d/%d serving", best.Epoch, best.Members, serving, len(sts))
	g.addViewLocked(*best, at)
}

// addView records the view of s if it is new.
func (g *demoGroup) addView(s memberStatus, at time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addViewLocked(s, at)
}

// addViewLocked records the view of s, in epoch order, if it is new.
// REQUIRES: g.mu.
func (g *demoGroup) addViewLocked(s memberStatus, at time.Duration) {
	i, found := slices.BinarySearchFunc(g.mu.views, s.Epoch, func(v demoView, e uint64) int { return cmp.Compare(v.Epoch, e) })
	if !found {
		g.mu.views = slices.Insert(g.mu.views, i, demoView{Epoch: s.Epoch, Members: s.Members, At: round(at.Seconds(), 2)})
	}
}

// printer writes the demo's lines, each stamped with the time since the
// start.
type printer struct {
	mu sync.Mutex
	w  io.Writer
	t0 time.Time
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%5.1fs] %s\n", time.Since(p.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (p *printer) raw(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// newDemoGroup describes the group serving app on ports, in dir,
// secured by sec if not nil.
func newDemoGroup(app, dir string, etcd []string, sec *devTLS, ports []int) *demoGroup {
	g := &demoGroup{app: app, prefix: "/convoy-demo/" + app + "/"}
	g.mu.procs = make([]*memberProc, len(ports))
	for i, port := range ports {
		id := uint64(i + 1)
		name := fmt.Sprintf("%s-%d", app, id)
		g.urls = append(g.urls, sec.scheme()+"://"+hostPort("127.0.0.1", port))
		g.logs = append(g.logs, filepath.Join(dir, name+".log"))
		g.args = append(g.args, append([]string{
			"-id", strconv.FormatUint(id, 10),
			"-app", app,
			"-listen", "127.0.0.1:0",
			"-http", hostPort("127.0.0.1", port),
			"-etcd", strings.Join(etcd, ","),
			"-prefix", g.prefix,
			"-data", filepath.Join(dir, name),
			"-initial", strconv.Itoa(len(ports)),
		}, append(demoNodeFlags(), sec.nodeArgs(id)...)...))
	}
	return g
}

// monitor polls every member's status until ctx ends, recording the
// views seen.
func (d *demoCmd) monitor(ctx context.Context, p *printer, api apiClient, groups []*demoGroup) {
	tick := time.NewTicker(demoMonitorInterval)
	defer tick.Stop()
	for {
		for _, g := range groups {
			procs := g.procs()
			sts := make([]memberStatus, len(procs))
			var wg sync.WaitGroup
			for i, m := range procs {
				wg.Go(func() { sts[i], _ = fetchStatus(ctx, api, m.url) })
			}
			wg.Wait()
			g.saw(sts, time.Since(p.t0))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// progress prints a line a second with the writes acknowledged so far
// and each group's view.
func (d *demoCmd) progress(ctx context.Context, p *printer, w *workload, groups []*demoGroup, start time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		secs := time.Since(start).Seconds()
		kv, lg := w.kvDone.Load(), w.logDone.Load()
		groups[0].mu.Lock()
		kvView := groups[0].mu.now
		groups[0].mu.Unlock()
		groups[1].mu.Lock()
		logView := groups[1].mu.now
		groups[1].mu.Unlock()
		p.say("kv: %6d puts (%5.0f/s), %s | log: %6d appends (%5.0f/s), %s",
			kv, float64(kv)/secs, kvView, lg, float64(lg)/secs, logView)
	}
}
