// Command groupmember runs one member of a durable, view-managed Convoy
// group with no application on top, for the group workload of the fault
// campaign of package jepsen: it sends a stream of messages of its own
// and records, as JSON lines of grouprec.Record, every view it installs,
// every message it delivers and every call of Send with what it
// returned.
//
//	groupmember -id 1 -run 1 -seed 42 -etcd http://10.0.0.9:2379 -prefix /jepsen/ -data DIR \
//		-listen 10.0.0.1:7000 -http 10.0.0.1:7101 -initial 5 -out FILE
//
// Started again on its data directory (with the next -run), it replays
// its log and rejoins, or restarts the group with the others; it takes
// -clock-offset, -clock-drift-ppm and -log-level as "convoy node" does. The -seed
// chooses what it sends (grouprec.Mix): the share of sends that wait
// until the message is delivered, which in durable delivery means on
// every member's disk (the others return once the group accepts it), and
// the pause after each. The call is written out before Send is called, so that no message
// is delivered whose sending was not recorded; views are written out at
// once, deliveries and returns within a few milliseconds: SIGKILL loses
// only the tail.
//
// On -http it answers:
//
//	GET /status    {"id":1,"epoch":4,"members":[1,2,3,4,5],"serving":true}
//	POST /stop     once it has stopped sending (the call under way returned)
//	POST /finish   once it has stopped sending, then delivered a message of
//	               its own sent after that, trying again until the request ends;
//	               its incarnation then records that it finished
//
// It runs until SIGINT or SIGTERM; if its group fails (its disk is full,
// say), it exits with status 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/recfile"
	"github.com/convoy-gcs/convoy/internal/skewclock"
	"github.com/convoy-gcs/convoy/tests/jepsen/check"
	"github.com/convoy-gcs/convoy/tests/jepsen/internal/grouprec"
)

// Timing of a member.
const (
	// flushInterval is how often the records buffered are written out:
	// what SIGKILL can lose of them.
	flushInterval = 5 * time.Millisecond
	// sendTimeout bounds one Send; beyond it, its outcome is unknown.
	sendTimeout = 5 * time.Second
	// retryPause is the pause after a Send that failed.
	retryPause = 20 * time.Millisecond
	// checkInterval is how often the member checks that its group has not
	// failed.
	checkInterval = 500 * time.Millisecond
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "groupmember: %v\n", err)
		os.Exit(1)
	}
}

// settings are a member's flags.
type settings struct {
	id, run      uint64
	etcd         []string
	prefix, data string
	listen, http string
	out          string
	initial      int
	leaseTTL     time.Duration
	clockOffset  time.Duration
	clockDrift   int
	waitPct      int
	pause        time.Duration
	seed         int64
	logLevel     slog.Level
}

func parseFlags() (settings, error) {
	var s settings
	var etcd string
	flag.Uint64Var(&s.id, "id", 0, "this member's `id`")
	flag.Uint64Var(&s.run, "run", 0, "which run of the member this process is, from 1")
	flag.StringVar(&etcd, "etcd", "", "etcd `endpoints`, comma-separated")
	flag.StringVar(&s.prefix, "prefix", "/convoy/", "the group's etcd key `prefix`")
	flag.StringVar(&s.data, "data", "", "the durable log's `directory`")
	flag.StringVar(&s.listen, "listen", "", "the transport's listen `address`")
	flag.StringVar(&s.http, "http", "", "the control API's listen `address`")
	flag.StringVar(&s.out, "out", "", "the `file` that receives this run's records")
	flag.IntVar(&s.initial, "initial", 1, "how many members found the group")
	flag.DurationVar(&s.leaseTTL, "lease-ttl", 0, "the etcd lease TTL (default: the library's)")
	flag.DurationVar(&s.clockOffset, "clock-offset", 0, "set this member's clock off by this `offset`")
	flag.IntVar(&s.clockDrift, "clock-drift-ppm", 0, "make this member's clock gain `ppm` microseconds a second")
	flag.Int64Var(&s.seed, "seed", 1, "the `seed` that chooses what the member sends")
	flag.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "log to stderr at this `level` (debug, info, warn or error)")
	flag.Parse()
	s.waitPct, s.pause = grouprec.Mix(s.seed)
	s.etcd = strings.Split(etcd, ",")
	switch {
	case s.id == 0 || s.run == 0:
		return s, errors.New("-id and -run must be positive")
	case etcd == "" || s.data == "" || s.listen == "" || s.http == "" || s.out == "":
		return s, errors.New("-etcd, -data, -listen, -http and -out are required")
	case s.clockOffset.Abs() > skewclock.MaxOffset || s.clockDrift < -skewclock.MaxDriftPPM || s.clockDrift > skewclock.MaxDriftPPM:
		return s, fmt.Errorf("-clock-offset or -clock-drift-ppm beyond ±%v, ±%d", skewclock.MaxOffset, skewclock.MaxDriftPPM)
	}
	return s, nil
}

