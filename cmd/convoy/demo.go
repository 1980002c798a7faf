package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/freeport"
)

const demoUsage = `Usage:
  convoy demo [-duration 10s] [-clients 8] [-json] [-keep] [-tls]

Shows Convoy at work on this machine. It starts an embedded etcd and two
groups of three member processes ("convoy node") on loopback TCP, both
with durable delivery: one serves the replicated key-value store (kv),
the other the shared log (log). Then:

 1. Clients write for -duration through any member, failing over to the
    next when one cannot serve: -clients of them put values under fresh
    keys into kv, as many append entries to log. A line per second shows
    the writes acknowledged and each group's view.
 2. A third of the way in, one member of each group (-victim) is killed
    with SIGKILL. The survivors detect it and go on in a view without it.
 3. It is restarted on its data directory: it replays its log, rejoins
    as a new incarnation, catches up from the others (the messages it
    missed, or their state), and serves again in a view with all three.
 4. Once the clients stop, every acknowledged write is checked on every
    member, each member read on its own: every key from the member's
    local state (a stale read, not through the group) must hold the
    value put; every member must report the same tail, hold the same log
    entries, and hold every acknowledged append at its position, byte for
    byte; the members of each group must serve in one view and have
    applied the same deliveries.
 5. A summary gives throughput, latency, the view changes and the checks.

With -tls, the demo runs secured as a deployment would be, with the
certificates "convoy certs" makes and a bearer token, in the data
directory's certs/: the members authenticate each other with mutual
TLS, serve their APIs over TLS behind the token, and reach etcd over TLS
with a client certificate, which etcd requires; the clients and the
checks use TLS and the token.

It exits with status 0 if every check passed and 1 if one failed. The
data (etcd's, the members' logs and their log files) lives in a temporary
directory, removed at the end unless -keep. The member processes never
outlive the demo: they are stopped on every way out, Ctrl-C included.
`

// Bounds and settings of the demo.
const (
	// demoMembers is the size of each group.
	demoMembers = 3
	// demoStartTimeout bounds the wait for every member to serve.
	demoStartTimeout = 2 * time.Minute
	// demoExcludeTimeout bounds the wait for the survivors to go on
	// without a killed member, and demoRejoinTimeout for a restarted one
	// to serve again.
	demoExcludeTimeout = 30 * time.Second
	demoRejoinTimeout  = time.Minute
	// demoAfterRejoin is how long the clients go on at least once the
	// restarted members serve again, so that they serve writes too.
	demoAfterRejoin = time.Second
	// demoMonitorInterval is how often the demo polls the members' views.
	demoMonitorInterval = 200 * time.Millisecond
	// demoRequestTimeout bounds one HTTP request of the clients.
	demoRequestTimeout = 10 * time.Second
)

// demoNodeFlags are the failure detector and lease settings of the
// demo's members: a dead member is found within a fraction of a second,
// with room for the scheduling delays of a loaded two-core machine.
func demoNodeFlags() []string {
	return []string{"-heartbeat", "10ms", "-suspect-timeout", "250ms", "-lease-ttl", "2s"}
}

// demoCmd is a parsed "convoy demo" command line.
type demoCmd struct {
	duration time.Duration
	clients  int
	victim   uint64
	kill     bool
	json     bool
	keep     bool
	tls      bool
	verbose  bool
}

// demoView is a view some member of a group was seen in.
type demoView struct {
	Epoch   uint64   `json:"epoch"`
	Members []uint64 `json:"members"`
	// At is when it was first seen, in seconds from the demo's start.
	At float64 `json:"at_s"`
}

