package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/membership"
)

const joinUsage = `Usage:
  convoy bench join [flags]

Measures state transfer into a joiner, streamed in parallel from -from
donors (Config.MaxDonors), each sending a 1/k slice (CubicRing-style).

Each run starts an etcd process and a group of -nodes member processes
(tcp transport), with a synthetic state of -state bytes that every member
generates on demand and the joiner checks byte by byte. Once the group is
up, one more process joins it; the view that admits it has the first -from
members as donors, which snapshot their parts (each holds its own part and
the next as backup, in a temporary file) and stream them. The benchmark runs the
requested -from and then, unless -baseline=false, -from 1 as the baseline,
each on a fresh group.

With -netns (root only), etcd, every member and the joiner are processes
in network namespaces of their own behind an emulated switch: the members'
and etcd's links run at -rate Mbit/s, the joiner's at -joiner-rate Mbit/s,
in each direction. Without it, everything runs over 127.0.0.1.

Times are taken in the joiner: seconds run from the fetch start (the joiner
installs the view that admits it and asks its donors for their parts; the
donors' snapshots fall inside) until its Restore, which checks every byte,
returns. bytes_per_sec is -state over seconds, and link_fraction is that
over the joiner's link rate (-netns only).
`

// Defaults and bounds of the join benchmark.
const (
	// joinNodePort is the port members listen on, each on its own host.
	joinNodePort = 7000
	// joinEtcdPort is etcd's client port on its host.
	joinEtcdPort = 2379
	// joinExitTimeout is how long processes get to exit once their stdin
	// is closed before they are killed.
	joinExitTimeout = 10 * time.Second
	// joinEventQueueLen bounds the events waiting for the coordinator.
	joinEventQueueLen = 1024
	// joinTargetFraction is the link fraction the benchmark expects from
	// several donors into a joiner whose link they share.
	joinTargetFraction = 0.85
	// joinTimedFrom says where seconds starts, for the output.
	joinTimedFrom = "fetch-start"
)

// joinBench is a parsed "convoy bench join" command line.
type joinBench struct {
	nodes int
	state int
	from  int
	// netns, rateMbit and joinerRateMbit describe the emulated network.
	netns          bool
	rateMbit       int
	joinerRateMbit int
	heartbeat      time.Duration
	timeout        time.Duration
	runTimeout     time.Duration
	// baseline adds the -from 1 run.
	baseline bool
	json     bool
	verbose  bool
}

// joinPart is one part as the joiner received it.
type joinPart struct {
	Part  int    `json:"part"`
	Donor uint64 `json:"donor"`
	Bytes int64  `json:"bytes"`
	// Seconds is when it was complete, from the fetch start.
	Seconds float64 `json:"seconds"`
}

// joinRun is the measurement of one transfer.
type joinRun struct {
	// From is the -from (MaxDonors) of the run; Donors how many donors the
	// joiner fetched from.
	From   int `json:"from"`
	Donors int `json:"donors"`
	// Seconds runs from the fetch start to Restore done; TransferSeconds
	// to the start of Restore (every part received), RestoreSeconds is
	// Restore's own time.
	Seconds         float64 `json:"seconds"`
	TransferSeconds float64 `json:"transfer_seconds"`
	RestoreSeconds  float64 `json:"restore_seconds"`
	// SnapshotSeconds is when the slowest donor had snapshotted its
	// parts, backups included, from the fetch start (donors stamp their
	// own clock, the same machine's); negative if they were done before
	// it. Donors send each slice of their share as soon as it is taken,
	// so this overlaps the transfer.
	SnapshotSeconds float64 `json:"snapshot_seconds"`
	BytesPerSec     float64 `json:"bytes_per_sec"`
	// LinkFraction is BytesPerSec over the joiner's link rate; 0 without
	// -netns.
	LinkFraction float64 `json:"link_fraction"`
	// DonorFailures counts the joiner's troubles with its donors: broken
	// connections, stalls (its parts asked of another donor too) and
	// donors given up on.
	DonorFailures int        `json:"donor_failures"`
	Parts         []joinPart `json:"parts"`
}

