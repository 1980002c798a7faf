package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-gcs/convoy"
)

const vcnodeUsage = `Usage:
  convoy bench vcnode -id N -etcd URL,... -prefix P -initial N [flags]

Runs one member of a view-managed group for "convoy bench viewchange",
which starts these itself. The member listens on -listen (tcp transport),
sends -size byte messages at -rate per second once it takes part in a view,
and prints what it sees as JSON lines on stdout, each stamped with this
machine's wall clock (Unix nanoseconds):

  ready              Open returned: the member takes part in a view
  view               a view was installed (Config.OnView)
  suspect-confirmed  the failure detector confirmed a suspicion (the
                     library's "member failed" log message)
  suspicion-refuted  another path refuted a suspicion
  wedged             the member stopped its part in a view that is ending
  proposing          the member, as leader, proposes the next view
  first-delivery     the first delivery of an epoch
  resume             the first delivery of an epoch of a message its
                     sender sent in that epoch
  failed, error      the group failed, or sending failed

It runs until its stdin ends.
`

// vcPayloadHeader is the part of every message the benchmark reads: the
// epoch its sender took part in when it sent it, and the send time.
const vcPayloadHeader = 16

// Events a vcnode prints.
const (
	vcReady     = "ready"
	vcView      = "view"
	vcConfirmed = "suspect-confirmed"
	vcRefuted   = "suspicion-refuted"
	vcWedged    = "wedged"
	vcProposing = "proposing"
	vcFirst     = "first-delivery"
	vcResume    = "resume"
	vcFailed    = "failed"
	vcError     = "error"
)

// vcEvent is one line a vcnode prints.
type vcEvent struct {
	Event string `json:"event"`
	Node  uint64 `json:"node"`
	// T is when it happened: the member's wall clock, Unix nanoseconds.
	T     int64  `json:"t"`
	Epoch uint64 `json:"epoch,omitempty"`
	// Peer is the member a confirmed suspicion names.
	Peer uint64 `json:"peer,omitempty"`
	// Members and Left describe a view; Excluded that it went on without
	// this member.
	Members  []uint64 `json:"members,omitempty"`
	Left     []uint64 `json:"left,omitempty"`
	Excluded bool     `json:"excluded,omitempty"`
	// Reason and Err explain suspicions, wedges and failures.
	Reason string `json:"reason,omitempty"`
	Err    string `json:"err,omitempty"`
}

// vcNode is the body of a vcnode process.
type vcNode struct {
	id   convoy.NodeID
	emit func(vcEvent)
	// epoch is the view this member takes part in, as OnView last said;
	// messages carry it.
	epoch atomic.Uint64
	// nudge wakes the sender when a view is installed, so that the new
	// view's first message goes out at once.
	nudge chan struct{}

	// Touched only by the handler, on the group's goroutine.
	lastEpoch, lastFresh uint64
}

// runBenchVCNode is "convoy bench vcnode": one member process of the
// viewchange benchmark.
func runBenchVCNode(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench vcnode", vcnodeUsage, c)
	id := fs.Uint64("id", 0, "this member's id")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on, host:port")
	endpoints := fs.String("etcd", "", "etcd endpoints, comma-separated")
	prefix := fs.String("prefix", "", "etcd key prefix of the group")
	initial := fs.Int("initial", 1, "members that found the group")
	heartbeat := fs.Duration("heartbeat", 10*time.Millisecond, "failure detector heartbeat interval")
	timeout := fs.Duration("timeout", 100*time.Millisecond, "failure detector suspect timeout")
	lease := fs.Duration("lease", 0, "etcd lease TTL (0: the library's default)")
	rate := fs.Int("rate", 200, "messages sent per second")
	size := fs.Int("size", 64, fmt.Sprintf("message size in bytes, at least %d", vcPayloadHeader))
	verbose := fs.Bool("v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *id == 0 || *endpoints == "" || *prefix == "":
		return usagef("bench vcnode: -id, -etcd and -prefix are required")
	case *rate < 1:
		return usagef("bench vcnode: -rate must be positive")
	case *size < vcPayloadHeader:
		return usagef("bench vcnode: -size must be at least %d", vcPayloadHeader)
	}

	var mu sync.Mutex
	enc := json.NewEncoder(c.stdout)
	errLog := newLogger(c.stderr, *verbose).With("node", *id)
	n := &vcNode{id: convoy.NodeID(*id), nudge: make(chan struct{}, 1)}
	n.emit = func(ev vcEvent) {
		ev.Node = uint64(n.id)
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(ev); err != nil {
			errLog.Warn("writing event", "err", err)
		}
	}

	// The member runs until the coordinator closes stdin (or dies, which
	// closes it too).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, c.stdin)
		cancel()
	}()

	// The library's own warnings are what this benchmark provokes; they
	// reach stderr only with -v.
	level := slog.LevelError
	if *verbose {
		level = slog.LevelDebug
	}
	inner := slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})
	cfg := convoy.Config{
		Self: n.id,
		Etcd: &convoy.EtcdConfig{
			Endpoints: strings.Split(*endpoints, ","),
			Prefix:    *prefix,
			LeaseTTL:  *lease,
		},
		ListenAddr:        *listen,
		InitialMembers:    *initial,
		HeartbeatInterval: *heartbeat,
		SuspectTimeout:    *timeout,
		Mode:              convoy.Atomic,
		OnView:            n.onView,
		Logger:            slog.New(&vcLogHandler{inner: inner, emit: n.emit}),
	}
	g, err := convoy.Open(ctx, cfg, n.deliver)
	if err != nil {
		n.emit(vcEvent{Event: vcError, T: time.Now().UnixNano(), Err: err.Error()})
		return fmt.Errorf("open member %d: %w", n.id, err)
	}
	defer g.Close()
	n.emit(vcEvent{Event: vcReady, T: time.Now().UnixNano(), Epoch: n.epoch.Load()})
	n.send(ctx, g, *rate, *size)
	return nil
}

