package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
)

const joinnodeUsage = `Usage:
  convoy bench joinnode -id N -listen ADDR -etcd URL,... -prefix P -initial N -state SIZE -from K [-joiner]

Runs one member of a view-managed group for "convoy bench join", which
starts these itself. The member's state is -state bytes of a synthetic,
deterministic pseudo-random stream: its snapshots generate the stream and
its Restore checks every byte. It prints what it sees as JSON lines on
stdout, each stamped with this machine's wall clock (Unix nanoseconds):

  ready          Open returned: the member takes part in a view (a joiner:
                 with its state restored)
  snapshot       the member, as donor, snapshotted a part (start and end)
  fetch          the joiner entered the view that admits it and started
                 fetching its state (the library's "entered view" log)
  part           the joiner received a part (the library's debug log)
  donor-failed   the joiner gave up on a donor
  restored       Restore returned (start and end; err if the state was
                 wrong)
  error          something failed

It runs until its stdin ends.
`

const joinetcdUsage = `Usage:
  convoy bench joinetcd -listen ADDR

Runs the embedded etcd of "convoy bench join" in a process of its own, so
that it can sit on a host of the emulated switch. It prints one JSON line,
{"event":"ready","endpoints":[...]}, once etcd serves clients, and runs
until its stdin ends.
`

// Events a joinnode or joinetcd prints.
const (
	jnReady        = "ready"
	jnSnapshot     = "snapshot"
	jnFetch        = "fetch"
	jnPart         = "part"
	jnDonorFailed  = "donor-failed"
	jnRestored     = "restored"
	jnError        = "error"
	jnExited       = "exited" // made up by the coordinator
	synthBlockSize = 1 << 20
)

// joinEvent is one line a joinnode or joinetcd prints.
type joinEvent struct {
	Event string `json:"event"`
	Node  uint64 `json:"node,omitempty"`
	// T is when it happened (for snapshot and restored: when it ended),
	// Unix nanoseconds; Start is when a snapshot or a Restore started.
	T     int64  `json:"t"`
	Start int64  `json:"start,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
	// Part, Of, Donor and Bytes describe a part; Donors is how many
	// donors a joiner fetches from.
	Part   int    `json:"part,omitempty"`
	Of     int    `json:"of,omitempty"`
	Donor  uint64 `json:"donor,omitempty"`
	Donors int    `json:"donors,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Endpoints are etcd's client URLs.
	Endpoints []string `json:"endpoints,omitempty"`
	Err       string   `json:"err,omitempty"`
}

// newEventWriter returns a function that prints events as JSON lines on
// w, safe for concurrent use.
func newEventWriter(w io.Writer, node uint64, log *slog.Logger) func(joinEvent) {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(ev joinEvent) {
		ev.Node = node
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(ev); err != nil {
			log.Warn("writing event", "err", err)
		}
	}
}

// untilStdinEnds returns a context that is cancelled when c's stdin ends:
// the coordinator closed it, or died.
func untilStdinEnds(ctx context.Context, c *cli) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, c.stdin)
		cancel()
	}()
	return ctx, cancel
}