// joinResult is the benchmark's output: the requested run, flattened,
// the -from 1 baseline and their ratio.
type joinResult struct {
	Nodes          int    `json:"nodes"`
	StateBytes     int    `json:"state_bytes"`
	Netns          bool   `json:"netns"`
	RateMbit       int    `json:"rate_mbit,omitempty"`
	JoinerRateMbit int    `json:"joiner_rate_mbit,omitempty"`
	TimedFrom      string `json:"timed_from"`
	joinRun
	// Baseline is the -from 1 run; nil if -from is 1 or with
	// -baseline=false.
	Baseline *joinRun `json:"baseline,omitempty"`
	// Ratio is BytesPerSec over the baseline's.
	Ratio float64 `json:"ratio,omitempty"`
	// TargetLinkFraction and MetTarget compare LinkFraction with
	// joinTargetFraction (-netns only; MetTarget is false without).
	TargetLinkFraction float64 `json:"target_link_fraction,omitempty"`
	MetTarget          bool    `json:"met_target"`
}

func runBenchJoin(ctx context.Context, args []string, c *cli) error {
	b, err := parseJoinBench(args, c)
	if err != nil {
		return err
	}
	return b.run(ctx, c)
}

func parseJoinBench(args []string, c *cli) (*joinBench, error) {
	fs := newFlagSet("bench join", joinUsage, c)
	b := &joinBench{}
	fs.IntVar(&b.nodes, "nodes", 5, "members of the group before the join")
	state := fs.String("state", "64MiB", "state size (bytes, or with a KiB, MiB or GiB suffix)")
	fs.IntVar(&b.from, "from", 4, "donors (Config.MaxDonors) of the measured run; a -from 1 run follows as the baseline")
	fs.BoolVar(&b.netns, "netns", false, "run every process in its own network namespace behind a shaped switch (root only)")
	fs.IntVar(&b.rateMbit, "rate", 500, "with -netns: the members' link rate in Mbit/s per direction; 0 leaves them unshaped")
	fs.IntVar(&b.joinerRateMbit, "joiner-rate", 2000, "with -netns: the joiner's link rate in Mbit/s per direction")
	fs.DurationVar(&b.heartbeat, "heartbeat", 50*time.Millisecond, "failure detector heartbeat interval")
	fs.DurationVar(&b.timeout, "timeout", 2*time.Second, "failure detector suspect timeout (donors' loops stop while they snapshot)")
	fs.DurationVar(&b.runTimeout, "timeout-run", 5*time.Minute, "give up on a run that has not finished this long after it started")
	fs.BoolVar(&b.baseline, "baseline", true, "also run -from 1 as the baseline")
	fs.BoolVar(&b.json, "json", false, "print one JSON object instead of a table")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr (the processes' too)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if b.state, err = parseSize(*state); err != nil {
		return nil, usagef("-state: %v", err)
	}
	netOnly := false
	fs.Visit(func(f *flag.Flag) { netOnly = netOnly || f.Name == "rate" || f.Name == "joiner-rate" })
	switch {
	case b.nodes < 1:
		return nil, usagef("-nodes must be positive")
	case b.from < 1 || b.from > b.nodes:
		return nil, usagef("-from: want 1 to -nodes (%d)", b.nodes)
	case b.from > membership.MaxTransferParts:
		return nil, usagef("-from: at most %d", membership.MaxTransferParts)
	case int64(b.state) > membership.DefaultMaxPartBytes:
		// The -from 1 baseline sends the state as one part, which a
		// joiner takes up to membership.DefaultMaxPartBytes.
		return nil, usagef("-state: at most %s (the -from 1 baseline sends it as one part)", formatSize(membership.DefaultMaxPartBytes))
	case b.state < b.from:
		return nil, usagef("-state: at least one byte per donor")
	case netOnly && !b.netns:
		return nil, usagef("-rate and -joiner-rate need -netns")
	case b.rateMbit < 0:
		return nil, usagef("-rate must not be negative")
	case b.joinerRateMbit <= 0:
		return nil, usagef("-joiner-rate must be positive")
	case b.heartbeat <= 0:
		return nil, usagef("-heartbeat must be positive")
	case b.timeout <= b.heartbeat:
		return nil, usagef("-timeout must be longer than -heartbeat")
	case b.runTimeout <= 0:
		return nil, usagef("-timeout-run must be positive")
	}
	return b, nil
}

// joinNet is where the processes of a run live: hosts of a switch, or
// this machine's loopback.
type joinNet struct {
	sw *netns.Switch // nil on loopback
}

// Host indexes on the switch: etcd first, then the members, then the
// joiner.
func (n *joinNet) etcdHost() int        { return 0 }
func (n *joinNet) memberHost(i int) int { return 1 + i }
func (n *joinNet) joinerHost(nodes int) int {
	return 1 + nodes
}

