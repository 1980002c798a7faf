package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
)

const viewchangeUsage = `Usage:
  convoy bench viewchange [flags]

Measures how long a view-managed group takes to go on without a member
that crashed. It starts an embedded etcd in this process and, for each of
-runs runs, a fresh group of -nodes member processes (tcp transport on
127.0.0.1, atomic mode), each sending -size byte messages at -rate per
second. After -warmup under load it kills one member with SIGKILL (-victim,
or a random member other than the first) and reports, from the kill, when
the first survivor:

  wedge     stopped its part in the old view
  detect    confirmed the suspicion of the victim (failure detector)
  propose   proposed the view without the victim (the leader)
  install   installed that view
  deliver   delivered a message in it (possibly one re-sent from the old view)
  resume    delivered a message sent in it

and when the last survivor installed the view (inst-all) and resumed
(res-all). A survivor's detector may drop its suspicion of the victim
when another path still vouches for it (refuted), which costs it another
suspect timeout.

Members stamp these events with the wall clock, which they share with this
process. The summary gives the medians and compares the median resume time
with the target: the suspect timeout plus 50 ms. With -v, the log shows
every event and every etcd write after the kill.
`

// Defaults and bounds of the viewchange benchmark.
const (
	// vcMinNodes: a view without the victim must hold a majority of the
	// old one.
	vcMinNodes = 3
	// vcTargetSlack is what the target allows beyond the suspect timeout.
	vcTargetSlack = 50 * time.Millisecond
	// vcExitTimeout is how long member processes get to exit once their
	// stdin is closed before they are killed.
	vcExitTimeout = 5 * time.Second
	// vcEventQueueLen bounds the events waiting for the coordinator; a run
	// has a few dozen.
	vcEventQueueLen = 4096
)

// vcExited is the event the coordinator makes up when a member's process
// ends, with its exit error if any; the killed victim's comes too.
const vcExited = "exited"

// vcBench is a parsed "convoy bench viewchange" command line.
type vcBench struct {
	nodes int
	runs  int
	// rate is each member's messages per second; size their bytes.
	rate int
	size int
	// heartbeat and timeout configure the failure detector.
	heartbeat time.Duration
	timeout   time.Duration
	warmup    time.Duration
	// runTimeout bounds each run, from starting its members to the last
	// survivor resuming.
	runTimeout time.Duration
	// victim is the member to kill; 0 picks one at random, never the first.
	victim  int
	json    bool
	verbose bool
}

// vcSample is one run's measurement, in milliseconds from the kill.
type vcSample struct {
	Run    int    `json:"run"`
	Victim uint64 `json:"victim"`
	// Epoch is that of the first view without the victim.
	Epoch           uint64  `json:"epoch"`
	WedgeMs         float64 `json:"wedge_ms"`
	DetectMs        float64 `json:"detect_ms"`
	ProposeMs       float64 `json:"propose_ms"`
	InstallMs       float64 `json:"install_ms"`
	FirstDeliveryMs float64 `json:"first_delivery_ms"`
	ResumeMs        float64 `json:"resume_ms"`
	// InstallLastMs and ResumeLastMs are when the last survivor installed
	// the view and resumed.
	InstallLastMs float64 `json:"install_last_ms"`
	ResumeLastMs  float64 `json:"resume_last_ms"`
	// Refuted counts the suspicions of the victim that a survivor's
	// detector dropped because another path still vouched for it; each
	// costs that survivor another suspect timeout.
	Refuted int `json:"refuted"`
}

// vcResult is the benchmark's output: the settings, the medians over the
// runs, and every run's sample.
type vcResult struct {
	Nodes            int     `json:"nodes"`
	Runs             int     `json:"runs"`
	Rate             int     `json:"rate"`
	Size             int     `json:"size"`
	HeartbeatMs      float64 `json:"heartbeat_ms"`
	SuspectTimeoutMs float64 `json:"suspect_timeout_ms"`
	TargetMs         float64 `json:"target_ms"`
	WedgeMs          float64 `json:"wedge_ms"`
	DetectMs         float64 `json:"detect_ms"`
	ProposeMs        float64 `json:"propose_ms"`
	InstallMs        float64 `json:"install_ms"`
	FirstDeliveryMs  float64 `json:"first_delivery_ms"`
	ResumeMs         float64 `json:"resume_ms"`
	InstallLastMs    float64 `json:"install_last_ms"`
	ResumeLastMs     float64 `json:"resume_last_ms"`
	// MetTarget says whether the median ResumeMs is at most TargetMs.
	MetTarget bool `json:"met_target"`
	// Spoiled counts the runs measured again because a member suspected
	// a survivor (a detector timeout shorter than the pauses of a loaded
	// machine): such a run measures two view changes, not one.
	Spoiled int        `json:"spoiled"`
	Samples []vcSample `json:"samples"`
}