// runBenchJoinEtcd is "convoy bench joinetcd": the etcd of the join
// benchmark.
func runBenchJoinEtcd(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench joinetcd", joinetcdUsage, c)
	listen := fs.String("listen", "127.0.0.1:0", "client address to listen on, host:port")
	verbose := fs.Bool("v", false, "log etcd's warnings to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log := newLogger(c.stderr, *verbose).With("process", "etcd")
	etcdLog := slog.New(slog.DiscardHandler)
	if *verbose {
		etcdLog = log
	}
	emit := newEventWriter(c.stdout, 0, log)
	ctx, cancel := untilStdinEnds(ctx, c)
	defer cancel()
	srv, err := etcddev.Start(ctx, etcddev.Config{ClientAddr: *listen, Logger: etcdLog})
	if err != nil {
		emit(joinEvent{Event: jnError, T: time.Now().UnixNano(), Err: err.Error()})
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer srv.Close()
	emit(joinEvent{Event: jnReady, T: time.Now().UnixNano(), Endpoints: srv.Endpoints()})
	<-ctx.Done()
	return nil
}

// runBenchJoinNode is "convoy bench joinnode": one member process, or the
// joiner, of the join benchmark.
func runBenchJoinNode(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench joinnode", joinnodeUsage, c)
	id := fs.Uint64("id", 0, "this member's id")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on, host:port")
	endpoints := fs.String("etcd", "", "etcd endpoints, comma-separated")
	prefix := fs.String("prefix", "", "etcd key prefix of the group")
	initial := fs.Int("initial", 1, "members that found the group")
	stateFlag := fs.String("state", "64MiB", "state size (bytes, or with a KiB, MiB or GiB suffix)")
	from := fs.Int("from", convoy.DefaultMaxDonors, "Config.MaxDonors: how many members stream state to a joiner")
	heartbeat := fs.Duration("heartbeat", convoy.DefaultHeartbeatInterval, "failure detector heartbeat interval")
	timeout := fs.Duration("timeout", 2*time.Second, "failure detector suspect timeout")
	joiner := fs.Bool("joiner", false, "this member joins a running group: report the state transfer")
	verbose := fs.Bool("v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	size, err := parseSize(*stateFlag)
	switch {
	case err != nil:
		return usagef("bench joinnode: -state: %v", err)
	case *id == 0 || *endpoints == "" || *prefix == "":
		return usagef("bench joinnode: -id, -etcd and -prefix are required")
	case *from < 1:
		return usagef("bench joinnode: -from must be positive")
	}
	log := newLogger(c.stderr, *verbose).With("node", *id)
	emit := newEventWriter(c.stdout, *id, log)
	ctx, cancel := untilStdinEnds(ctx, c)
	defer cancel()

	state := newSynthState(int64(size))
	if *joiner {
		state.onRestore = func(start, end time.Time, n int64, err error) {
			ev := joinEvent{Event: jnRestored, Start: start.UnixNano(), T: end.UnixNano(), Bytes: n}
			if err != nil {
				ev.Err = err.Error()
			}
			emit(ev)
		}
	} else {
		state.onSnapshot = func(part, of int, start, end time.Time, n int64) {
			emit(joinEvent{Event: jnSnapshot, Part: part, Of: of, Start: start.UnixNano(), T: end.UnixNano(), Bytes: n})
		}
	}
	// The library's warnings reach stderr only with -v: a benchmark under
	// load provokes some.
	level := slog.LevelError
	if *verbose {
		level = slog.LevelDebug
	}
	inner := slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})
	cfg := convoy.Config{
		Self: convoy.NodeID(*id),
		Etcd: &convoy.EtcdConfig{
			Endpoints: strings.Split(*endpoints, ","),
			Prefix:    *prefix,
		},
		ListenAddr:        *listen,
		InitialMembers:    *initial,
		HeartbeatInterval: *heartbeat,
		SuspectTimeout:    *timeout,
		Mode:              convoy.Atomic,
		State:             state,
		MaxDonors:         *from,
		Logger:            slog.New(&joinLogHandler{inner: inner, emit: emit, debug: *joiner}),
	}
	g, err := convoy.Open(ctx, cfg, func(convoy.Delivery) {})
	if err != nil {
		emit(joinEvent{Event: jnError, T: time.Now().UnixNano(), Err: err.Error()})
		return fmt.Errorf("open member %d: %w", *id, err)
	}
	defer g.Close()
	emit(joinEvent{Event: jnReady, T: time.Now().UnixNano()})
	<-ctx.Done()
	return nil
}

// joinLogHandler passes log records to inner and turns the library's
// messages about a join into events.
type joinLogHandler struct {
	inner slog.Handler
	emit  func(joinEvent)
	// debug makes the handler see debug records (the joiner's "part
	// received"); members leave it off so that the library does not build
	// records nobody reads.
	debug bool
}

// joinLogEvents maps the library's log messages to events.
var joinLogEvents = map[string]string{
	"entered view":                                        jnFetch,
	"membership: fetch: part received":                    jnPart,
	"membership: fetch: giving up on donor":               jnDonorFailed,
	"membership: fetch: connection to donor broke":        jnDonorFailed,
	"membership: fetch: donor stalled: asking others too": jnDonorFailed,
	"excluded from the group":                             jnError,
	"group failed":                                        jnError,
	"snapshot for joiners":                                jnError,
	"serving state to joiners":                            jnError,
}

func (h *joinLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.debug || h.inner.Enabled(ctx, l)
}

func (h *joinLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if name, ok := joinLogEvents[r.Message]; ok {
		ev := joinEvent{Event: name, T: r.Time.UnixNano()}
		joining := false
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "epoch":
				ev.Epoch = attrUint(a.Value)
			case "part":
				ev.Part = int(attrUint(a.Value))
			case "donor":
				ev.Donor = attrUint(a.Value)
			case "donors":
				ev.Donors = int(attrUint(a.Value))
			case "bytes":
				ev.Bytes = int64(attrUint(a.Value))
			case "joining":
				joining = a.Value.Kind() == slog.KindBool && a.Value.Bool()
			case "err", "reason":
				ev.Err = a.Value.String()
			}
			return true
		})
		switch {
		case name == jnFetch && (!joining || ev.Donors == 0):
			// A member entering a view it does not join, or a joiner
			// without donors: no transfer.
		case name == jnError:
			ev.Err = r.Message + ": " + ev.Err
			h.emit(ev)
		default:
			h.emit(ev)
		}
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *joinLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &joinLogHandler{inner: h.inner.WithAttrs(as), emit: h.emit, debug: h.debug}
}

func (h *joinLogHandler) WithGroup(name string) slog.Handler {
	return &joinLogHandler{inner: h.inner.WithGroup(name), emit: h.emit, debug: h.debug}
}

