package vsproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/testproc"
	"github.com/convoy-gcs/convoy/internal/vscheck"
)

// TestMain runs the tests, or, in a process started as a member (see
// cluster.start) or as the etcd of an emulated network (see
// network.startEtcd), that process's program.
func TestMain(m *testing.M) {
	testproc.Run(envID, processLimit, func(context.Context) error {
		s, err := memberSpecFromEnv()
		if err != nil {
			return err
		}
		if err := runMember(s); err != nil {
			return fmt.Errorf("member %d: %w", s.id, err)
		}
		return nil
	})
	testproc.Run(envEtcdListen, processLimit, runEtcd)
	os.Exit(m.Run())
}

// processLimit bounds the run of a process a test starts: it only
// catches a hang.
const processLimit = 10 * time.Minute

// envLogs, set to anything, makes the test print the members' logs even
// when it passes.
const envLogs = "VSPROC_LOGS"

// Test timing.
const (
	// waitTimeout bounds every wait for a condition: generous, as the
	// members may be race builds sharing two cores (then three times as
	// long).
	waitTimeout = 30 * time.Second * raceSlowdown
	// pollInterval is how often a wait rereads the members' records.
	pollInterval = 20 * time.Millisecond
	// sendPause is the pause between two sends of one member.
	sendPause = 2 * time.Millisecond
	// loadMessages is how many deliveries a scenario waits for between
	// its steps.
	loadMessages = 300
)

// TestViewChanges runs the scenarios, each with its own group on one
// etcd that runs in this process.
func TestViewChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes; skipped with -short")
	}
	srv, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for _, sc := range []struct {
		name string
		run  func(c *cluster)
	}{
		{"KillOne", killOne},
		{"PauseAndRejoin", func(c *cluster) { pauseAndRejoin(c, 0) }},
		{"PauseBeyondLease", func(c *cluster) {
			pauseAndRejoin(c, leaseTTL+time.Second)
		}},
		{"KillTwoOfFive", killTwoOfFive},
		{"JoinUnderLoad", joinUnderLoad},
		{"StallAll", stallAll},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(newCluster(t, srv.Endpoints()))
		})
	}
}

// killOne: one of four members is killed with SIGKILL under load; the
// survivors install a view without it and keep delivering.
func killOne(c *cluster) {
	ps := c.startAll(4)
	c.waitDelivered(ps[0], loadMessages)
	c.kill(ps[3])
	survivors := ps[:3]
	c.waitMembers(survivors, 1, 2, 3)
	c.waitMore(ps[0], loadMessages)
	c.finish(survivors)
}

// killTwoOfFive: two of five members are killed at once; the three
// survivors, a majority, install a view without them and go on.
func killTwoOfFive(c *cluster) {
	ps := c.startAll(5)
	c.waitDelivered(ps[0], loadMessages)
	c.kill(ps[3], ps[4])
	survivors := ps[:3]
	c.waitMembers(survivors, 1, 2, 3)
	c.waitMore(ps[0], loadMessages)
	c.finish(survivors)
}

// joinUnderLoad: a fourth member joins three that are sending; it
// receives their state and ends with the same.
func joinUnderLoad(c *cluster) {
	ps := c.startAll(3)
	c.waitDelivered(ps[0], loadMessages)
	joiner := c.start(4, 1)
	all := append(ps, joiner)
	c.waitMembers(all, 1, 2, 3, 4)
	c.waitDelivered(joiner, loadMessages)
	c.finish(all)
	if n := len(joiner.histories()); n != 1 {
		c.t.Errorf("the joiner had %d incarnations, want 1", n)
	}
}

// stallAll: every member of three is stopped (SIGSTOP) for longer than
// the etcd lease TTL, then continued, as after a machine-wide stall. The
// group must go on: members whose registration lapsed meanwhile may be
// excluded and rejoin, with every guarantee kept.
func stallAll(c *cluster) {
	ps := c.startAll(3)
	c.waitDelivered(ps[0], loadMessages)
	for _, p := range ps {
		c.signal(p, syscall.SIGSTOP)
	}
	time.Sleep(leaseTTL + time.Second)
	for _, p := range ps {
		c.signal(p, syscall.SIGCONT)
	}
	for _, p := range ps {
		c.waitMore(p, loadMessages)
	}
	c.waitMembers(ps, 1, 2, 3)
	c.finish(ps)
}

