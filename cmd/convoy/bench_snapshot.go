package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/convoy-gcs/convoy/internal/childproc"
)

const snapshotUsage = `Usage:
  convoy bench snapshot [flags]

Measures the memory a member uses for its state's snapshots, a state
transfer and a restart, against the size of the state: none of them
should hold the state in memory.

It starts an etcd process and two durable member processes, 1 and 3,
with a synthetic state of -state bytes that they generate on demand
(checks are byte by byte, and no member holds the state: see "convoy
bench join"), and, in turn:

  snapshot   member 1 keeps a snapshot of its state in its durable log
             (Group.Snapshot);
  transfer   member 2 joins: members 1 and 3 stream the state to it, and
             it keeps what it receives in its log and restores from there
             (the joiner is measured, and so are the donors);
  restart    member 2 is stopped and started again on its log, which it
             restores the state from before it takes part again (the two
             others, a majority, go on meanwhile).

Every process samples its own memory: its peak resident set (VmHWM, reset
at the start of each phase through /proc/self/clear_refs, Linux only)
and its peak Go heap (runtime/metrics). Each phase's growth is the peak
minus the resident set when the phase started, shown against -state. A
light load (one small message every 50ms from each member) runs
throughout, so that the restarted joiner's log and the donor's overlap.
The members' data lives under -dir (a temporary directory by default,
removed at the end): it takes about twice -state on disk, and the
donors' transfer files (under the system's temporary directory) twice
more while the transfer runs.
`

