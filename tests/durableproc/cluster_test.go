package durableproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	"github.com/convoy-gcs/convoy/internal/testproc"
)

// envLogs, set to anything, makes the test print the members' logs even
// when it passes.
const envLogs = "DURABLEPROC_LOGS"

// Test timing.
const (
	// waitTimeout bounds every wait for a condition: generous, as the
	// members may be race builds sharing two cores.
	waitTimeout = 30 * time.Second
	// pollInterval is how often a wait rereads the members' records.
	pollInterval = 20 * time.Millisecond
	// sendersPerMember is how many goroutines of a member send at once.
	sendersPerMember = 3
)

// groupSize is how many members a group has: members 1 to groupSize.
const groupSize = 3

// cluster is one durable group of member processes around a shared etcd.
// Each member has a data directory that outlives its processes.
type cluster struct {
	t         *testing.T
	endpoints []string
	prefix    string
	// dir holds the records files.
	dir string
	// data maps a member to its data directory.
	data map[uint64]string
	// procs holds every member process started, in order; current maps a
	// member to its latest one.
	procs   []*proc
	current map[uint64]*proc
	// checked is set once the records were checked.
	checked bool
}

func newCluster(t *testing.T, endpoints []string) *cluster {
	c := &cluster{
		t: t, endpoints: endpoints, prefix: "/durableproc/" + t.Name() + "/", dir: t.TempDir(),
		data: make(map[uint64]string), current: make(map[uint64]*proc),
	}
	t.Cleanup(c.cleanup)
	return c
}

// proc is one run of a member — one process — and what it recorded so
// far.
type proc struct {
	id   uint64
	run  int
	cmd  *exec.Cmd
	path string // its records
	logs testproc.Output
	// priorAcks are the payloads reported durable, as recorded by any
	// member, before this process started: they were on every member's
	// disk by then, so this run must find them.
	priorAcks []string
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
	recs    []record
	sum     summary
}

func (p *proc) String() string {
	return fmt.Sprintf("member %d run %d (pid %d)", p.id, p.run, p.cmd.Process.Pid)
}

// start starts a new run of member id on its data directory.
func (c *cluster) start(id uint64) *proc {
	c.t.Helper()
	run := 1
	if old := c.current[id]; old != nil {
		run = old.run + 1
	}
	if c.data[id] == "" {
		c.data[id] = c.t.TempDir()
	}
	spec := memberSpec{
		id: convoy.NodeID(id), run: run, etcd: c.endpoints, prefix: c.prefix, initial: groupSize,
		addr: "127.0.0.1:0", dir: c.data[id], out: filepath.Join(c.dir, fmt.Sprintf("member-%d-run-%d.jsonl", id, run)),
		senders: sendersPerMember,
	}
	c.refreshAll()
	p := &proc{id: id, run: run, path: spec.out, exited: make(chan struct{}), priorAcks: c.acked().payloads()}
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
	c.current[id] = p
	return p
}

// members returns the member ids, sorted.
func (c *cluster) members() []uint64 { return slices.Sorted(maps.Keys(c.current)) }

// live returns the latest process of every member, by id.
func (c *cluster) live() []*proc {
	var ps []*proc
	for _, id := range c.members() {
		ps = append(ps, c.current[id])
	}
	return ps
}

// signal sends sig to p.
func (c *cluster) signal(p *proc, sig syscall.Signal) {
	c.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("%v: signal %v: %v", p, sig, err)
	}
}

// kill sends SIGKILL to p.
func (c *cluster) kill(p *proc) {
	c.t.Helper()
	p.expectExit = true
	c.signal(p, syscall.SIGKILL)
}

// waitExited waits until every one of ps has exited and reads what they
// recorded.
func (c *cluster) waitExited(ps ...*proc) {
	c.t.Helper()
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-time.After(waitTimeout):
			c.t.Fatalf("%v did not exit within %v", p, waitTimeout)
		}
		if err := p.refresh(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// cleanup stops every member still running and, if the test failed (or
// DURABLEPROC_LOGS is set), prints their logs.
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
		c.checkRecords()
	}
	for _, p := range c.procs {
		c.t.Logf("--- %v log (exit: %v):\n%s", p, p.waitErr, tail(p.logs.Bytes(), 64<<10))
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
// the remains of a process killed while writing (each run has a file of
// its own, so such remains are never followed by more records).
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
		if r.Inc < 1 {
			return fmt.Errorf("%v: record without incarnation: %q", p, b[:i])
		}
		p.recs = append(p.recs, r)
		p.sum.add(r)
		b = b[i+1:]
	}
	p.partial = slices.Clone(b)
	return nil
}