// pauseAndRejoin: one of three members is stopped (SIGSTOP) until the
// others install a view without it, and extra longer, then continued
// (SIGCONT). It must deliver nothing more in its old incarnation, rejoin
// as a new one with the group's state, and end with the same state as
// the others.
func pauseAndRejoin(c *cluster, extra time.Duration) {
	ps := c.startAll(3)
	paused := ps[2]
	c.waitDelivered(ps[0], loadMessages)
	// The pause must strike a whole group. A member that was late with a
	// heartbeat on a loaded machine may have been excluded meanwhile
	// (it then rejoins): pausing another member of the smaller view
	// would leave a view without a majority, which rightly waits.
	c.waitMembers(ps, 1, 2, 3)
	c.signal(paused, syscall.SIGSTOP)
	c.waitMembers(ps[:2], 1, 2)
	excluding := ps[0].firstViewWithout(paused.id)
	time.Sleep(extra)
	c.signal(paused, syscall.SIGCONT)
	c.waitFor("the paused member to rejoin as a new incarnation and deliver", func() bool {
		h := paused.histories()
		return len(h) >= 2 && countDeliveries(h[len(h)-1]) >= loadMessages
	})
	c.waitMembers(ps, 1, 2, 3)
	c.finish(ps)

	h := paused.histories()
	for _, ev := range h[0] {
		if d := ev.Delivery; d != nil && d.Epoch >= excluding {
			c.t.Errorf("the paused member's first incarnation delivered index %d in view %d, at or after view %d that excluded it", d.Index, d.Epoch, excluding)
			break
		}
	}
	if ex := paused.exclusions(); len(ex) == 0 || ex[0] != excluding {
		c.t.Errorf("the paused member was told of exclusions by views %v, want view %d first", ex, excluding)
	}
	rejoined := false
	for _, ev := range h[len(h)-1] {
		if v := ev.View; v != nil && slices.Contains(v.Members, paused.id) {
			rejoined = true
		}
	}
	if !rejoined {
		c.t.Errorf("the paused member's last incarnation saw no view containing it")
	}
}

// cluster is one group of member processes around a shared etcd.
type cluster struct {
	t         *testing.T
	endpoints []string
	prefix    string
	dir       string
	procs     []*proc
	// checked is set once the histories were checked.
	checked bool
}

func newCluster(t *testing.T, endpoints []string) *cluster {
	c := &cluster{t: t, endpoints: endpoints, prefix: "/vsproc/" + t.Name() + "/", dir: t.TempDir()}
	t.Cleanup(c.cleanup)
	return c
}

// proc is one member process and what it recorded so far.
type proc struct {
	id   uint64
	cmd  *exec.Cmd
	path string // its records
	logs testproc.Output
	// exited is closed once the process has exited, with waitErr.
	exited  chan struct{}
	waitErr error
	// expectExit is set once the test killed the process or told it to
	// exit.
	expectExit bool

	mu sync.Mutex
	// offset is how far the records file has been read, partial the
	// incomplete last line read so far.
	offset  int64
	partial []byte
	// incs holds each incarnation's history, in order.
	incs     [][]vscheck.Event
	accepted []record
	excluded []record
	stopped  bool
	failed   string
	fin      *final
}

func (p *proc) String() string { return fmt.Sprintf("member %d (pid %d)", p.id, p.cmd.Process.Pid) }

