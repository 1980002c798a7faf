package durableproc

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
)

// Environment variables that describe a member process to a child.
const (
	envID      = "DURABLEPROC_ID"      // the member's id
	envRun     = "DURABLEPROC_RUN"     // which run of the member this process is, from 1
	envEtcd    = "DURABLEPROC_ETCD"    // etcd endpoints, comma-separated
	envPrefix  = "DURABLEPROC_PREFIX"  // the group's etcd key prefix
	envInitial = "DURABLEPROC_INITIAL" // Config.InitialMembers
	envAddr    = "DURABLEPROC_ADDR"    // host:port to listen on; port 0 picks a free one
	envDir     = "DURABLEPROC_DIR"     // the member's data directory (DurableConfig.Dir)
	envOut     = "DURABLEPROC_OUT"     // the file receiving this run's records
	envSenders = "DURABLEPROC_SENDERS" // how many goroutines send concurrently
)

// Member settings: a fast failure detector, so that view changes happen
// within a fraction of a second, and a short wait for late members when
// the group restarts from its logs.
const (
	leaseTTL          = 2 * time.Second
	heartbeatInterval = 10 * time.Millisecond
	// suspectTimeout leaves room for the scheduling delays of a loaded
	// machine (the suite runs packages side by side on two cores), so
	// that a member is rarely suspected because it was not run.
	suspectTimeout = 400 * time.Millisecond
	restartWait    = 500 * time.Millisecond
	// openTimeout bounds Open, which includes restarting the group.
	openTimeout = 30 * time.Second
	// sendTimeout bounds one Send with WaitDelivered.
	sendTimeout = 5 * time.Second
	// sendRetryPause is how long a sender waits after a failed Send.
	sendRetryPause = 20 * time.Millisecond
	// flushInterval is how often a member writes out its buffered
	// records: what SIGKILL can lose of them.
	flushInterval = 5 * time.Millisecond
	// quietFor and quietMax: on SIGTERM a member waits until it has
	// delivered nothing for quietFor, at most quietMax, before it records
	// its final state.
	quietFor = 300 * time.Millisecond
	quietMax = 3 * time.Second
	// closeTimeout bounds closing the group on exit.
	closeTimeout = 5 * time.Second
)

// memberSpec is a child process's part, read from its environment.
type memberSpec struct {
	id      convoy.NodeID
	run     int
	etcd    []string
	prefix  string
	initial int
	addr    string
	dir     string
	out     string
	senders int
}

func memberSpecFromEnv() (memberSpec, error) {
	var s memberSpec
	id, err := strconv.ParseUint(os.Getenv(envID), 10, 64)
	if err != nil || id == 0 {
		return s, fmt.Errorf("%s: want a positive id, got %q", envID, os.Getenv(envID))
	}
	s.id = convoy.NodeID(id)
	if s.run, err = strconv.Atoi(os.Getenv(envRun)); err != nil || s.run < 1 {
		return s, fmt.Errorf("%s: want a positive run, got %q", envRun, os.Getenv(envRun))
	}
	if s.etcd = strings.Split(os.Getenv(envEtcd), ","); s.etcd[0] == "" {
		return s, fmt.Errorf("%s is empty", envEtcd)
	}
	s.prefix = os.Getenv(envPrefix)
	if s.initial, err = strconv.Atoi(os.Getenv(envInitial)); err != nil || s.initial < 1 {
		return s, fmt.Errorf("%s: want a positive count, got %q", envInitial, os.Getenv(envInitial))
	}
	for _, v := range []struct {
		name string
		dst  *string
	}{{envAddr, &s.addr}, {envDir, &s.dir}, {envOut, &s.out}} {
		if *v.dst = os.Getenv(v.name); *v.dst == "" {
			return s, fmt.Errorf("%s is empty", v.name)
		}
	}
	if s.senders, err = strconv.Atoi(os.Getenv(envSenders)); err != nil || s.senders < 1 {
		return s, fmt.Errorf("%s: want a positive count, got %q", envSenders, os.Getenv(envSenders))
	}
	return s, nil
}

// encode is the inverse of memberSpecFromEnv.
func (s memberSpec) encode() []string {
	return []string{
		fmt.Sprintf("%s=%d", envID, s.id),
		fmt.Sprintf("%s=%d", envRun, s.run),
		envEtcd + "=" + strings.Join(s.etcd, ","),
		envPrefix + "=" + s.prefix,
		fmt.Sprintf("%s=%d", envInitial, s.initial),
		envAddr + "=" + s.addr,
		envDir + "=" + s.dir,
		envOut + "=" + s.out,
		fmt.Sprintf("%s=%d", envSenders, s.senders),
	}
}

// record is one line of a run's records file. Exactly one of the fields
// after Inc is set.
type record struct {
	// Inc numbers the incarnations of the member within this run from 1:
	// a new one starts after OnView reports that the group went on
	// without it (View.Excluded).
	Inc int `json:"inc"`
	// Opened: Open returned, the member takes part in the group.
	Opened bool `json:"opened,omitempty"`
	// View is a view the member took part in; Excluded the view that
	// went on without it.
	View     *viewRecord `json:"view,omitempty"`
	Excluded *viewRecord `json:"excluded,omitempty"`
	// Delivery is a message handed to the member's handler.
	Delivery *deliveryRecord `json:"delivery,omitempty"`
	// Restored is the state StateMachine.Restore installed, from the
	// log's snapshot at Open or by state transfer.
	Restored *stateRecord `json:"restored,omitempty"`
	// Ack is the payload of a message Send reported durable.
	Ack string `json:"ack,omitempty"`
	// SendErr is why a Send failed.
	SendErr string `json:"send_err,omitempty"`
	// Stopped: the member stopped sending.
	Stopped bool `json:"stopped,omitempty"`
	// Failed is the error the group failed with.
	Failed string `json:"failed,omitempty"`
	// Final is the member's state as it exits.
	Final *finalRecord `json:"final,omitempty"`
}