func run() (err error) {
	s, err := parseFlags()
	if err != nil {
		flag.Usage()
		return err
	}
	f, err := recfile.Open(s.out, flushInterval)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", s.out, cerr)
		}
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: s.logLevel})).With("member", s.id, "run", s.run)
	m := &member{s: s, f: f, inc: 1, opened: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}

	// The control API answers from the start: /status says the member
	// does not serve until it opened the group.
	ln, err := net.Listen("tcp", s.http)
	if err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	srv := &http.Server{Handler: m.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	cfg := convoy.Config{
		Self:           convoy.NodeID(s.id),
		Etcd:           &convoy.EtcdConfig{Endpoints: s.etcd, Prefix: s.prefix, LeaseTTL: s.leaseTTL},
		ListenAddr:     s.listen,
		InitialMembers: s.initial,
		Durable:        &convoy.DurableConfig{Dir: s.data},
		OnView:         m.view,
		Logger:         log,
	}
	if s.clockOffset != 0 || s.clockDrift != 0 {
		cfg.Clock = skewclock.New(s.clockOffset, s.clockDrift)
		log.Info("clock set off", "offset", s.clockOffset, "drift_ppm", s.clockDrift)
	}
	g, err := convoy.Open(ctx, cfg, m.deliver)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer g.Close()
	m.g = g
	close(m.opened)
	log.Info("opened the group")
	go m.send()

	tick := time.NewTicker(checkInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := g.Err(); err != nil {
				return err
			}
		}
	}
}

// member is one run of a member.
type member struct {
	s settings
	f *recfile.File
	g *convoy.Group // set before opened is closed

	mu  sync.Mutex
	inc uint64 // the current incarnation of this run
	k   int    // the number of the last message sent

	opened   chan struct{}
	stopOnce sync.Once
	stop     chan struct{} // closed to stop the sender
	stopped  chan struct{} // closed once the sender stopped
}

// view is the group's Config.OnView. A view is rare and the checks hinge
// on it: it is written out at once, with what was buffered before.
func (m *member) view(v convoy.View) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gv := &check.GroupView{Epoch: v.Epoch, Start: v.Start, Members: make([]uint64, len(v.Members))}
	for i, mb := range v.Members {
		gv.Members[i] = uint64(mb.ID)
	}
	if !v.Excluded {
		m.f.Write(grouprec.Record{Inc: m.inc, View: gv})
		return
	}
	// Send refuses messages from here on until the member rejoins, as a
	// new incarnation.
	m.f.Write(grouprec.Record{Inc: m.inc, Excluded: gv})
	m.inc++
}

// deliver is the group's Handler.
func (m *member) deliver(d convoy.Delivery) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.f.Add(grouprec.Record{Inc: m.inc, Delivery: &check.GroupDelivery{
		Epoch: d.Epoch, Index: d.Index, Sender: uint64(d.Sender), Seq: d.Seq, Payload: string(d.Payload), Replayed: d.Replayed,
	}})
}