// start starts member id with Config.InitialMembers initial.
func (c *cluster) start(id uint64, initial int) *proc {
	c.t.Helper()
	spec := memberSpec{
		id: convoy.NodeID(id), etcd: c.endpoints, prefix: c.prefix, initial: initial,
		addr: "127.0.0.1:0", out: filepath.Join(c.dir, fmt.Sprintf("member-%d.jsonl", id)), pause: sendPause,
	}
	p := &proc{id: id, path: spec.out, exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(os.Environ(), spec.encode()...)
	if os.Getenv("GORACE") == "" {
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	p.cmd.Stdout = &p.logs
	p.cmd.Stderr = &p.logs
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start member %d: %v", id, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	c.procs = append(c.procs, p)
	return p
}

// startAll starts members 1..n, which found the group together.
func (c *cluster) startAll(n int) []*proc {
	ps := make([]*proc, n)
	for i := range n {
		ps[i] = c.start(uint64(i+1), n)
	}
	return ps
}

// signal sends sig to p.
func (c *cluster) signal(p *proc, sig syscall.Signal) {
	c.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("%v: signal %v: %v", p, sig, err)
	}
	c.t.Logf("%v: sent %v", p, sig)
}

// kill kills the members with SIGKILL, at once.
func (c *cluster) kill(ps ...*proc) {
	c.t.Helper()
	for _, p := range ps {
		p.expectExit = true
		c.signal(p, syscall.SIGKILL)
	}
}

// cleanup stops every member still running and, if the test failed (or
// VSPROC_LOGS is set), prints their logs.
func (c *cluster) cleanup() {
	for _, p := range c.procs {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	for _, p := range c.procs {
		if bytes.Contains(p.logs.Bytes(), []byte("WARNING: DATA RACE")) {
			c.t.Errorf("%v: the race detector reported a data race", p)
		}
	}
	if !c.t.Failed() && os.Getenv(envLogs) == "" {
		return
	}
	if c.t.Failed() && !c.checked {
		// What was recorded up to the failure may show why.
		c.checkHistories()
	}
	for _, p := range c.procs {
		c.t.Logf("--- %v log (exit: %v):\n%s", p, p.waitErr, tail(p.logs.Bytes(), 256<<10))
	}
}

// tail returns the end of b, at most n bytes.
func tail(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return fmt.Sprintf("[%d bytes cut]\n%s", len(b)-n, b[len(b)-n:])
}

// refresh reads the records p wrote since the last call. A last line
// without its newline is kept for later: it may be being written, or be
// the remains of a member killed while writing.
func (p *proc) refresh() error {
	f, err := os.Open(p.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := f.Seek(p.offset, io.SeekStart); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	p.offset += int64(len(b))
	b = append(p.partial, b...)
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		var r record
		if err := json.Unmarshal(b[:i], &r); err != nil {
			return fmt.Errorf("%v: bad record %q: %w", p, b[:i], err)
		}
		b = b[i+1:]
		if r.Inc < 1 {
			return fmt.Errorf("%v: record without incarnation: %+v", p, r)
		}
		for len(p.incs) < r.Inc {
			p.incs = append(p.incs, nil)
		}
		switch {
		case r.View != nil:
			p.incs[r.Inc-1] = append(p.incs[r.Inc-1], vscheck.Event{View: r.View})
		case r.Delivery != nil:
			p.incs[r.Inc-1] = append(p.incs[r.Inc-1], vscheck.Event{Delivery: r.Delivery})
		case r.Excluded != nil:
			p.excluded = append(p.excluded, r)
		case r.Accepted != "":
			p.accepted = append(p.accepted, r)
		case r.Stopped:
			p.stopped = true
		case r.Failed != "":
			p.failed = r.Failed
		case r.Final != nil:
			p.fin = r.Final
		}
	}
	p.partial = slices.Clone(b)
	return nil
}

// histories returns p's incarnations' histories so far.
func (p *proc) histories() [][]vscheck.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.incs)
}

// delivered returns how many messages p delivered, over its
// incarnations.
func (p *proc) delivered() int {
	n := 0
	for _, h := range p.histories() {
		n += countDeliveries(h)
	}
	return n
}

func countDeliveries(h []vscheck.Event) int {
	n := 0
	for _, ev := range h {
		if ev.Delivery != nil {
			n++
		}
	}
	return n
}

// current returns p's last incarnation's history.
func (p *proc) current() []vscheck.Event {
	h := p.histories()
	if len(h) == 0 {
		return nil
	}
	return h[len(h)-1]
}

// lastInView returns the history of p's last incarnation that entered a
// view. One that has entered none (a member falsely suspected just before
// the test stopped it, still joining again) has delivered nothing and
// received no state: the member's state is still its previous
// incarnation's, which is then the one to check.
func (p *proc) lastInView() []vscheck.Event {
	h := p.histories()
	for i := len(h) - 1; i >= 0; i-- {
		for _, ev := range h[i] {
			if ev.View != nil {
				return h[i]
			}
		}
	}
	return nil
}

// lastView returns the view p installed last.
func (p *proc) lastView() (vscheck.View, bool) {
	h := p.current()
	for i := len(h) - 1; i >= 0; i-- {
		if v := h[i].View; v != nil {
			return *v, true
		}
	}
	return vscheck.View{}, false
}

// lastIndex returns the index of p's last delivery (or the start of its
// last view).
func (p *proc) lastIndex() uint64 {
	h := p.current()
	if len(h) == 0 {
		return 0
	}
	if d := h[len(h)-1].Delivery; d != nil {
		return d.Index
	}
	return h[len(h)-1].View.Start
}