// command returns a command running exe on host h.
func (n *joinNet) command(h int, exe string, args ...string) *exec.Cmd {
	if n.sw == nil {
		return exec.Command(exe, args...)
	}
	return n.sw.Command(context.Background(), h, exe, args...)
}

// listen returns the address to listen on at host h with port.
func (n *joinNet) listen(h, port int) string {
	if n.sw == nil {
		return "127.0.0.1:0"
	}
	return net.JoinHostPort(n.sw.Hosts()[h].Addr.String(), strconv.Itoa(port))
}

// run builds the network and etcd, measures the requested -from and the
// -from 1 baseline, and prints the result.
func (b *joinBench) run(ctx context.Context, c *cli) (err error) {
	log := newLogger(c.stderr, b.verbose)
	exe := c.self.path
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding this program to run members: %w", err)
		}
	}
	jn := &joinNet{}
	if b.netns {
		if err := netns.Check(); err != nil {
			return fmt.Errorf("-netns: %w", err)
		}
		sw, err := netns.New(ctx, netns.Config{Hosts: b.nodes + 2, RateMbit: b.rateMbit, Logger: log})
		if err != nil {
			return err
		}
		// Every process runs inside the switch's namespaces and is ended
		// (by the deferred closes below, which run first) before the
		// switch goes.
		defer func() { err = errors.Join(err, sw.Close()) }()
		jn.sw = sw
		if err := sw.SetHostRate(ctx, jn.joinerHost(b.nodes), b.joinerRateMbit); err != nil {
			return err
		}
		log.Debug("switch up", "name", sw.Name(), "hosts", b.nodes+2, "rate_mbit", b.rateMbit, "joiner_rate_mbit", b.joinerRateMbit)
	}

	etcd := newJoinProcs(log, c)
	defer func() { err = errors.Join(err, etcd.close(joinExitTimeout)) }()
	args := []string{"bench", "joinetcd", "-listen", jn.listen(jn.etcdHost(), joinEtcdPort)}
	if b.verbose {
		args = append(args, "-v")
	}
	if err := startJoinProc(etcd, jn.command(jn.etcdHost(), exe, args...), 0); err != nil {
		return err
	}
	ev, err := etcd.next(ctx, "waiting for etcd")
	if err != nil {
		return err
	}
	if ev.Event != jnReady || len(ev.Endpoints) == 0 {
		return fmt.Errorf("etcd: %s %s", ev.Event, ev.Err)
	}
	endpoints := ev.Endpoints
	log.Debug("etcd up", "endpoints", endpoints)

	runs := []int{b.from}
	if b.baseline && b.from != 1 {
		runs = append(runs, 1)
	}
	var results []joinRun
	for i, from := range runs {
		r, err := b.measure(ctx, c, exe, jn, endpoints, i+1, from, log)
		if err != nil {
			return fmt.Errorf("run with -from %d: %w", from, err)
		}
		log.Debug("run done", "result", r)
		results = append(results, r)
	}
	return b.print(c.stdout, b.summarize(results))
}

// summarize makes the output from the runs: the requested one first, then
// the baseline if any.
func (b *joinBench) summarize(runs []joinRun) joinResult {
	r := joinResult{
		Nodes:      b.nodes,
		StateBytes: b.state,
		Netns:      b.netns,
		TimedFrom:  joinTimedFrom,
		joinRun:    runs[0],
	}
	if b.netns {
		r.RateMbit, r.JoinerRateMbit = b.rateMbit, b.joinerRateMbit
		r.TargetLinkFraction = joinTargetFraction
		r.MetTarget = r.LinkFraction >= joinTargetFraction
	}
	if len(runs) > 1 {
		base := runs[1]
		r.Baseline = &base
		if base.BytesPerSec > 0 {
			r.Ratio = round(r.BytesPerSec/base.BytesPerSec, 3)
		}
	}
	return r
}