// errFalseSuspicion spoils a run: a member suspected a survivor.
var errFalseSuspicion = errors.New("a member suspected a survivor")

// vcMaxSpoiled bounds the runs measured again, per run asked for.
const vcMaxSpoiled = 3

func runBenchViewChange(ctx context.Context, args []string, c *cli) error {
	b, err := parseViewChangeBench(args, c)
	if err != nil {
		return err
	}
	return b.run(ctx, c)
}

func parseViewChangeBench(args []string, c *cli) (*vcBench, error) {
	fs := newFlagSet("bench viewchange", viewchangeUsage, c)
	b := &vcBench{}
	fs.IntVar(&b.nodes, "nodes", 5, fmt.Sprintf("members in the group, at least %d", vcMinNodes))
	fs.IntVar(&b.runs, "runs", 5, "runs, each on a fresh group")
	fs.IntVar(&b.rate, "rate", 200, "messages per second each member sends")
	size := fs.String("size", "64", fmt.Sprintf("message size (bytes, or with a KiB or MiB suffix), at least %d", vcPayloadHeader))
	fs.DurationVar(&b.heartbeat, "heartbeat", 10*time.Millisecond, "failure detector heartbeat interval")
	fs.DurationVar(&b.timeout, "timeout", 100*time.Millisecond, "failure detector suspect timeout")
	fs.IntVar(&b.victim, "victim", 0, "id of the member to kill, from 1 to -nodes (0: a random one other than 1)")
	fs.DurationVar(&b.warmup, "warmup", 500*time.Millisecond, "how long the group runs under load before the kill")
	fs.DurationVar(&b.runTimeout, "timeout-run", 30*time.Second, "give up on a run that has not finished this long after it started")
	fs.BoolVar(&b.json, "json", false, "print one JSON object instead of a table")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr (the members' too)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if b.size, err = parseSize(*size); err != nil {
		return nil, usagef("-size: %v", err)
	}
	switch {
	case b.nodes < vcMinNodes:
		return nil, usagef("-nodes: at least %d (the survivors must be a majority)", vcMinNodes)
	case b.runs < 1:
		return nil, usagef("-runs must be positive")
	case b.rate < 1:
		return nil, usagef("-rate must be positive")
	case b.size < vcPayloadHeader:
		return nil, usagef("-size: at least %d bytes (a message carries its epoch and send time)", vcPayloadHeader)
	case b.size > convoy.DefaultMaxMessageBytes:
		return nil, usagef("-size: at most %s", formatSize(convoy.DefaultMaxMessageBytes))
	case b.heartbeat <= 0:
		return nil, usagef("-heartbeat must be positive")
	case b.timeout <= b.heartbeat:
		return nil, usagef("-timeout must be longer than -heartbeat")
	case b.victim < 0 || b.victim > b.nodes:
		return nil, usagef("-victim: want 0 or an id from 1 to %d", b.nodes)
	case b.warmup < 0:
		return nil, usagef("-warmup must not be negative")
	case b.runTimeout <= 0:
		return nil, usagef("-timeout-run must be positive")
	}
	return b, nil
}

// target is the resume time the benchmark compares against.
func (b *vcBench) target() time.Duration { return b.timeout + vcTargetSlack }

