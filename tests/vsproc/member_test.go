package vsproc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/internal/recfile"
	"github.com/convoy-gcs/convoy/internal/vscheck"
)

// Environment variables that describe a member to a child process.
const (
	envID      = "VSPROC_ID"      // this member's id
	envEtcd    = "VSPROC_ETCD"    // etcd endpoints, comma-separated
	envPrefix  = "VSPROC_PREFIX"  // the group's etcd key prefix
	envInitial = "VSPROC_INITIAL" // Config.InitialMembers
	envAddr    = "VSPROC_ADDR"    // host:port to listen on; port 0 picks a free one
	envOut     = "VSPROC_OUT"     // the file receiving the member's records
	envPause   = "VSPROC_PAUSE"   // pause between two sends, e.g. "2ms"
)

// Member settings: a fast failure detector, so that view changes happen
// within a fraction of a second.
const (
	leaseTTL          = 2 * time.Second
	heartbeatInterval = 10 * time.Millisecond
	// suspectTimeout leaves room for the scheduling delays of a loaded
	// machine (the suite runs packages side by side on two cores), so
	// that a member is rarely suspected because it was not run; three
	// times as much for race builds. A joiner whose transfer is cut
	// short by a false suspicion starts it again in the next view: with
	// suspicions that come faster than a transfer completes, the group
	// changes views without delivering.
	suspectTimeout = 400 * time.Millisecond * raceSlowdown
	// openTimeout bounds joining the group.
	openTimeout = 30 * time.Second
	// sendTimeout bounds one Send (it waits while the window is full).
	sendTimeout = 2 * time.Second
	// flushInterval is how often a member writes its records out: what
	// SIGKILL can lose.
	flushInterval = 5 * time.Millisecond
	// quietFor and quietMax: on SIGTERM a member waits until it has
	// delivered nothing for quietFor, at most quietMax, before it records
	// its state.
	quietFor = 300 * time.Millisecond
	quietMax = 3 * time.Second
	// closeTimeout bounds closing the group on exit.
	closeTimeout = 5 * time.Second
)

// memberSpec is a child process's part, read from its environment.
type memberSpec struct {
	id      convoy.NodeID
	etcd    []string
	prefix  string
	initial int
	addr    string
	out     string
	pause   time.Duration
}

func memberSpecFromEnv() (memberSpec, error) {
	var s memberSpec
	id, err := strconv.ParseUint(os.Getenv(envID), 10, 64)
	if err != nil || id == 0 {
		return s, fmt.Errorf("%s: want a positive id, got %q", envID, os.Getenv(envID))
	}
	s.id = convoy.NodeID(id)
	if s.etcd = strings.Split(os.Getenv(envEtcd), ","); s.etcd[0] == "" {
		return s, fmt.Errorf("%s is empty", envEtcd)
	}
	s.prefix = os.Getenv(envPrefix)
	if s.initial, err = strconv.Atoi(os.Getenv(envInitial)); err != nil || s.initial < 1 {
		return s, fmt.Errorf("%s: want a positive count, got %q", envInitial, os.Getenv(envInitial))
	}
	if s.addr = os.Getenv(envAddr); s.addr == "" {
		return s, fmt.Errorf("%s is empty", envAddr)
	}
	if s.out = os.Getenv(envOut); s.out == "" {
		return s, fmt.Errorf("%s is empty", envOut)
	}
	if s.pause, err = time.ParseDuration(os.Getenv(envPause)); err != nil {
		return s, fmt.Errorf("%s: %w", envPause, err)
	}
	return s, nil
}

// encode is the inverse of memberSpecFromEnv.
func (s memberSpec) encode() []string {
	return []string{
		fmt.Sprintf("%s=%d", envID, s.id),
		envEtcd + "=" + strings.Join(s.etcd, ","),
		envPrefix + "=" + s.prefix,
		fmt.Sprintf("%s=%d", envInitial, s.initial),
		envAddr + "=" + s.addr,
		envOut + "=" + s.out,
		envPause + "=" + s.pause.String(),
	}
}

// record is one line of a member's output file. Exactly one of the
// fields after Inc is set.
type record struct {
	// Inc numbers the incarnations of this process's member from 1: a
	// new one starts after OnView reports that the group excluded this
	// member (View.Excluded).
	Inc      int               `json:"inc"`
	View     *vscheck.View     `json:"view,omitempty"`
	Delivery *vscheck.Delivery `json:"delivery,omitempty"`
	// Excluded is the view that excluded incarnation Inc, as OnView
	// reported it (epoch 0 if the member could not tell which).
	Excluded *vscheck.View `json:"excluded,omitempty"`
	// Accepted is the payload of a message Send accepted, IncBefore the
	// incarnation before Send was called: if it differs from Inc, the
	// message may belong to either incarnation.
	Accepted  string `json:"accepted,omitempty"`
	IncBefore int    `json:"inc_before,omitempty"`
	// SendErr is why a Send failed.
	SendErr string `json:"send_err,omitempty"`
	// Stopped: the member stopped sending.
	Stopped bool `json:"stopped,omitempty"`
	// Failed is the error the group failed with.
	Failed string `json:"failed,omitempty"`
	// Final is the member's state as it exits.
	Final *final `json:"final,omitempty"`
}