// firstViewWithout returns the epoch of the first view p installed
// without member id after one with it (0 if none).
func (p *proc) firstViewWithout(id uint64) uint64 {
	with := false
	for _, h := range p.histories() {
		for _, ev := range h {
			v := ev.View
			switch {
			case v == nil:
			case slices.Contains(v.Members, id):
				with = true
			case with:
				return v.Epoch
			}
		}
	}
	return 0
}

// required returns the payloads that p's group accepted in p's last
// incarnation, which every survivor must deliver. A message accepted
// while p changed incarnation may belong to the old one, whose messages
// beyond its last view's cut are lost: those are left out.
func (p *proc) required() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, r := range p.accepted {
		if r.Inc == len(p.incs) && r.IncBefore == r.Inc {
			out = append(out, r.Accepted)
		}
	}
	return out
}

func (p *proc) state() (stopped bool, failed string, fin *final) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped, p.failed, p.fin
}

// waitFor waits until cond holds, as await does, and fails the test if
// it does not.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	if !c.await(what, cond) {
		c.t.FailNow()
	}
}

// await polls the members' records until cond holds and returns true. It
// fails the test and returns false if a member exits unexpectedly, or
// after waitTimeout. It stops the test at once if a record is
// unreadable.
func (c *cluster) await(what string, cond func() bool) bool {
	c.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		for _, p := range c.procs {
			if err := p.refresh(); err != nil {
				c.t.Fatal(err)
			}
			select {
			case <-p.exited:
				if !p.expectExit {
					c.t.Errorf("%v exited unexpectedly (%v) while waiting for %s", p, p.waitErr, what)
					return false
				}
			default:
			}
		}
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			c.t.Errorf("waited %v for %s; members:\n%s", waitTimeout, what, c.status())
			return false
		}
		time.Sleep(pollInterval)
	}
}

// status describes every member's progress, for failure messages.
func (c *cluster) status() string {
	var b strings.Builder
	for _, p := range c.procs {
		v, _ := p.lastView()
		stopped, failed, fin := p.state()
		state := "running"
		select {
		case <-p.exited:
			state = fmt.Sprintf("exited (%v)", p.waitErr)
		default:
		}
		fmt.Fprintf(&b, "  %v, %s: %d incarnations, last view %d %v (start %d), last index %d, %d delivered, %d accepted, stopped %v",
			p, state, len(p.histories()), v.Epoch, v.Members, v.Start, p.lastIndex(), p.delivered(), len(p.required()), stopped)
		if failed != "" {
			fmt.Fprintf(&b, ", failed: %s", failed)
		}
		if fin != nil {
			fmt.Fprintf(&b, ", final %+v", *fin)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// waitDelivered waits until p delivered at least n messages.
func (c *cluster) waitDelivered(p *proc, n int) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("%v to deliver %d messages", p, n), func() bool { return p.delivered() >= n })
}

// waitMore waits until p delivered n more messages than it has so far.
func (c *cluster) waitMore(p *proc, n int) {
	c.t.Helper()
	if err := p.refresh(); err != nil {
		c.t.Fatal(err)
	}
	c.waitDelivered(p, p.delivered()+n)
}

// waitMembers waits until each of ps installed a view of exactly the
// given members.
func (c *cluster) waitMembers(ps []*proc, members ...uint64) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("a view of members %v", members), func() bool {
		for _, p := range ps {
			v, ok := p.lastView()
			if !ok || !slices.Equal(sorted(v.Members), members) {
				return false
			}
		}
		return true
	})
}

func sorted(ids []uint64) []uint64 { return slices.Sorted(slices.Values(ids)) }

// finish ends a scenario: the survivors stop sending, deliver everything
// any of them had accepted, record their state and exit. Then every
// history, dead or alive, is checked.
func (c *cluster) finish(survivors []*proc) {
	c.t.Helper()
	for _, p := range survivors {
		c.signal(p, syscall.SIGUSR1)
	}
	c.waitFor("the survivors to stop sending", func() bool {
		for _, p := range survivors {
			if stopped, _, _ := p.state(); !stopped {
				return false
			}
		}
		return true
	})
	if !c.await("the survivors to deliver every message they accepted, up to the same index", func() bool {
		if len(c.missing(survivors)) > 0 {
			return false
		}
		for _, p := range survivors[1:] {
			if p.lastIndex() != survivors[0].lastIndex() {
				return false
			}
		}
		return true
	}) {
		c.reportMissing(survivors)
		c.t.FailNow()
	}
	for _, p := range survivors {
		p.expectExit = true
		c.signal(p, syscall.SIGTERM)
	}
	for _, p := range survivors {
		select {
		case <-p.exited:
		case <-time.After(waitTimeout):
			c.t.Fatalf("%v did not exit within %v of SIGTERM", p, waitTimeout)
		}
		if p.waitErr != nil {
			c.t.Errorf("%v: %v", p, p.waitErr)
		}
		if err := p.refresh(); err != nil {
			c.t.Fatal(err)
		}
	}
	c.check(survivors)
}