// run measures -runs view changes around one embedded etcd and prints
// the result.
func (b *vcBench) run(ctx context.Context, c *cli) error {
	log := newLogger(c.stderr, b.verbose)
	exe := c.self.path
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding this program to run members: %w", err)
		}
	}
	// etcd's warnings are about its own setup and shutdown (a single node,
	// no TLS); they reach stderr only with -v.
	etcdLog := slog.New(slog.DiscardHandler)
	if b.verbose {
		etcdLog = log
	}
	srv, err := etcddev.Start(ctx, etcddev.Config{Logger: etcdLog})
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer srv.Close()
	log.Debug("embedded etcd up", "endpoints", srv.Endpoints())

	var (
		samples []vcSample
		spoiled int
	)
	for i := 0; i < b.runs; {
		victim := uint64(b.victim)
		if victim == 0 {
			victim = 2 + rand.Uint64N(uint64(b.nodes-1))
		}
		s, err := b.measure(ctx, c, exe, srv, i+1+spoiled, victim, log)
		if errors.Is(err, errFalseSuspicion) && spoiled < vcMaxSpoiled*b.runs {
			spoiled++
			log.Warn("run spoiled, measuring it again", "run", i+1, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("run %d (victim %d): %w", i+1, victim, err)
		}
		log.Debug("run done", "sample", s)
		s.Run = i + 1
		samples = append(samples, s)
		i++
	}
	r := b.summarize(samples)
	r.Spoiled = spoiled
	return b.print(c.stdout, r)
}

// summarize computes the medians of samples.
func (b *vcBench) summarize(samples []vcSample) vcResult {
	med := func(f func(vcSample) float64) float64 {
		xs := make([]float64, len(samples))
		for i, s := range samples {
			xs[i] = f(s)
		}
		return round(medianFloat(xs), 2)
	}
	r := vcResult{
		Nodes:            b.nodes,
		Runs:             len(samples),
		Rate:             b.rate,
		Size:             b.size,
		HeartbeatMs:      msOf(b.heartbeat),
		SuspectTimeoutMs: msOf(b.timeout),
		TargetMs:         msOf(b.target()),
		WedgeMs:          med(func(s vcSample) float64 { return s.WedgeMs }),
		DetectMs:         med(func(s vcSample) float64 { return s.DetectMs }),
		ProposeMs:        med(func(s vcSample) float64 { return s.ProposeMs }),
		InstallMs:        med(func(s vcSample) float64 { return s.InstallMs }),
		FirstDeliveryMs:  med(func(s vcSample) float64 { return s.FirstDeliveryMs }),
		ResumeMs:         med(func(s vcSample) float64 { return s.ResumeMs }),
		InstallLastMs:    med(func(s vcSample) float64 { return s.InstallLastMs }),
		ResumeLastMs:     med(func(s vcSample) float64 { return s.ResumeLastMs }),
		Samples:          samples,
	}
	r.MetTarget = r.ResumeMs <= r.TargetMs
	return r
}