// demoAppSummary is what happened to one group.
type demoAppSummary struct {
	App string `json:"app"`
	// Acked counts the writes acknowledged, Failed those that ended in an
	// error (not checked: they may or may not have taken effect).
	Acked  int     `json:"acknowledged"`
	Failed int     `json:"failed"`
	PerSec float64 `json:"per_sec"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// Killed is the member killed (0: none); ExcludedMs the time from the
	// kill until every survivor served in view EpochWithout without it;
	// RejoinedMs the time from its restart until it and every survivor
	// served in view EpochBack with it.
	Killed       uint64  `json:"killed,omitempty"`
	ExcludedMs   float64 `json:"excluded_ms,omitempty"`
	EpochWithout uint64  `json:"epoch_without,omitempty"`
	RejoinedMs   float64 `json:"rejoined_ms,omitempty"`
	EpochBack    uint64  `json:"epoch_back,omitempty"`
	// ViewChanges counts the views installed while the demo ran.
	ViewChanges uint64     `json:"view_changes"`
	Views       []demoView `json:"views"`
}

// demoSummary is the demo's result (printed as JSON with -json).
type demoSummary struct {
	// Seconds is how long the clients ran.
	Seconds float64          `json:"seconds"`
	Apps    []demoAppSummary `json:"apps"`
	Checks  []demoCheck      `json:"checks"`
	Passed  int              `json:"passed"`
	Failed  int              `json:"failed"`
}

func runDemo(ctx context.Context, args []string, c *cli) error {
	d, err := parseDemo(args, c)
	if err != nil {
		return err
	}
	return d.run(ctx, c)
}

func parseDemo(args []string, c *cli) (*demoCmd, error) {
	fs := newFlagSet("demo", demoUsage, c)
	d := &demoCmd{}
	fs.DurationVar(&d.duration, "duration", 10*time.Second, "how long the clients write")
	fs.IntVar(&d.clients, "clients", 8, "concurrent clients per application")
	fs.Uint64Var(&d.victim, "victim", 2, fmt.Sprintf("the member of each group to kill and restart, 1 to %d", demoMembers))
	fs.BoolVar(&d.kill, "kill", true, "kill and restart a member of each group (-kill=false: only the load and the checks)")
	fs.BoolVar(&d.json, "json", false, "print the summary as JSON on stdout (the progress goes to stderr)")
	fs.BoolVar(&d.keep, "keep", false, "keep the data directory")
	fs.BoolVar(&d.tls, "tls", false, "secure the cluster: mutual TLS between members, TLS and a bearer token on the APIs, TLS with client certificates to etcd")
	fs.BoolVar(&d.verbose, "v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	switch {
	case d.duration <= 0:
		return nil, usagef("demo: -duration must be positive")
	case d.clients < 1:
		return nil, usagef("demo: -clients must be positive")
	case d.victim < 1 || d.victim > demoMembers:
		return nil, usagef("demo: -victim must be from 1 to %d", demoMembers)
	}
	return d, nil
}

// run runs the demo.
func (d *demoCmd) run(ctx context.Context, c *cli) (err error) {
	out := c.stdout
	if d.json {
		out = c.stderr
	}
	p := &printer{w: out, t0: time.Now()}
	log := newLogger(c.stderr, d.verbose)

	dir, err := os.MkdirTemp("", "convoy-demo-")
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	defer func() {
		if d.keep {
			p.raw("data and member logs kept in %s\n", dir)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the data directory: %w", rerr))
		}
	}()
	p.raw("convoy demo: an embedded etcd and %d member processes on loopback TCP, durable delivery:\n"+
		"a replicated key-value store (kv) and a shared log (log), %d members each.\n", 2*demoMembers, demoMembers)
	keep := "removed at the end; -keep keeps it"
	if d.keep {
		keep = "kept"
	}
	p.raw("data and member logs in %s (%s)\n", dir, keep)
	var sec *devTLS
	if d.tls {
		if sec, err = setUpDevTLS(filepath.Join(dir, "certs"), demoMembers); err != nil {
			return err
		}
		p.raw("secured: mutual TLS between members, TLS and a bearer token on the HTTP APIs, TLS with client\n"+
			"certificates to etcd; the CA, the certificates and the token are in %s\n", sec.dir)
	}

	etcdLog := slog.New(slog.DiscardHandler)
	if d.verbose {
		etcdLog = log
	}
	srv, err := etcddev.Start(ctx, etcddev.Config{Dir: filepath.Join(dir, "etcd"), Logger: etcdLog, TLS: sec.etcdTLS()})
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer srv.Close()
	p.say("etcd serves at %s", strings.Join(srv.Endpoints(), ","))

	ports, err := freeport.Pick("127.0.0.1", 2*demoMembers)
	if err != nil {
		return err
	}
	groups := []*demoGroup{
		newDemoGroup(appKV, dir, srv.Endpoints(), sec, ports[:demoMembers]),
		newDemoGroup(appLog, dir, srv.Endpoints(), sec, ports[demoMembers:]),
	}
	defer func() {
		timeout := memberStopTimeout
		if ctx.Err() != nil {
			timeout = 0 // interrupted: no time for a graceful close
		}
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Go(func() { stopAll(g.procs(), timeout) })
		}
		wg.Wait()
	}()

	hc := &http.Client{Transport: sec.transport(&http.Transport{MaxIdleConnsPerHost: 4 * d.clients}), Timeout: demoRequestTimeout}
	defer hc.CloseIdleConnections()
	api := apiClient{hc: hc, token: sec.apiToken()}
	if err := d.startGroups(ctx, c, p, api, groups); err != nil {
		return err
	}

	sum, acks, err := d.exercise(ctx, c, p, api, log, groups)
	if err != nil {
		return err
	}

	p.say("checking every acknowledged write on every member")
	ck := &checker{api: api, read: c.demoRead}
	sum.Checks = append(sum.Checks, ck.settle(ctx, appKV, groups[0].procs())...)
	sum.Checks = append(sum.Checks, ck.checkKV(ctx, groups[0].procs(), acks[appKV])...)
	sum.Checks = append(sum.Checks, ck.settle(ctx, appLog, groups[1].procs())...)
	sum.Checks = append(sum.Checks, ck.checkLog(ctx, groups[1].procs(), acks[appLog])...)
	for _, ch := range sum.Checks {
		mark := "ok  "
		if ch.OK {
			sum.Passed++
		} else {
			sum.Failed++
			mark = "FAIL"
		}
		p.raw("  %s %s: %s\n", mark, ch.Name, ch.Detail)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.printSummary(p, sum)
	if d.json {
		if err := printJSON(c.stdout, sum); err != nil {
			return err
		}
	}
	if sum.Failed > 0 {
		hint := ""
		if !d.keep {
			hint = " (-keep keeps the data and the member logs)"
		}
		return fmt.Errorf("%d of %d checks failed%s", sum.Failed, len(sum.Checks), hint)
	}
	return nil
}

// startGroups starts every member and waits until all serve.
func (d *demoCmd) startGroups(ctx context.Context, c *cli, p *printer, api apiClient, groups []*demoGroup) error {
	for _, g := range groups {
		for i := range g.args {
			if _, err := g.start(c, uint64(i+1)); err != nil {
				return err
			}
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, demoStartTimeout, fmt.Errorf("the members did not all serve within %v", demoStartTimeout))
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, g := range groups {
		for _, m := range g.procs() {
			wg.Go(func() {
				if _, err := waitStatus(ctx, api, m, m.url, func(s memberStatus) bool { return s.Serving }); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.say("all %d members serve:", 2*demoMembers)
	for _, g := range groups {
		for _, m := range g.procs() {
			p.raw("          %-6s pid %-7d %s\n", m.name, m.pid(), m.url)
		}
	}
	return nil
}

// exercise runs the clients, kills and restarts the victims meanwhile,
// and returns what happened and the writes acknowledged, by app.
func (d *demoCmd) exercise(ctx context.Context, c *cli, p *printer, api apiClient, log *slog.Logger, groups []*demoGroup) (demoSummary, map[string][]ack, error) {
	sum := demoSummary{Apps: []demoAppSummary{{App: appKV}, {App: appLog}}}

	// Poll the views and print progress until the clients stop.
	mctx, stopMonitor := context.WithCancel(ctx)
	var monitor sync.WaitGroup
	defer func() {
		stopMonitor()
		monitor.Wait()
	}()
	monitor.Go(func() { d.monitor(mctx, p, api, groups) })

	p.say("%d clients put %d-byte values under fresh keys into kv, %d append %d-byte entries to log, for %v",
		d.clients, demoValueBytes, d.clients, demoEntryBytes, d.duration)
	w := newWorkload(d.clients, api, log)
	start := time.Now()
	w.start(ctx, groups[0].urls, groups[1].urls)
	monitor.Go(func() { d.progress(mctx, p, w, groups, start) })

	end := start.Add(d.duration)
	var crashErr error
	if d.kill {
		if err := sleepUntil(ctx, start.Add(d.duration/3)); err != nil {
			w.finish()
			return sum, nil, err
		}
		var wg sync.WaitGroup
		errs := make([]error, len(groups))
		for i, g := range groups {
			wg.Go(func() { errs[i] = d.crashAndRestart(ctx, c, p, api, g, &sum.Apps[i]) })
		}
		wg.Wait()
		crashErr = errors.Join(errs...)
		if crashErr == nil {
			end = later(end, time.Now().Add(demoAfterRejoin))
		}
	}
	if crashErr == nil {
		crashErr = sleepUntil(ctx, end)
	}
	kv, lg := w.finish()
	elapsed := time.Since(start)
	stopMonitor()
	monitor.Wait()
	if crashErr != nil {
		return sum, nil, crashErr
	}
	sum.Seconds = round(elapsed.Seconds(), 2)
	p.say("clients stopped after %.1fs: %d puts and %d appends acknowledged", elapsed.Seconds(), len(kv.acks), len(lg.acks))
	for i, st := range []loadStats{kv, lg} {
		a := &sum.Apps[i]
		a.Acked, a.Failed = len(st.acks), st.failed
		a.PerSec = round(float64(len(st.acks))/elapsed.Seconds(), 1)
		a.P50Ms = round(msOf(percentile(st.latency, 0.5)), 2)
		a.P99Ms = round(msOf(percentile(st.latency, 0.99)), 2)
		g := groups[i]
		g.mu.Lock()
		a.Views = append([]demoView(nil), g.mu.views...)
		g.mu.Unlock()
		if n := len(a.Views); n > 0 {
			a.ViewChanges = a.Views[n-1].Epoch - a.Views[0].Epoch
		}
	}
	return sum, map[string][]ack{appKV: kv.acks, appLog: lg.acks}, nil
}

// printSummary prints the summary lines.
func (d *demoCmd) printSummary(p *printer, sum demoSummary) {
	p.raw("summary:\n")
	for _, a := range sum.Apps {
		what := map[string]string{appKV: "puts", appLog: "appends"}[a.App]
		p.raw("  %-4s %d %s acknowledged in %.1fs: %.0f/s, latency p50 %.2f ms, p99 %.2f ms; %d failed\n",
			a.App+":", a.Acked, what, sum.Seconds, a.PerSec, a.P50Ms, a.P99Ms, a.Failed)
		if a.Killed != 0 {
			p.raw("  %-4s member %d killed: view %d without it after %.0f ms; back in view %d %.1fs after its restart\n",
				a.App+":", a.Killed, a.EpochWithout, a.ExcludedMs, a.EpochBack, a.RejoinedMs/1000)
		}
		views := make([]string, len(a.Views))
		for i, v := range a.Views {
			views[i] = fmt.Sprintf("%d %v", v.Epoch, v.Members)
		}
		p.raw("  %-4s %d view changes seen (views %s)\n", a.App+":", a.ViewChanges, strings.Join(views, ", "))
	}
	verdict := "every check passed"
	if sum.Failed > 0 {
		verdict = "CHECKS FAILED"
	}
	p.raw("  checks: %d passed, %d failed: %s\n", sum.Passed, sum.Failed, verdict)
}

// sleepUntil waits until t or until ctx ends (its error).
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