// synthState is a synthetic convoy.StateMachine: size bytes of a
// deterministic pseudo-random stream, never held in memory. Deliveries
// do not change it, so it is its own checkpoint (convoy.Checkpointer). Byte o of the
// stream is byte o mod synthBlockSize of a fixed random block, except that
// the first 8 bytes of every block are mixed with the block's index, so
// that blocks in the wrong place do not pass. Generating and checking it
// costs a copy or a compare per byte, well above any link rate.
type synthState struct {
	size  int64
	block []byte // synthBlockSize random bytes
	// onSnapshot and onRestore, if set, report each snapshot part and
	// each Restore.
	onSnapshot func(part, of int, start, end time.Time, n int64)
	onRestore  func(start, end time.Time, n int64, err error)
}

// synthSeed seeds the random block; every process of a run must use the
// same.
const synthSeed = 0x636f6e766f79 // "convoy"

func newSynthState(size int64) *synthState {
	s := &synthState{size: size, block: make([]byte, synthBlockSize)}
	r := rand.New(rand.NewPCG(synthSeed, synthSeed))
	for i := 0; i < len(s.block); i += 8 {
		binary.LittleEndian.PutUint64(s.block[i:], r.Uint64())
	}
	return s
}

// partRange returns the bytes of the stream that part `part` of `of`
// covers.
func (s *synthState) partRange(part, of int) (start, end int64) {
	return s.size * int64(part) / int64(of), s.size * int64(part+1) / int64(of)
}

// header returns the first 8 bytes of block b.
func (s *synthState) header(b int64) [8]byte {
	var h [8]byte
	binary.LittleEndian.PutUint64(h[:], binary.LittleEndian.Uint64(s.block)^uint64(b+1)*0x9e3779b97f4a7c15)
	return h
}

// segments calls fn with consecutive pieces of the stream's bytes from off
// on, n in all: each piece is where it starts in the stream and its
// expected bytes.
func (s *synthState) segments(off int64, n int, fn func(at int64, want []byte) bool) {
	for end := off + int64(n); off < end; {
		b, q := off/synthBlockSize, int(off%synthBlockSize)
		var want []byte
		if q < 8 {
			h := s.header(b)
			want = h[q:]
		} else {
			want = s.block[q:]
		}
		want = want[:min(int64(len(want)), end-off)]
		if !fn(off, want) {
			return
		}
		off += int64(len(want))
	}
}

// fill writes the stream's bytes from off on into dst.
func (s *synthState) fill(dst []byte, off int64) {
	s.segments(off, len(dst), func(at int64, want []byte) bool {
		copy(dst[at-off:], want)
		return true
	})
}

// check returns an error if p is not the stream's bytes from off on.
func (s *synthState) check(p []byte, off int64) error {
	bad := int64(-1)
	s.segments(off, len(p), func(at int64, want []byte) bool {
		if !bytes.Equal(p[at-off:at-off+int64(len(want))], want) {
			bad = at
			return false
		}
		return true
	})
	if bad >= 0 {
		return fmt.Errorf("state differs from the expected stream in the %d bytes from offset %d", min(synthBlockSize, off+int64(len(p))-bad), bad)
	}
	return nil
}

// Snapshot writes part `part` of `of`: its share of the stream.
func (s *synthState) Snapshot(w io.Writer, part, of int) error {
	t0 := time.Now()
	start, end := s.partRange(part, of)
	buf := make([]byte, synthBlockSize)
	for off := start; off < end; {
		n := int(min(int64(len(buf)), end-off))
		s.fill(buf[:n], off)
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		off += int64(n)
	}
	if s.onSnapshot != nil {
		s.onSnapshot(part, of, t0, time.Now(), end-start)
	}
	return nil
}

// Checkpoint returns the state, which deliveries do not change.
func (s *synthState) Checkpoint() (convoy.StateSnapshot, error) { return s, nil }

// Release does nothing: a checkpoint is the state itself.
func (s *synthState) Release() {}

// Restore checks that parts, concatenated, are the whole stream.
func (s *synthState) Restore(parts []io.Reader) error {
	t0 := time.Now()
	w := &synthChecker{s: s}
	var err error
	for i, p := range parts {
		// A part streams in as it is read: from memory, a file or the
		// durable log, a buffer at a time.
		if _, err = io.Copy(w, p); err != nil {
			err = fmt.Errorf("part %d of %d: %w", i, len(parts), err)
			break
		}
	}
	if err == nil && w.off != s.size {
		err = fmt.Errorf("restored %d bytes, want %d", w.off, s.size)
	}
	if s.onRestore != nil {
		s.onRestore(t0, time.Now(), w.off, err)
	}
	return err
}

// synthChecker is a writer that checks what it is given against the
// stream, from offset 0 on.
type synthChecker struct {
	s   *synthState
	off int64
}

var errSynthTooLong = errors.New("more bytes than the state holds")

func (w *synthChecker) Write(p []byte) (int, error) {
	if int64(len(p)) > w.s.size-w.off {
		return 0, errSynthTooLong
	}
	if err := w.s.check(p, w.off); err != nil {
		return 0, err
	}
	w.off += int64(len(p))
	return len(p), nil
}