// viewRecord is a view as the member saw it.
type viewRecord struct {
	Epoch   uint64   `json:"epoch"`
	Start   uint64   `json:"start"`
	Members []uint64 `json:"members"`
}

// deliveryRecord is a delivery as the member's handler saw it.
type deliveryRecord struct {
	Epoch    uint64 `json:"epoch"`
	Index    uint64 `json:"index"`
	Sender   uint64 `json:"sender"`
	Seq      uint64 `json:"seq"`
	Payload  string `json:"payload"`
	Replayed bool   `json:"replayed,omitempty"`
}

// stateRecord is a whole key-value state.
type stateRecord struct {
	KV map[string]string `json:"kv"`
}

// finalRecord describes a member's state on exit.
type finalRecord struct {
	KV  map[string]string `json:"kv"`
	Err string            `json:"err,omitempty"`
}

// recorder writes a run's records, in the order they happen, to its
// file. Deliveries and restored states are buffered, and written out
// every flushInterval (and with each view); an acknowledgement is
// written out at once, so that it is in the file before the sender goes
// on.
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

// bufferLocked buffers rec, stamped with the incarnation. REQUIRES:
// r.mu.
func (r *recorder) bufferLocked(rec record) {
	rec.Inc = r.inc
	r.f.Add(rec)
}

// write records rec and writes it out at once, with what was buffered
// before it.
func (r *recorder) write(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Inc = r.inc
	r.f.Write(rec)
}

// ack records a payload reported durable, written out with the records
// buffered before it before ack returns.
func (r *recorder) ack(payload string) {
	r.write(record{Ack: payload})
}

// view is the member's Config.OnView.
func (r *recorder) view(v convoy.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &viewRecord{Epoch: v.Epoch, Start: v.Start, Members: make([]uint64, len(v.Members))}
	for i, m := range v.Members {
		out.Members[i] = uint64(m.ID)
	}
	// A view is rare and the checks hinge on it: write it out now, with
	// every delivery before it.
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
	r.bufferLocked(record{Delivery: &deliveryRecord{
		Epoch: d.Epoch, Index: d.Index, Sender: uint64(d.Sender), Seq: d.Seq, Payload: string(d.Payload), Replayed: d.Replayed,
	}})
}

// restored records a state the member restored.
func (r *recorder) restored(kv map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bufferLocked(record{Restored: &stateRecord{KV: kv}})
}

// sinceDelivery returns the time since the last delivery.
func (r *recorder) sinceDelivery() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.lastDelivery)
}

// runMember is the body of a member process: it opens the group on its
// data directory (replaying its log, restarting the group if need be),
// sends until SIGUSR1 or SIGTERM, and on SIGTERM records its final state
// once deliveries have settled, then closes the group.
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
	kv.OnRestore = rec.restored
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	g, err := convoy.Open(ctx, convoy.Config{
		Self: s.id,
		Etcd: &convoy.EtcdConfig{Endpoints: s.etcd, Prefix: s.prefix, LeaseTTL: leaseTTL},
		// The transport advertises the address it listens on, so that
		// port 0 (a free port, picked by the kernel) works.
		ListenAddr:        s.addr,
		InitialMembers:    s.initial,
		HeartbeatInterval: heartbeatInterval, SuspectTimeout: suspectTimeout,
		State:   kv,
		Durable: &convoy.DurableConfig{Dir: s.dir, RestartWait: restartWait},
		OnView:  rec.view,
		Logger:  log,
	}, func(d convoy.Delivery) {
		kv.Apply(d.Payload)
		rec.deliver(d)
	})
	cancel()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer closeGroup(g, log)
	rec.write(record{Opened: true})

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
	var senders sync.WaitGroup
	for i := range s.senders {
		senders.Go(func() { sendLoop(g, s, i, rec, stop) })
	}
	for sig := range sigs {
		if stop != nil {
			close(stop)
			senders.Wait()
			stop = nil
			rec.write(record{Stopped: true})
		}
		if sig == syscall.SIGTERM {
			break
		}
	}
	deadline := time.Now().Add(quietMax)
	for rec.sinceDelivery() < quietFor && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	fin := &finalRecord{KV: kv.Contents()}
	if err := g.Err(); err != nil {
		fin.Err = err.Error()
	}
	rec.write(record{Final: fin})
	return nil
}

// payloadFor is the payload sender `sender` of run `run` of member id
// sends k-th: every payload ever sent in a test is distinct, and sets a
// key of its own.
func payloadFor(id convoy.NodeID, run, sender, k int) string {
	return fmt.Sprintf("set %d.%d.%d-%d %d", id, run, sender, k, k)
}

// sendLoop sends payloadFor(..., k) for k = 1, 2, ..., each waiting until
// it is reported durable, and records the acknowledged ones, until stop
// is closed.
func sendLoop(g *convoy.Group, s memberSpec, sender int, rec *recorder, stop <-chan struct{}) {
	lastErr := ""
	for k := 1; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		p := payloadFor(s.id, s.run, sender, k)
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		_, err := g.Send(ctx, []byte(p), convoy.WaitDelivered())
		cancel()
		if err == nil {
			rec.ack(p)
			lastErr = ""
			continue
		}
		// Restarting, rejoining, or waiting out a view change.
		if err.Error() != lastErr {
			rec.write(record{SendErr: err.Error()})
			lastErr = err.Error()
		}
		select {
		case <-stop:
			return
		case <-time.After(sendRetryPause):
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
		log.Error("durableproc: closing the group timed out", "after", closeTimeout)
	}
}
