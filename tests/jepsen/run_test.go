package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// Bounds of a run's end.
const (
	// livenessBound is how long, after the quiet period, every member not
	// lost has to serve a linearizable read and a write; it bounds the
	// reading back of each member's log too.
	livenessBound = 60 * time.Second
	// checkTimeout bounds the linearizability check of one key of the
	// key-value store.
	checkTimeout = 60 * time.Second
)

// runConfig is what every run of a campaign shares.
type runConfig struct {
	bins    binaries
	clients int
	// reportParent is where failure reports go.
	reportParent string
	// keep: write the report of a run that passed too.
	keep bool
	net  *network
	// logLevel, if set, is the members' -log-level.
	logLevel string
}

// result is what one run found.
type result struct {
	seed     int64
	ops      int
	unknown  int
	liveness time.Duration // until every member served, after the quiet period
	// err is the run's failure: a harness error, a process that exited on
	// its own, a member that did not serve, or a check that failed.
	err    error
	report string // the report directory, on failure
}

// run runs schedule s against a fresh cluster under dir: the etcd
// cluster and the members, the workload with the faults, then liveness
// and the check of the history.
func run(ctx context.Context, rc runConfig, s schedule.Schedule, dir string) (res result) {
	res.seed = s.Seed
	tl := newTimeline()
	c, err := newCluster(rc.bins, appOf(s), dir, tl, rc.net, s)
	if err != nil {
		res.err = err
		return res
	}
	c.logLevel = rc.logLevel
	defer c.close()
	// w is nil until the schedule starts.
	var w workload
	defer func() {
		if res.err != nil || rc.keep {
			res.report = writeReport(rc.reportParent, s, tl, c, w, res)
		}
	}()
	if err := c.mountDisks(); err != nil {
		res.err = fmt.Errorf("setup: %w", err)
		return res
	}
	// A run that failed under a network fault left it in place.
	if err := rc.net.fault(ctx, schedule.Step{Kind: schedule.HealAll}); err != nil {
		res.err = fmt.Errorf("setup: %w", err)
		return res
	}
	tl.add("network: %v", rc.net)
	hc := newHTTPClient(rc.net.dial)
	defer hc.CloseIdleConnections()

	if err := c.startEtcdCluster(ctx); err != nil {
		res.err = fmt.Errorf("setup: %w", err)
		return res
	}
	if err := c.startMembers(ctx, hc); err != nil {
		res.err = fmt.Errorf("setup: %w", err)
		return res
	}

	// The workload, from the start of the schedule to its end.
	zero := tl.restart()
	w = newWorkload(s, zero)
	tl.add("workload %v, %d clients", w, rc.clients)
	var urls []string
	for _, m := range c.members {
		urls = append(urls, m.url())
	}
	stop, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopClients()
		wg.Wait()
	}()
	for i := range rc.clients {
		// Each client starts at a member of its own.
		k := i % len(urls)
		wg.Go(func() { w.runClient(stop, i, slices.Concat(urls[k:], urls[:k]), hc) })
	}

	// The faults.
	for _, st := range s.Steps {
		if !sleepUntil(ctx, zero.Add(st.At)) {
			res.err = ctx.Err()
			return res
		}
		if err := c.apply(ctx, st); err != nil {
			res.err = fmt.Errorf("nemesis: %w", err)
			return res
		}
	}
	if !sleepUntil(ctx, zero.Add(s.End)) {
		res.err = ctx.Err()
		return res
	}
	tl.add("quiet period over: clients stop")
	stopClients()
	wg.Wait()
	if st, ok := w.(stopper); ok {
		if err := st.stop(c, hc); err != nil {
			res.err = err
		}
	}

	// Liveness: every member not lost serves a read and a write, through
	// itself alone (in the group workload, delivers a message of its own).
	res.liveness, err = c.liveness(w, rc.clients)
	if err != nil {
		res.err = errors.Join(res.err, err)
	}
	if err := c.unexpectedExits(); err != nil {
		res.err = errors.Join(res.err, err)
	}
	tl.add("checking the history")
	ops, unknown, err := w.check(c, hc)
	res.ops, res.unknown = ops, unknown
	tl.add("%d operations, %d with an unknown outcome", res.ops, res.unknown)
	if err != nil {
		res.err = errors.Join(res.err, err)
	}
	return res
}

// liveness waits until every member not lost has served (w.serve: a
// read and a write, linearizable both, each through that member alone;
// or, in the group workload, the delivery of a message of its own), and
// returns how long that took. The operations join the history, as
// clients numbered from firstClient.
func (c *cluster) liveness(w workload, firstClient int) (time.Duration, error) {
	hc := newHTTPClient(c.net.dial)
	defer hc.CloseIdleConnections()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	took := make([]time.Duration, len(c.members))
	for i, m := range c.members {
		if m.lost {
			continue
		}
		wg.Go(func() {
			err := w.serve(m.url(), m.id, firstClient+2*i, hc, livenessBound)
			took[i] = time.Since(start)
			if err != nil {
				errs[i] = fmt.Errorf("liveness: member %d did not serve within %v (%v)", m.id, livenessBound, err)
			}
		})
	}
	wg.Wait()
	c.tl.add("liveness: every member not lost served after %v", slices.Max(took).Round(time.Millisecond))
	return slices.Max(took), errors.Join(errs...)
}

// sleepUntil waits until t or the end of ctx; it reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// writeReport writes what a failed run leaves for its reader to a new
// directory under parent and returns its path: the schedule, the
// timeline, the history (what w writes: for the key-value store,
// porcupine's visualisation of the keys that failed too; for the log,
// the members' logs at the end), the failure and every process's log.
// w is nil if the run failed before its schedule started.
func writeReport(parent string, s schedule.Schedule, tl *timeline, c *cluster, w workload, res result) string {
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("convoy-jepsen-seed-%d-", s.Seed))
	if err != nil {
		return fmt.Sprintf("(no report: %v)", err)
	}
	var errs []error
	write := func(name, content string) {
		errs = append(errs, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	sj, err := json.MarshalIndent(s, "", "  ")
	errs = append(errs, err)
	write("schedule.json", string(sj)+"\n")
	write("schedule.txt", s.String()+"\n")
	write("timeline.txt", tl.String())
	if res.err != nil {
		write("failure.txt", res.err.Error()+"\n")
	}
	if w != nil {
		errs = append(errs, w.report(dir))
	}
	logs := filepath.Join(dir, "logs")
	errs = append(errs, os.MkdirAll(logs, 0o755))
	entries, err := os.ReadDir(filepath.Join(c.dir, "logs"))
	errs = append(errs, err)
	for _, e := range entries {
		errs = append(errs, copyFile(filepath.Join(c.dir, "logs", e.Name()), filepath.Join(logs, e.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return dir + " (incomplete: " + strings.ReplaceAll(err.Error(), "\n", "; ") + ")"
	}
	return dir
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