// print writes r as JSON or as a table.
func (b *vcBench) print(w io.Writer, r vcResult) error {
	if b.json {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# view change after kill -9: %d member processes, loopback TCP, atomic; %d msgs/s of %s per member; heartbeat %v, suspect timeout %v\n",
		r.Nodes, r.Rate, formatSize(r.Size), b.heartbeat, b.timeout)
	fmt.Fprintf(&sb, "# milliseconds from the kill to the first survivor's event (and, for install and resume, the last survivor's)\n")
	fmt.Fprintf(&sb, "%-7s %6s %5s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n",
		"run", "victim", "epoch", "wedge", "detect", "propose", "install", "deliver", "resume", "inst-all", "res-all", "refuted")
	row := func(run, victim, epoch, refuted string, s vcSample) {
		fmt.Fprintf(&sb, "%-7s %6s %5s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7s\n", run, victim, epoch,
			s.WedgeMs, s.DetectMs, s.ProposeMs, s.InstallMs, s.FirstDeliveryMs, s.ResumeMs, s.InstallLastMs, s.ResumeLastMs, refuted)
	}
	for _, s := range r.Samples {
		row(strconv.Itoa(s.Run), strconv.FormatUint(s.Victim, 10), strconv.FormatUint(s.Epoch, 10), strconv.Itoa(s.Refuted), s)
	}
	row("median", "", "", "", vcSample{
		WedgeMs: r.WedgeMs, DetectMs: r.DetectMs, ProposeMs: r.ProposeMs, InstallMs: r.InstallMs,
		FirstDeliveryMs: r.FirstDeliveryMs, ResumeMs: r.ResumeMs, InstallLastMs: r.InstallLastMs, ResumeLastMs: r.ResumeLastMs,
	})
	verdict := "met"
	if !r.MetTarget {
		verdict = "missed"
	}
	fmt.Fprintf(&sb, "target: median resume ≤ %.0f ms (suspect timeout + %v): %s\n", r.TargetMs, vcTargetSlack, verdict)
	if r.Spoiled > 0 {
		fmt.Fprintf(&sb, "measured again: %d runs in which a member suspected a survivor\n", r.Spoiled)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// measure runs one fresh group, kills victim under load and returns the
// times of what followed.
func (b *vcBench) measure(ctx context.Context, c *cli, exe string, srv *etcddev.Server, run int, victim uint64, log *slog.Logger) (_ vcSample, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.runTimeout, fmt.Errorf("the run took longer than -timeout-run %v", b.runTimeout))
	defer cancel()
	endpoints := srv.Endpoints()
	cl := vcCluster{newChildren[vcEvent](log, vcEventQueueLen, c.self, c.stderr)}
	defer func() {
		if cerr := cl.close(vcExitTimeout); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	prefix := fmt.Sprintf("/convoy-bench-viewchange/run-%d/", run)
	var kill atomic.Int64 // Unix nanoseconds; 0 before the kill
	if b.verbose {
		// The etcd side of the view change, for the debug log.
		var wg sync.WaitGroup
		defer wg.Wait()
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		if err := watchEtcd(wctx, &wg, srv, prefix, &kill, log); err != nil {
			return vcSample{}, err
		}
	}
	for i := range b.nodes {
		args := []string{"bench", "vcnode",
			"-id", strconv.Itoa(i + 1),
			"-listen", "127.0.0.1:0",
			"-etcd", strings.Join(endpoints, ","),
			"-prefix", prefix,
			"-initial", strconv.Itoa(b.nodes),
			"-heartbeat", b.heartbeat.String(),
			"-timeout", b.timeout.String(),
			"-rate", strconv.Itoa(b.rate),
			"-size", strconv.Itoa(b.size),
		}
		if b.verbose {
			args = append(args, "-v")
		}
		if err := cl.start(exe, uint64(i+1), args); err != nil {
			return vcSample{}, err
		}
	}

	// Wait until every member takes part in the first view and delivers
	// messages sent in it: the load is on.
	flowing := make(map[uint64]bool)
	var epoch uint64 // the view the victim is killed in
	for len(flowing) < b.nodes {
		ev, err := cl.next(ctx, "waiting for the group to form and deliver")
		if err != nil {
			return vcSample{}, err
		}
		switch ev.Event {
		case vcConfirmed:
			return vcSample{}, fmt.Errorf("member %d before the kill suspects member %d: %w", ev.Node, ev.Peer, errFalseSuspicion)
		case vcError, vcFailed, vcExited:
			return vcSample{}, fmt.Errorf("member %d before the kill: %s %s%s", ev.Node, ev.Event, ev.Err, ev.Reason)
		case vcResume:
			flowing[ev.Node] = true
			epoch = max(epoch, ev.Epoch)
		case vcView:
			if len(ev.Members) != b.nodes {
				return vcSample{}, fmt.Errorf("member %d installed view %d of %d members, want %d", ev.Node, ev.Epoch, len(ev.Members), b.nodes)
			}
		}
	}
	if err := cl.idle(ctx, b.warmup); err != nil {
		return vcSample{}, err
	}

	// Kill the victim and watch the survivors.
	kill.Store(time.Now().UnixNano())
	if err := cl.procs[victim-1].Kill(); err != nil {
		return vcSample{}, err
	}
	log.Debug("killed", "member", victim, "epoch", epoch)
	w := newVCWatch(victim, kill.Load(), b.nodes)
	for !w.done() {
		ev, err := cl.next(ctx, w.progress())
		if err != nil {
			return vcSample{}, err
		}
		log.Debug("after the kill", "ms", round(float64(ev.T-w.kill)/1e6, 2), "event", ev.Event, "member", ev.Node, "epoch", ev.Epoch, "peer", ev.Peer)
		if err := w.add(ev); err != nil {
			return vcSample{}, err
		}
	}
	s := w.sample()
	s.Run = run
	if s.Epoch != epoch+1 {
		log.Warn("the group went through more than one view", "run", run, "killed_in", epoch, "first_without_victim", s.Epoch)
	}
	return s, nil
}

// watchEtcd logs, at debug level, every write under prefix after the
// kill, timed from the kill as this process sees it.
func watchEtcd(ctx context.Context, wg *sync.WaitGroup, srv *etcddev.Server, prefix string, kill *atomic.Int64, log *slog.Logger) error {
	cli, err := srv.Client(ctx)
	if err != nil {
		return err
	}
	wg.Go(func() {
		defer cli.Close()
		for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix()) {
			now := time.Now().UnixNano()
			k := kill.Load()
			if k == 0 {
				continue
			}
			for _, ev := range wr.Events {
				log.Debug("etcd after the kill", "ms", round(float64(now-k)/1e6, 2), "op", ev.Type,
					"key", strings.TrimPrefix(string(ev.Kv.Key), prefix), "rev", ev.Kv.ModRevision)
			}
		}
	})
	return nil
}

// vcWatch follows the survivors' events after the kill.
type vcWatch struct {
	victim    uint64
	kill      int64 // Unix nanoseconds
	survivors int
	// epoch is that of the first view without the victim; 0 until a
	// survivor installs it.
	epoch uint64
	// first and last hold the earliest and the latest time of each event
	// at any survivor.
	first, last map[string]int64
	// installed and resumed hold the survivors that installed the view
	// and delivered a message sent in it (or a later one).
	installed, resumed map[uint64]bool
	// later holds events of epochs after the kill that came before the
	// view's epoch was known.
	later []vcEvent
	// refuted counts the survivors' refuted suspicions of the victim.
	refuted int
}

func newVCWatch(victim uint64, kill int64, nodes int) *vcWatch {
	return &vcWatch{
		victim: victim, kill: kill, survivors: nodes - 1,
		first: make(map[string]int64), last: make(map[string]int64),
		installed: make(map[uint64]bool), resumed: make(map[uint64]bool),
	}
}

// add takes in one event; it returns an error if the run went wrong.
func (w *vcWatch) add(ev vcEvent) error {
	if ev.Node == w.victim {
		return nil // its last words before the kill
	}
	switch ev.Event {
	case vcError, vcFailed:
		return fmt.Errorf("member %d: %s: %s%s", ev.Node, ev.Event, ev.Err, ev.Reason)
	case vcExited:
		if ev.Err != "" {
			return fmt.Errorf("member %d exited: %s", ev.Node, ev.Err)
		}
		return fmt.Errorf("member %d exited", ev.Node)
	case vcWedged:
		w.earliest(ev.Event, ev.T)
	case vcRefuted:
		if ev.Peer == w.victim {
			w.refuted++
		}
	case vcConfirmed:
		if ev.Peer != w.victim {
			return fmt.Errorf("member %d suspects member %d: %w", ev.Node, ev.Peer, errFalseSuspicion)
		}
		w.earliest(ev.Event, ev.T)
	case vcView:
		if ev.Excluded {
			return fmt.Errorf("member %d was excluded from view %d with the victim", ev.Node, ev.Epoch)
		}
		if w.epoch == 0 && !slices.Contains(ev.Members, w.victim) {
			if len(ev.Members) != w.survivors {
				return fmt.Errorf("view %d holds %d members, want the %d survivors", ev.Epoch, len(ev.Members), w.survivors)
			}
			w.epoch = ev.Epoch
			later := w.later
			w.later = nil
			for _, e := range later {
				w.addLater(e)
			}
		}
		w.addLater(ev)
	case vcProposing, vcFirst, vcResume:
		w.addLater(ev)
	}
	return nil
}

// addLater takes in an event that counts once it belongs to the view
// without the victim.
func (w *vcWatch) addLater(ev vcEvent) {
	if w.epoch == 0 {
		w.later = append(w.later, ev)
		return
	}
	if ev.Epoch < w.epoch {
		return
	}
	switch ev.Event {
	case vcProposing:
		if ev.Epoch == w.epoch {
			w.earliest(ev.Event, ev.T)
		}
	case vcView:
		if ev.Epoch == w.epoch {
			w.earliest(ev.Event, ev.T)
		}
		w.installed[ev.Node] = true
	case vcFirst:
		w.earliest(ev.Event, ev.T)
	case vcResume:
		// A survivor's first resume counts; a later view's does not
		// move its time.
		if !w.resumed[ev.Node] {
			w.earliest(ev.Event, ev.T)
		}
		w.resumed[ev.Node] = true
	}
}

// earliest records t for event if it is the earliest or the latest so
// far.
func (w *vcWatch) earliest(event string, t int64) {
	if old, ok := w.first[event]; !ok || t < old {
		w.first[event] = t
	}
	if old, ok := w.last[event]; !ok || t > old {
		w.last[event] = t
	}
}

// done reports whether every survivor has resumed and every time is known.
func (w *vcWatch) done() bool {
	if len(w.resumed) < w.survivors {
		return false
	}
	for _, e := range []string{vcWedged, vcConfirmed, vcProposing, vcView, vcFirst, vcResume} {
		if _, ok := w.first[e]; !ok {
			return false
		}
	}
	return true
}

// progress describes how far the run has come, for a timeout's error.
func (w *vcWatch) progress() string {
	var seen []string
	for _, e := range []string{vcWedged, vcConfirmed, vcProposing, vcView, vcFirst, vcResume} {
		if t, ok := w.first[e]; ok {
			seen = append(seen, fmt.Sprintf("%s after %.1fms", e, float64(t-w.kill)/1e6))
		}
	}
	if len(seen) == 0 {
		seen = append(seen, "nothing")
	}
	return fmt.Sprintf("waiting for the view change after killing member %d (seen: %s; %d of %d survivors installed the view without it, %d resumed)",
		w.victim, strings.Join(seen, ", "), len(w.installed), w.survivors, len(w.resumed))
}

// sample returns the times, once done.
func (w *vcWatch) sample() vcSample {
	ms := func(event string) float64 { return round(float64(w.first[event]-w.kill)/1e6, 2) }
	lastMs := func(event string) float64 { return round(float64(w.last[event]-w.kill)/1e6, 2) }
	return vcSample{
		Victim:          w.victim,
		Epoch:           w.epoch,
		WedgeMs:         ms(vcWedged),
		DetectMs:        ms(vcConfirmed),
		ProposeMs:       ms(vcProposing),
		InstallMs:       ms(vcView),
		FirstDeliveryMs: ms(vcFirst),
		ResumeMs:        ms(vcResume),
		InstallLastMs:   lastMs(vcView),
		ResumeLastMs:    lastMs(vcResume),
		Refuted:         w.refuted,
	}
}

// vcCluster is the member processes of one run.
type vcCluster struct {
	*children[vcEvent]
}

// start starts member id's process; when it ends, an exited event
// follows its last.
func (cl vcCluster) start(exe string, id uint64, args []string) error {
	_, err := cl.children.start(exec.Command(exe, args...), fmt.Sprintf("member %d", id), func(err error) vcEvent {
		return vcEvent{Event: vcExited, Node: id, T: time.Now().UnixNano(), Err: errText(err)}
	})
	return err
}

// idle lets the group run for d, failing if a member reports an error.
func (cl vcCluster) idle(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, d, errIdleOver)
	defer cancel()
	for {
		ev, err := cl.next(ctx, "warming up")
		switch {
		case errors.Is(err, errIdleOver):
			return nil
		case err != nil:
			return err
		}
		switch ev.Event {
		case vcConfirmed:
			return fmt.Errorf("member %d while warming up suspects member %d: %w", ev.Node, ev.Peer, errFalseSuspicion)
		case vcError, vcFailed, vcExited:
			return fmt.Errorf("member %d before the kill: %s %s%s (peer %d)", ev.Node, ev.Event, ev.Err, ev.Reason, ev.Peer)
		case vcView:
			return fmt.Errorf("member %d installed view %d before the kill", ev.Node, ev.Epoch)
		}
	}
}

var errIdleOver = errors.New("warmup over")

// medianFloat returns the median of xs (the mean of the middle two for an
// even count), or 0 for none.
func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// msOf returns d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