// check verifies every history and the survivors' final states.
func (c *cluster) check(survivors []*proc) {
	c.t.Helper()
	views := c.checkHistories()
	c.reportMissing(survivors)
	var ref *final
	for _, p := range survivors {
		_, failed, fin := p.state()
		switch {
		case failed != "":
			c.t.Errorf("%v: the group failed: %s", p, failed)
		case fin == nil:
			c.t.Errorf("%v recorded no final state", p)
		case fin.Keys == 0:
			c.t.Errorf("%v ended with an empty state", p)
		case ref == nil:
			ref = fin
		case *fin != *ref:
			c.t.Errorf("%v ended with state %+v, member %d with %+v", p, *fin, survivors[0].id, *ref)
		}
	}
	c.t.Logf("%d views, %d messages at the end; members:\n%s", len(views), survivors[0].lastIndex(), c.status())
}

// checkHistories checks the histories of every incarnation of every
// member, and returns the views they installed.
func (c *cluster) checkHistories() map[uint64]vscheck.View {
	c.t.Helper()
	c.checked = true
	all := make(map[string][]vscheck.Event)
	for _, p := range c.procs {
		for i, h := range p.histories() {
			all[fmt.Sprintf("member %d incarnation %d", p.id, i+1)] = h
		}
	}
	if err := vscheck.Check(all); err != nil {
		c.t.Errorf("histories:\n%v", err)
	}
	views := vscheck.Views(all)
	for _, p := range c.procs {
		if err := vscheck.CheckIncarnations(p.id, p.histories(), views); err != nil {
			c.t.Errorf("%v:\n%v", p, err)
		}
		c.checkExclusions(p, views)
	}
	return views
}

// missing returns, by survivor, the messages some survivor had accepted
// that it did not deliver in its last incarnation that entered a view
// (see proc.required, proc.lastInView and vscheck.Missing).
func (c *cluster) missing(survivors []*proc) map[string][]string {
	var want []string
	last := make(map[string][]vscheck.Event)
	for _, p := range survivors {
		want = append(want, p.required()...)
		last[p.String()] = p.lastInView()
	}
	return vscheck.Missing(last, want)
}

// reportMissing fails the test if a survivor misses a message that a
// survivor had accepted.
func (c *cluster) reportMissing(survivors []*proc) {
	c.t.Helper()
	for name, missing := range c.missing(survivors) {
		c.t.Errorf("%s misses %d accepted messages, such as %q", name, len(missing), missing[0])
	}
}

// checkExclusions verifies what p's member was told when the group
// excluded it: the view that excluded it is the group's view of that
// epoch, it does not contain the member, and it follows the last view of
// the incarnation it ended.
func (c *cluster) checkExclusions(p *proc, views map[uint64]vscheck.View) {
	c.t.Helper()
	p.mu.Lock()
	excluded := slices.Clone(p.excluded)
	p.mu.Unlock()
	hs := p.histories()
	for _, r := range excluded {
		ex := *r.Excluded
		if ex.Epoch == 0 {
			continue // the member could not read the view that excluded it
		}
		if slices.Contains(ex.Members, p.id) {
			c.t.Errorf("%v, incarnation %d: excluded by view %d, which contains it (%v)", p, r.Inc, ex.Epoch, ex.Members)
		}
		if v, ok := views[ex.Epoch]; ok && (v.Start != ex.Start || !slices.Equal(v.Members, ex.Members)) {
			c.t.Errorf("%v, incarnation %d: excluded by view %d %+v, but the group's view %d is %+v", p, r.Inc, ex.Epoch, ex, ex.Epoch, v)
		}
		last := uint64(0)
		for _, ev := range hs[r.Inc-1] {
			if ev.View != nil {
				last = ev.View.Epoch
			}
		}
		if last != 0 && ex.Epoch != last+1 {
			c.t.Errorf("%v, incarnation %d: excluded by view %d after installing view %d", p, r.Inc, ex.Epoch, last)
		}
	}
}

// exclusions returns the epochs of the views that excluded p's member,
// by incarnation.
func (p *proc) exclusions() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []uint64
	for _, r := range p.excluded {
		out = append(out, r.Excluded.Epoch)
	}
	return out
}