// onView is the member's Config.OnView.
func (n *vcNode) onView(v convoy.View) {
	ev := vcEvent{Event: vcView, T: time.Now().UnixNano(), Epoch: v.Epoch, Excluded: v.Excluded}
	for _, m := range v.Members {
		ev.Members = append(ev.Members, uint64(m.ID))
	}
	for _, id := range v.Left {
		ev.Left = append(ev.Left, uint64(id))
	}
	n.emit(ev)
	if v.Excluded {
		n.epoch.Store(0)
		return
	}
	n.epoch.Store(v.Epoch)
	select {
	case n.nudge <- struct{}{}:
	default:
	}
}

// deliver is the member's Handler: it reports the first delivery of each
// epoch and the first of a message sent in that epoch.
func (n *vcNode) deliver(d convoy.Delivery) {
	var now int64
	if d.Epoch > n.lastEpoch {
		now = time.Now().UnixNano()
		n.lastEpoch = d.Epoch
		n.emit(vcEvent{Event: vcFirst, T: now, Epoch: d.Epoch})
	}
	if d.Epoch > n.lastFresh && len(d.Payload) >= vcPayloadHeader && binary.BigEndian.Uint64(d.Payload) == d.Epoch {
		if now == 0 {
			now = time.Now().UnixNano()
		}
		n.lastFresh = d.Epoch
		n.emit(vcEvent{Event: vcResume, T: now, Epoch: d.Epoch})
	}
}

// send sends size byte messages at rate per second until ctx ends, and
// one at once whenever a view is installed.
func (n *vcNode) send(ctx context.Context, g *convoy.Group, rate, size int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.nudge:
		}
		epoch := n.epoch.Load()
		if epoch == 0 {
			continue // excluded: rejoining
		}
		p := make([]byte, size)
		binary.BigEndian.PutUint64(p[0:8], epoch)
		binary.BigEndian.PutUint64(p[8:16], uint64(time.Now().UnixNano()))
		_, err := g.Send(ctx, p)
		switch {
		case err == nil:
		case ctx.Err() != nil, errors.Is(err, convoy.ErrClosed):
			return
		case errors.Is(err, convoy.ErrNotMember), errors.Is(err, convoy.ErrExcluded):
			// Between views of this member: the coordinator sees why.
		default:
			n.emit(vcEvent{Event: vcError, T: time.Now().UnixNano(), Epoch: epoch, Err: "send: " + err.Error()})
			if errors.Is(err, convoy.ErrFailed) {
				return
			}
		}
	}
}

// vcLogHandler passes log records to inner and turns the library's
// messages about a view change into events.
type vcLogHandler struct {
	inner slog.Handler
	emit  func(vcEvent)
}

// vcLogEvents maps the library's log messages to events.
var vcLogEvents = map[string]string{
	"member failed":                  vcConfirmed,
	"wedged":                         vcWedged,
	"proposing view":                 vcProposing,
	"group failed":                   vcFailed,
	"loop panicked":                  vcFailed,
	"view change":                    vcError,
	"cannot end the view at its cut": vcError,
}

func (h *vcLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.inner.Enabled(ctx, l)
}

func (h *vcLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if name, ok := vcLogEvents[r.Message]; ok {
		ev := vcEvent{Event: name, T: r.Time.UnixNano()}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "peer":
				ev.Peer = attrUint(a.Value)
			case "epoch":
				ev.Epoch = attrUint(a.Value)
			case "reason":
				ev.Reason = a.Value.String()
			case "err":
				ev.Err = a.Value.String()
			}
			return true
		})
		if name == vcError {
			ev.Err = r.Message + ": " + ev.Err
		}
		h.emit(ev)
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *vcLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &vcLogHandler{inner: h.inner.WithAttrs(as), emit: h.emit}
}

func (h *vcLogHandler) WithGroup(name string) slog.Handler {
	return &vcLogHandler{inner: h.inner.WithGroup(name), emit: h.emit}
}

// attrUint reads a log attribute holding a number, such as a NodeID (a
// named integer type, which slog keeps as KindAny).
func attrUint(v slog.Value) uint64 {
	switch v.Kind() {
	case slog.KindUint64:
		return v.Uint64()
	case slog.KindInt64:
		return uint64(v.Int64())
	}
	u, _ := strconv.ParseUint(fmt.Sprint(v.Any()), 10, 64)
	return u
}