// print writes r as JSON or as a table.
func (b *joinBench) print(w io.Writer, r joinResult) error {
	if b.json {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	var sb strings.Builder
	where := "loopback TCP"
	if r.Netns {
		where = fmt.Sprintf("network namespaces, members' links %d Mbit/s, joiner's %d Mbit/s", r.RateMbit, r.JoinerRateMbit)
	}
	fmt.Fprintf(&sb, "# state transfer of %s into a joiner of a %d-member group; %s\n", formatSize(r.StateBytes), r.Nodes, where)
	fmt.Fprintf(&sb, "# seconds from the fetch start (the joiner installs the view that admits it) to Restore done\n")
	fmt.Fprintf(&sb, "%5s %6s %9s %9s %9s %9s %10s %8s\n", "from", "donors", "snapshot", "transfer", "restore", "seconds", "MB/s", "link")
	rows := []joinRun{r.joinRun}
	if r.Baseline != nil {
		rows = append(rows, *r.Baseline)
	}
	for _, x := range rows {
		link := "-"
		if r.Netns {
			link = strconv.FormatFloat(x.LinkFraction, 'f', 3, 64)
		}
		fmt.Fprintf(&sb, "%5d %6d %9.3f %9.3f %9.3f %9.3f %10.1f %8s\n", x.From, x.Donors, x.SnapshotSeconds,
			x.TransferSeconds, x.RestoreSeconds, x.Seconds, x.BytesPerSec/1e6, link)
	}
	if r.Baseline != nil {
		fmt.Fprintf(&sb, "ratio (from %d over from 1): %.2f\n", r.From, r.Ratio)
	}
	if r.Netns {
		verdict := "met"
		if !r.MetTarget {
			verdict = "missed"
		}
		fmt.Fprintf(&sb, "target: link fraction ≥ %.2f with %d donors: %s\n", r.TargetLinkFraction, r.From, verdict)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// measure runs one fresh group with MaxDonors from, lets one more member
// join it and returns the joiner's measurement.
func (b *joinBench) measure(ctx context.Context, c *cli, exe string, jn *joinNet, endpoints []string, run, from int, log *slog.Logger) (_ joinRun, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.runTimeout, fmt.Errorf("the run took longer than -timeout-run %v", b.runTimeout))
	defer cancel()
	procs := newJoinProcs(log, c)
	defer func() { err = errors.Join(err, procs.close(joinExitTimeout)) }()
	prefix := fmt.Sprintf("/convoy-bench-join/%d-%d/run-%d/", os.Getpid(), time.Now().UnixNano(), run)
	args := func(id uint64, host int) []string {
		a := []string{"bench", "joinnode",
			"-id", strconv.FormatUint(id, 10),
			"-listen", jn.listen(host, joinNodePort),
			"-etcd", strings.Join(endpoints, ","),
			"-prefix", prefix,
			"-initial", strconv.Itoa(b.nodes),
			"-state", strconv.Itoa(b.state),
			"-from", strconv.Itoa(from),
			"-heartbeat", b.heartbeat.String(),
			"-timeout", b.timeout.String(),
		}
		if b.verbose {
			a = append(a, "-v")
		}
		return a
	}
	for i := range b.nodes {
		id, h := uint64(i+1), jn.memberHost(i)
		if err := startJoinProc(procs, jn.command(h, exe, args(id, h)...), id); err != nil {
			return joinRun{}, err
		}
	}
	for ready := 0; ready < b.nodes; {
		ev, err := procs.next(ctx, fmt.Sprintf("waiting for the group to form (%d of %d members ready)", ready, b.nodes))
		if err != nil {
			return joinRun{}, err
		}
		switch ev.Event {
		case jnReady:
			ready++
		case jnError, jnExited:
			return joinRun{}, fmt.Errorf("member %d before the join: %s %s", ev.Node, ev.Event, ev.Err)
		}
	}

	// Events are logged (-v) in milliseconds from the joiner's start.
	t0 := time.Now().UnixNano()
	joiner, h := uint64(b.nodes+1), jn.joinerHost(b.nodes)
	if err := startJoinProc(procs, jn.command(h, exe, append(args(joiner, h), "-joiner")...), joiner); err != nil {
		return joinRun{}, err
	}
	w := &joinWatch{joiner: joiner, snapshots: make(map[uint64]int64)}
	for !w.done() {
		ev, err := procs.next(ctx, w.progress())
		if err != nil {
			return joinRun{}, err
		}
		ms := func(t int64) float64 { return round(float64(t-t0)/1e6, 1) }
		attrs := []any{"node", ev.Node, "event", ev.Event, "ms", ms(ev.T), "part", ev.Part, "donor", ev.Donor, "bytes", ev.Bytes}
		if ev.Start != 0 {
			attrs = append(attrs, "start_ms", ms(ev.Start))
		}
		if ev.Err != "" {
			attrs = append(attrs, "err", ev.Err)
		}
		log.Debug("event", attrs...)
		if err := w.add(ev); err != nil {
			return joinRun{}, err
		}
	}
	r := w.result(int64(b.state))
	r.From = from
	if b.netns {
		r.LinkFraction = round(r.BytesPerSec*8/(float64(b.joinerRateMbit)*1e6), 3)
	}
	return r, nil
}

// joinWatch follows the events of one join.
type joinWatch struct {
	joiner uint64
	// fetch is the fetch start, restoreStart and restored Restore's start
	// and end, Unix nanoseconds (0: not yet).
	fetch, restoreStart, restored int64
	donors                        int
	ready                         bool
	parts                         []joinPart
	partT                         []int64
	failures                      int
	// snapshots holds each donor's latest snapshot end.
	snapshots map[uint64]int64
}

// add takes in one event; it returns an error if the run went wrong.
func (w *joinWatch) add(ev joinEvent) error {
	switch ev.Event {
	case jnError, jnExited:
		err := fmt.Errorf("member %d: %s %s", ev.Node, ev.Event, ev.Err)
		if strings.Contains(ev.Err, membership.ErrDonorStalled.Error()) {
			err = fmt.Errorf("%w\n(a donor answers only once it has snapshotted its parts; the joiner asks the next donor too after membership.DefaultStallTimeout, %v, without a reply: see the snapshot times with -v)",
				err, membership.DefaultStallTimeout)
		}
		return err
	case jnSnapshot:
		w.snapshots[ev.Node] = max(w.snapshots[ev.Node], ev.T)
	}
	if ev.Node != w.joiner {
		return nil
	}
	switch ev.Event {
	case jnFetch:
		w.fetch, w.donors = ev.T, ev.Donors
	case jnPart:
		w.parts = append(w.parts, joinPart{Part: ev.Part, Donor: ev.Donor, Bytes: ev.Bytes})
		w.partT = append(w.partT, ev.T)
	case jnDonorFailed:
		w.failures++
	case jnRestored:
		if ev.Err != "" {
			return fmt.Errorf("joiner: restore: %s", ev.Err)
		}
		w.restoreStart, w.restored = ev.Start, ev.T
	case jnReady:
		w.ready = true
	}
	return nil
}

// done reports whether the joiner has restored its state and taken part.
func (w *joinWatch) done() bool { return w.fetch != 0 && w.restored != 0 && w.ready }

// progress describes how far the join has come, for a timeout's error.
func (w *joinWatch) progress() string {
	switch {
	case w.fetch == 0:
		return "waiting for the view that admits the joiner"
	case w.restored == 0:
		return fmt.Sprintf("waiting for the state transfer (%d of %d parts received, %d donor failures)", len(w.parts), w.donors, w.failures)
	}
	return "waiting for the joiner's Open to return"
}

// result computes the measurement, once done.
func (w *joinWatch) result(state int64) joinRun {
	secs := func(t int64) float64 { return round(float64(t-w.fetch)/1e9, 4) }
	r := joinRun{
		Donors:          w.donors,
		Seconds:         secs(w.restored),
		TransferSeconds: secs(w.restoreStart),
		RestoreSeconds:  round(float64(w.restored-w.restoreStart)/1e9, 4),
		DonorFailures:   w.failures,
	}
	var snap int64
	for _, t := range w.snapshots {
		snap = max(snap, t)
	}
	if snap != 0 {
		r.SnapshotSeconds = secs(snap)
	}
	if r.Seconds > 0 {
		r.BytesPerSec = round(float64(state)/r.Seconds, 0)
	}
	for i, p := range w.parts {
		p.Seconds = secs(w.partT[i])
		r.Parts = append(r.Parts, p)
	}
	slices.SortFunc(r.Parts, func(a, b joinPart) int { return a.Part - b.Part })
	return r
}

// joinProcs is a set of processes of the join benchmark.
type joinProcs = children[joinEvent]

func newJoinProcs(log *slog.Logger, c *cli) *joinProcs {
	return newChildren[joinEvent](log, joinEventQueueLen, c.self, c.stderr)
}

// startJoinProc starts cmd as process id (etcd is 0); when it ends, an
// exited event follows its last.
func startJoinProc(ps *joinProcs, cmd *exec.Cmd, id uint64) error {
	_, err := ps.start(cmd, fmt.Sprintf("process %d", id), func(err error) joinEvent {
		return joinEvent{Event: jnExited, Node: id, T: time.Now().UnixNano(), Err: errText(err)}
	})
	return err
}