// sendOne sends the next message, waiting until it is delivered if wait
// says so, and records the call and what it returned; it returns the
// incarnation the payload names, and whether Send returned nil. The call
// is written out before Send is called. A finishing message (see
// finish) waits, and is recorded accepted when it returns nil.
//
// The payload names the incarnation of the run before the call. The
// group refuses every Send from the exclusion of an incarnation until
// the next one joins, which takes far longer than the call takes to
// queue its message, so a message taken belongs to the incarnation it
// names.
func (m *member) sendOne(ctx context.Context, wait, finishing bool) (uint64, bool) {
	m.mu.Lock()
	m.k++
	inc := m.inc
	p := grouprec.Payload(m.s.id, m.s.run, inc, m.k)
	m.f.Write(grouprec.Record{Inc: inc, Invoke: &check.Send{Payload: p, Invoke: time.Now().UnixNano()}})
	m.mu.Unlock()
	var opts []convoy.SendOption
	if wait || finishing {
		opts = append(opts, convoy.WaitDelivered())
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	_, err := m.g.Send(ctx, []byte(p), opts...)
	cancel()
	var st check.SendStatus
	switch {
	case err == nil && wait && !finishing:
		// Delivered in durable delivery: on every member's disk.
		st = check.Durable
	case err == nil:
		st = check.Accepted
	case errors.Is(err, convoy.ErrExcluded):
		// Refused, or taken and then cut off: it may be delivered within
		// the cut.
		st = check.Excluded
	case errors.Is(err, convoy.ErrNotMember), errors.Is(err, convoy.ErrTooLarge), errors.Is(err, convoy.ErrClosed):
		st = check.Rejected
	default:
		// A timeout, or the group failed: it may or may not be
		// delivered.
		return inc, false
	}
	m.f.Add(grouprec.Record{Inc: inc, Return: &check.Send{Payload: p, Complete: time.Now().UnixNano(), Status: st}})
	return inc, err == nil
}

// send sends until stop is closed.
func (m *member) send() {
	defer close(m.stopped)
	r := rand.New(rand.NewPCG(uint64(m.s.seed), m.s.id<<32|m.s.run))
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		pause := m.s.pause
		if _, ok := m.sendOne(context.Background(), r.IntN(100) < m.s.waitPct, false); !ok {
			pause = retryPause
		}
		select {
		case <-m.stop:
			return
		case <-time.After(pause):
		}
	}
}

// stopSending stops the sender and waits until it stopped, or ctx ends.
// Before the group is open, the sender has not started, and will not.
func (m *member) stopSending(ctx context.Context) error {
	m.stopOnce.Do(func() { close(m.stop) })
	select {
	case <-m.opened:
	default:
		return nil
	}
	select {
	case <-m.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish stops the sender, then sends messages that wait until they are
// delivered, until one is or ctx ends, and records that the incarnation
// finished. Once every member has stopped sending (POST /stop to each,
// then POST /finish), the incarnation has then delivered every message
// reported durable anywhere, as they precede its own in the total order.
// The
// finishing message is recorded as accepted, not durable: the other
// members may finish before it is delivered, so their histories need not
// hold it.
func (m *member) finish(ctx context.Context) error {
	if err := m.stopSending(ctx); err != nil {
		return err
	}
	select {
	case <-m.opened:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		if inc, ok := m.sendOne(ctx, true, true); ok {
			m.f.Write(grouprec.Record{Inc: inc, Final: true})
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPause):
		}
	}
}

func (m *member) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := struct {
			ID      uint64   `json:"id"`
			Epoch   uint64   `json:"epoch"`
			Members []uint64 `json:"members"`
			Serving bool     `json:"serving"`
		}{ID: m.s.id, Members: []uint64{}}
		select {
		case <-m.opened:
			v, ok := m.g.View()
			st.Epoch, st.Serving = v.Epoch, ok
			for _, mb := range v.Members {
				st.Members = append(st.Members, uint64(mb.ID))
			}
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		if err := m.stopSending(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("POST /finish", func(w http.ResponseWriter, r *http.Request) {
		if err := m.finish(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	return mux
}