// refreshAll reads what every process recorded since the last call.
func (c *cluster) refreshAll() {
	c.t.Helper()
	for _, p := range c.procs {
		if err := p.refresh(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// records returns what p recorded so far.
func (p *proc) records() []record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.recs)
}

// summary is what a status line and most waits need of a process's
// records, kept up to date as they are read.
type summary struct {
	acks         int
	deliveries   int
	replayed     int
	lastIndex    uint64
	lastView     *viewRecord
	incarnations int
	opened       bool
	stopped      bool
	failed       string
	final        *finalRecord
}

// add counts r in.
func (s *summary) add(r record) {
	s.incarnations = max(s.incarnations, r.Inc)
	switch {
	case r.Ack != "":
		s.acks++
	case r.Delivery != nil:
		s.deliveries++
		if r.Delivery.Replayed {
			s.replayed++
		}
		s.lastIndex = r.Delivery.Index
	case r.View != nil:
		s.lastView = r.View
	case r.Excluded != nil:
		s.lastView = nil
	case r.Opened:
		s.opened = true
	case r.Stopped:
		s.stopped = true
	case r.Failed != "":
		s.failed = r.Failed
	case r.Final != nil:
		s.final = r.Final
	}
}

// summary returns the summary of what p recorded so far.
func (p *proc) summary() summary {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sum
}

// inView reports whether p's member currently takes part in a view of
// exactly the given members.
func (p *proc) inView(members []uint64) bool {
	v := p.summary().lastView
	return v != nil && slices.Equal(slices.Sorted(slices.Values(v.Members)), members)
}

// waitFor waits until cond holds, as await does, and stops the test if
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
		c.refreshAll()
		for _, p := range c.procs {
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

// status describes every live member's progress, for failure messages.
func (c *cluster) status() string {
	var b strings.Builder
	for _, p := range c.live() {
		s := p.summary()
		state := "running"
		select {
		case <-p.exited:
			state = fmt.Sprintf("exited (%v)", p.waitErr)
		default:
		}
		fmt.Fprintf(&b, "  %v, %s: opened %v, %d incarnations, last view %+v, last index %d, %d delivered (%d replayed), %d acks, stopped %v",
			p, state, s.opened, s.incarnations, s.lastView, s.lastIndex, s.deliveries, s.replayed, s.acks, s.stopped)
		if s.failed != "" {
			fmt.Fprintf(&b, ", failed: %s", s.failed)
		}
		if s.final != nil {
			fmt.Fprintf(&b, ", final state of %d keys", len(s.final.KV))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// waitInView waits until every live member takes part in a view of all
// the members.
func (c *cluster) waitInView() {
	c.t.Helper()
	c.waitMembers(c.live(), c.members()...)
}

// waitMembers waits until each of ps takes part in a view of exactly the
// given members.
func (c *cluster) waitMembers(ps []*proc, members ...uint64) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("a view of members %v", members), func() bool {
		for _, p := range ps {
			if !p.inView(members) {
				return false
			}
		}
		return true
	})
}

// waitAcks waits until ps together recorded n more acknowledgements than
// they had at the call, and each at least n/10 more: the group makes
// progress, and every member's messages get through.
func (c *cluster) waitAcks(ps []*proc, n int) {
	c.t.Helper()
	c.refreshAll()
	base := make([]int, len(ps))
	for i, p := range ps {
		base[i] = p.summary().acks
	}
	c.waitFor(fmt.Sprintf("%d more acknowledgements", n), func() bool {
		total := 0
		for i, p := range ps {
			more := p.summary().acks - base[i]
			if more < n/10 {
				return false
			}
			total += more
		}
		return total >= n
	})
}

// finish ends a test: the live members stop sending and deliver up to
// the same index, then record their final states and exit. Then every
// record, final state and log is checked.
func (c *cluster) finish() {
	c.t.Helper()
	ps := c.live()
	for _, p := range ps {
		c.signal(p, syscall.SIGUSR1)
	}
	c.waitFor("the members to stop sending", func() bool {
		for _, p := range ps {
			if !p.summary().stopped {
				return false
			}
		}
		return true
	})
	c.waitFor("the members to deliver up to the same index", func() bool {
		last := ps[0].summary().lastIndex
		for _, p := range ps[1:] {
			if p.summary().lastIndex != last {
				return false
			}
		}
		return true
	})
	for _, p := range ps {
		p.expectExit = true
		c.signal(p, syscall.SIGTERM)
	}
	c.waitExited(ps...)
	for _, p := range ps {
		if p.waitErr != nil {
			c.t.Errorf("%v: %v", p, p.waitErr)
		}
	}
	h := c.checkRecords()
	c.checkFinal(ps, h)
	c.checkLogs(h, ps[0].summary().lastIndex)
	c.t.Logf("%d runs, %d payloads reported durable, %d indexes delivered; members:\n%s",
		len(c.procs), len(h.acks), len(h.payloadAt), c.status())
}