// final describes a member's state on exit.
type final struct {
	Checksum string `json:"checksum"`
	Keys     int    `json:"keys"`
	Err      string `json:"err,omitempty"`
}

// recorder writes a member's records, in the order they happen, to its
// file, which writes them out every flushInterval.
type recorder struct {
	mu  sync.Mutex
	f   *recfile.File
	inc int
	// lastDelivery is when the last delivery happened.
	lastDelivery time.Time
}

func newRecorder(f *recfile.File) *recorder {
	return &recorder{f: f, inc: 1, lastDelivery: time.Now()}
}

// addLocked buffers rec, stamped with the incarnation. REQUIRES: r.mu.
func (r *recorder) addLocked(rec record) {
	rec.Inc = r.inc
	r.f.Add(rec)
}

// write buffers rec.
func (r *recorder) write(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(rec)
}

// writeNow writes rec out, with what was buffered, before it returns.
func (r *recorder) writeNow(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Inc = r.inc
	r.f.Write(rec)
}

// view is the member's Config.OnView.
func (r *recorder) view(v convoy.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &vscheck.View{Epoch: v.Epoch, Start: v.Start, Members: make([]uint64, len(v.Members))}
	for i, m := range v.Members {
		out.Members[i] = uint64(m.ID)
	}
	// A view is rare and the checks hinge on it: write it out now.
	if v.Excluded {
		r.f.Write(record{Inc: r.inc, Excluded: out})
		r.inc++
	} else {
		r.f.Write(record{Inc: r.inc, View: out})
	}
}

// deliver records a delivery.
func (r *recorder) deliver(d convoy.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastDelivery = time.Now()
	r.addLocked(record{Delivery: &vscheck.Delivery{
		Epoch: d.Epoch, Index: d.Index, Sender: uint64(d.Sender), Seq: d.Seq, Payload: string(d.Payload),
	}})
}

func (r *recorder) incarnation() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inc
}

// accepted records a payload that Send accepted; before is the
// incarnation before the call.
func (r *recorder) accepted(p string, before int) {
	r.write(record{Accepted: p, IncBefore: before})
}

// sinceDelivery returns the time since the last delivery.
func (r *recorder) sinceDelivery() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.lastDelivery)
}

// runMember is the body of a member process: it joins the group, sends
// until SIGUSR1 or SIGTERM, and on SIGTERM records its final state once
// deliveries have settled, then closes the group.
func runMember(s memberSpec) (err error) {
	f, err := recfile.Open(s.out, flushInterval)
	if err != nil {
		return err
	}
	rec := newRecorder(f)
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", s.out, cerr)
		}
	}()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(sigs)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	kv := kvtest.New()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	g, err := convoy.Open(ctx, convoy.Config{
		Self: s.id,
		Etcd: &convoy.EtcdConfig{Endpoints: s.etcd, Prefix: s.prefix, LeaseTTL: leaseTTL},
		// The transport advertises the address it listens on, so that
		// port 0 (a free port, picked by the kernel) works.
		ListenAddr:        s.addr,
		InitialMembers:    s.initial,
		HeartbeatInterval: heartbeatInterval, SuspectTimeout: suspectTimeout,
		State:  kv,
		OnView: rec.view,
		Logger: log,
	}, func(d convoy.Delivery) {
		kv.Apply(d.Payload)
		rec.deliver(d)
	})
	cancel()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer closeGroup(g, log)

	// Record the group's failure, if it fails.
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := g.Err(); err != nil {
					rec.write(record{Failed: err.Error()})
					return
				}
			case <-watchDone:
				return
			}
		}
	}()

	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		sendLoop(g, s, rec, stop)
	}()
	for sig := range sigs {
		if stop != nil {
			close(stop)
			<-sent
			stop = nil
			rec.writeNow(record{Stopped: true})
		}
		if sig == syscall.SIGTERM {
			break
		}
	}
	deadline := time.Now().Add(quietMax)
	for rec.sinceDelivery() < quietFor && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	sum, keys := kv.Checksum()
	fin := &final{Checksum: sum, Keys: keys}
	if err := g.Err(); err != nil {
		fin.Err = err.Error()
	}
	rec.writeNow(record{Final: fin})
	return nil
}

// sendLoop sends "set <id>-<pid>-<k> <k>" for k = 1, 2, ... until stop
// is closed, recording the accepted ones.
func sendLoop(g *convoy.Group, s memberSpec, rec *recorder, stop <-chan struct{}) {
	pid := os.Getpid()
	lastErr := ""
	for k := 1; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		p := fmt.Sprintf("set %d-%d-%d %d", s.id, pid, k, k)
		before := rec.incarnation()
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		_, err := g.Send(ctx, []byte(p))
		cancel()
		pause := s.pause
		if err != nil {
			// Excluded, rejoining, or waiting out a view change.
			if err.Error() != lastErr {
				rec.write(record{SendErr: err.Error()})
				lastErr = err.Error()
			}
			pause = 20 * time.Millisecond
		} else {
			rec.accepted(p, before)
			lastErr = ""
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

// closeGroup closes g, giving up after closeTimeout.
func closeGroup(g *convoy.Group, log *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Close()
	}()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		log.Error("vsproc: closing the group timed out", "after", closeTimeout)
	}
}