// snapEvent is one line a snapnode (or joinetcd) prints, or the
// coordinator makes up (exited).
type snapEvent struct {
	Event string `json:"event"`
	Node  uint64 `json:"node,omitempty"`
	T     int64  `json:"t"`
	// The memory the process used since its peaks were last reset (at
	// Start): its resident set and Go heap then, and their peaks since,
	// in bytes.
	Start    int64 `json:"start,omitempty"`
	RSS      int64 `json:"rss,omitempty"`
	RSSPeak  int64 `json:"rss_peak,omitempty"`
	Heap     int64 `json:"heap,omitempty"`
	HeapPeak int64 `json:"heap_peak,omitempty"`
	// Index is the index of a snapshot; Bytes the state restored and
	// Seconds how long Restore took.
	Index   uint64  `json:"index,omitempty"`
	Bytes   int64   `json:"bytes,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	// Endpoints are etcd's client URLs.
	Endpoints []string `json:"endpoints,omitempty"`
	Err       string   `json:"err,omitempty"`
}

// Events of a snapnode, beside joinetcd's and the exit.
const (
	snReady    = "ready"    // Open returned; the memory of Open
	snSnapshot = "snapshot" // Group.Snapshot returned; the memory of it
	snPeak     = "peak"     // the memory since the last reset
	snRestored = "restored" // Restore returned
	snError    = "error"
	snExited   = "exited" // made up by the coordinator
)

// snapshotBench is "convoy bench snapshot".
type snapshotBench struct {
	state      int
	dir        string
	heartbeat  time.Duration
	timeout    time.Duration
	runTimeout time.Duration
	json       bool
	verbose    bool
}

// snapshotPhase is one phase's measurement of one process.
type snapshotPhase struct {
	Phase   string  `json:"phase"`
	Member  string  `json:"member"`
	Seconds float64 `json:"seconds"`
	// RSS is the resident set at the phase's start, RSSPeak its peak
	// during it, RSSGrowth the difference, and RSSFraction that over the
	// state's size; the same of the Go heap (its objects, live or not yet
	// collected).
	RSS          int64   `json:"rss_bytes"`
	RSSPeak      int64   `json:"rss_peak_bytes"`
	RSSGrowth    int64   `json:"rss_growth_bytes"`
	RSSFraction  float64 `json:"rss_growth_fraction"`
	Heap         int64   `json:"heap_bytes"`
	HeapPeak     int64   `json:"heap_peak_bytes"`
	HeapGrowth   int64   `json:"heap_growth_bytes"`
	HeapFraction float64 `json:"heap_growth_fraction"`
	// RestoreSeconds is how long Restore took (transfer and restart).
	RestoreSeconds float64 `json:"restore_seconds,omitempty"`
}

// snapshotResult is what the benchmark prints with -json.
type snapshotResult struct {
	StateBytes int             `json:"state_bytes"`
	Phases     []snapshotPhase `json:"phases"`
}

func runBenchSnapshot(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench snapshot", snapshotUsage, c)
	b := &snapshotBench{}
	state := fs.String("state", "256MiB", "state size (bytes, or with a KiB, MiB or GiB suffix)")
	fs.StringVar(&b.dir, "dir", "", "directory for the members' durable logs (default: a temporary one, removed at the end)")
	fs.DurationVar(&b.heartbeat, "heartbeat", 50*time.Millisecond, "failure detector heartbeat interval")
	fs.DurationVar(&b.timeout, "timeout", time.Minute, "failure detector suspect timeout (long: members write gigabytes on a machine other work shares)")
	fs.DurationVar(&b.runTimeout, "timeout-run", 30*time.Minute, "give up on a run that has not finished this long after it started")
	fs.BoolVar(&b.json, "json", false, "print one JSON object instead of a table")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr (the processes' too)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if b.state, err = parseSize(*state); err != nil {
		return usagef("-state: %v", err)
	}
	switch {
	case b.heartbeat <= 0 || b.timeout <= b.heartbeat:
		return usagef("want 0 < -heartbeat < -timeout")
	case b.runTimeout <= 0:
		return usagef("-timeout-run must be positive")
	}
	return b.run(ctx, c)
}

// run starts etcd and the members, goes through the phases and prints
// the result.
func (b *snapshotBench) run(ctx context.Context, c *cli) (err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.runTimeout, fmt.Errorf("the run took longer than -timeout-run %v", b.runTimeout))
	defer cancel()
	log := newLogger(c.stderr, b.verbose)
	exe := c.self.path
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding this program to run members: %w", err)
		}
	}
	dir := b.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "convoy-bench-snapshot-*"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	w := &snapWatch{procs: newChildren[snapEvent](log, joinEventQueueLen, c.self, c.stderr)}
	defer func() { err = errors.Join(err, w.procs.close(joinExitTimeout)) }()
	start := func(id uint64, args ...string) (*childproc.Proc, error) {
		return w.procs.start(exec.Command(exe, args...), fmt.Sprintf("process %d", id), func(err error) snapEvent {
			return snapEvent{Event: snExited, Node: id, T: time.Now().UnixNano(), Err: errText(err)}
		})
	}
	etcdArgs := []string{"bench", "joinetcd"}
	if b.verbose {
		etcdArgs = append(etcdArgs, "-v")
	}
	if _, err := start(0, etcdArgs...); err != nil {
		return err
	}
	ev, err := w.wait(ctx, 0, snReady, "waiting for etcd")
	if err != nil {
		return err
	}
	endpoints := strings.Join(ev.Endpoints, ",")
	prefix := fmt.Sprintf("/convoy-bench-snapshot/%d-%d/", os.Getpid(), time.Now().UnixNano())
	node := func(id uint64) (*childproc.Proc, error) {
		a := []string{"bench", "snapnode",
			"-id", strconv.FormatUint(id, 10),
			"-etcd", endpoints,
			"-prefix", prefix,
			"-initial", "2",
			"-state", strconv.Itoa(b.state),
			"-data", filepath.Join(dir, strconv.FormatUint(id, 10)),
			"-heartbeat", b.heartbeat.String(),
			"-timeout", b.timeout.String(),
		}
		if b.verbose {
			a = append(a, "-v")
		}
		return start(id, a...)
	}
	command := func(p *childproc.Proc, cmd string) error {
		_, err := io.WriteString(p, cmd+"\n")
		return err
	}
	res := snapshotResult{StateBytes: b.state}
	phase := func(name, member string, ev snapEvent, t0 time.Time) {
		p := snapshotPhase{
			Phase: name, Member: member, Seconds: round(time.Since(t0).Seconds(), 3),
			RSS: ev.RSS, RSSPeak: ev.RSSPeak, RSSGrowth: max(ev.RSSPeak-ev.RSS, 0),
			Heap: ev.Heap, HeapPeak: ev.HeapPeak, HeapGrowth: max(ev.HeapPeak-ev.Heap, 0),
		}
		p.RSSFraction = round(float64(p.RSSGrowth)/float64(b.state), 4)
		p.HeapFraction = round(float64(p.HeapGrowth)/float64(b.state), 4)
		res.Phases = append(res.Phases, p)
		log.Debug("phase", "phase", name, "member", member, "seconds", p.Seconds, "rss_growth", p.RSSGrowth, "heap_growth", p.HeapGrowth)
	}
	// peaks resets the donors' peaks and returns their events.
	donors := map[uint64]*childproc.Proc{}
	peaks := func(doing string) (map[uint64]snapEvent, error) {
		out := map[uint64]snapEvent{}
		for _, p := range donors {
			if err := command(p, "peak"); err != nil {
				return nil, err
			}
		}
		for id := range donors {
			ev, err := w.wait(ctx, id, snPeak, doing)
			if err != nil {
				return nil, err
			}
			out[id] = ev
		}
		return out, nil
	}

	// Members 1 and 3 found the group, so that a majority lives on when
	// the joiner, member 2, restarts.
	for _, id := range []uint64{1, 3} {
		p, err := node(id)
		if err != nil {
			return err
		}
		donors[id] = p
	}
	for _, id := range []uint64{1, 3} {
		if _, err := w.wait(ctx, id, snReady, "waiting for the group to form"); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := command(donors[1], "snapshot"); err != nil {
		return err
	}
	if ev, err = w.wait(ctx, 1, snSnapshot, "waiting for member 1's snapshot"); err != nil {
		return err
	}
	phase("snapshot", "member 1", ev, t0)

	// Member 2 joins; the donors' peaks are reset first.
	if _, err := peaks("waiting for the donors"); err != nil {
		return err
	}
	t0 = time.Now()
	joiner, err := node(2)
	if err != nil {
		return err
	}
	restored, ready, err := w.joined(ctx, 2, "waiting for the joiner's state transfer")
	if err != nil {
		return err
	}
	phase("transfer", "joiner 2", ready, t0)
	res.Phases[len(res.Phases)-1].RestoreSeconds = round(restored.Seconds, 3)
	evs, err := peaks("waiting for the donors")
	if err != nil {
		return err
	}
	for _, id := range []uint64{1, 3} {
		phase("transfer", fmt.Sprintf("donor %d", id), evs[id], t0)
	}

	// The joiner restarts on its log.
	if err := joiner.Stop(joinExitTimeout); err != nil {
		return fmt.Errorf("stopping the joiner: %w", err)
	}
	if _, err := w.wait(ctx, 2, snExited, "waiting for the joiner to exit"); err != nil {
		return err
	}
	t0 = time.Now()
	if _, err := node(2); err != nil {
		return err
	}
	if restored, ready, err = w.joined(ctx, 2, "waiting for the joiner's restart"); err != nil {
		return err
	}
	phase("restart", "joiner 2", ready, t0)
	res.Phases[len(res.Phases)-1].RestoreSeconds = round(restored.Seconds, 3)
	return b.print(c.stdout, res)
}

// snapWatch takes the events of the benchmark's processes, keeping those
// not waited for yet.
type snapWatch struct {
	procs *children[snapEvent]
	early []snapEvent
}

// wait returns the next event of kind want from process id, failing on
// an error or an exit of any process (but the exit awaited).
func (w *snapWatch) wait(ctx context.Context, id uint64, want, doing string) (snapEvent, error) {
	for i := 0; ; i++ {
		var ev snapEvent
		if i < len(w.early) {
			ev = w.early[i]
		} else {
			var err error
			if ev, err = w.procs.next(ctx, doing); err != nil {
				return ev, err
			}
			w.early = append(w.early, ev)
		}
		switch {
		case ev.Node == id && ev.Event == want:
			w.early = append(w.early[:i], w.early[i+1:]...)
			if ev.Err != "" && want != snExited {
				return ev, fmt.Errorf("process %d: %s: %s", id, want, ev.Err)
			}
			return ev, nil
		case ev.Event == snError || ev.Event == snExited:
			return ev, fmt.Errorf("process %d, %s: %s %s", ev.Node, doing, ev.Event, ev.Err)
		}
	}
}

// joined waits until process id has restored its state and is ready.
func (w *snapWatch) joined(ctx context.Context, id uint64, doing string) (restored, ready snapEvent, err error) {
	if restored, err = w.wait(ctx, id, snRestored, doing); err != nil {
		return restored, ready, err
	}
	ready, err = w.wait(ctx, id, snReady, doing)
	return restored, ready, err
}

// print writes the result as a table, or as JSON.
func (b *snapshotBench) print(w io.Writer, r snapshotResult) error {
	if b.json {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "state %s\n\n", formatSize(r.StateBytes))
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tmember\tseconds\trestore s\tRSS before\tRSS peak\tgrowth\tof state\tGo heap before\tpeak\tgrowth\tof state\t")
	for _, p := range r.Phases {
		restore := "-"
		if p.RestoreSeconds != 0 {
			restore = strconv.FormatFloat(p.RestoreSeconds, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t%.1f%%\t\n", p.Phase, p.Member, p.Seconds, restore,
			formatSize(int(p.RSS)), formatSize(int(p.RSSPeak)), formatSize(int(p.RSSGrowth)), 100*p.RSSFraction,
			formatSize(int(p.Heap)), formatSize(int(p.HeapPeak)), formatSize(int(p.HeapGrowth)), 100*p.HeapFraction)
	}
	return tw.Flush()
}
