package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/tests/jepsen/check"
	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// Workload timing.
const (
	// opTimeout bounds one operation, all its tries included: beyond it,
	// a write's outcome is unknown.
	opTimeout = 10 * time.Second
	// attemptTimeout bounds one try at one member, so that a paused
	// member (which accepts connections but answers nothing) holds a
	// request no longer than this before the client tries another.
	attemptTimeout = 2 * time.Second
	// maxThink bounds the pause a client takes between two operations.
	maxThink = 5 * time.Millisecond
)

// recorder collects the operations of a run, with times in nanoseconds
// from the start of the schedule.
type recorder[T any] struct {
	zero time.Time
	mu   sync.Mutex
	ops  []T
}

func (r *recorder[T]) now() int64 { return time.Since(r.zero).Nanoseconds() }

func (r *recorder[T]) add(op T) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *recorder[T]) history() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.ops...)
}

// workload is what the clients of a run do to the members, and how
// what they saw is checked. Its methods are called from one goroutine,
// except runClient, which runs once per client, concurrently.
type workload interface {
	fmt.Stringer
	// runClient runs client id's operations against the members at urls,
	// from the first on, until stop ends, recording each; an operation
	// under way when stop ends runs to its end.
	runClient(stop context.Context, id int, urls []string, hc *http.Client)
	// serve runs a read and a write through the member at url alone,
	// recorded as clients first and first+1, within bound; it says what
	// they got if one of them did not succeed.
	serve(url string, member, first int, hc *http.Client, bound time.Duration) error
	// check checks the history, once every member not lost has served
	// (the log workload reads back their logs through c): it returns how
	// many operations the history holds, how many with an unknown
	// outcome, and what is wrong.
	check(c *cluster, hc *http.Client) (ops, unknown int, err error)
	// report writes the history, and what else explains a failure, to
	// the report directory dir.
	report(dir string) error
}

// stopper is a workload whose members send of their own accord (the
// group workload): stop makes them stop, once the clients have stopped
// and before liveness.
type stopper interface {
	stop(c *cluster, hc *http.Client) error
}

// Workload names, as the schedules draw them: the application its
// members serve ("convoy node -app kv" or "-app log"), or the raw group
// (internal/groupmember).
const (
	workloadKV    = "kv"
	workloadLog   = "log"
	workloadGroup = "group"
)

// workloads are the workloads a campaign's schedules draw from.
var workloads = []string{workloadKV, workloadLog, workloadGroup}

// appOf returns the application the members of schedule s serve.
func appOf(s schedule.Schedule) string {
	if s.Workload == "" {
		return workloadKV
	}
	return s.Workload
}

// newWorkload returns the workload of schedule s, its history timed from
// zero.
func newWorkload(s schedule.Schedule, zero time.Time) workload {
	switch s.Workload {
	case workloadLog:
		return newLogWorkload(s.Seed, zero)
	case workloadGroup:
		return newGroupWorkload(s.Seed)
	}
	return newKVWorkload(s.Seed, zero)
}

// kvWorkload is the key-value workload a seed chooses: how many keys and
// the mix of operations.
type kvWorkload struct {
	seed int64
	keys []string
	// getPct and putPct are the percentages of gets and puts; the rest
	// are compare-and-swaps.
	getPct, putPct int
	rec            *recorder[check.KVOp]
}

func newKVWorkload(seed int64, zero time.Time) *kvWorkload {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6b76))
	w := &kvWorkload{seed: seed, getPct: 30 + r.IntN(21), putPct: 20 + r.IntN(21), rec: &recorder[check.KVOp]{zero: zero}}
	for i := range 3 + r.IntN(3) {
		w.keys = append(w.keys, fmt.Sprintf("k%d", i+1))
	}
	return w
}

func (w *kvWorkload) String() string {
	return fmt.Sprintf("kv: %d keys, %d%% get, %d%% put, %d%% cas", len(w.keys), w.getPct, w.putPct, 100-w.getPct-w.putPct)
}

// newHTTPClient returns the HTTP client of a run's clients, which
// connects with dial.
func newHTTPClient(dial netns.DialFunc) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 16,
	}}
}

func (w *kvWorkload) runClient(stop context.Context, id int, urls []string, hc *http.Client) {
	opts := []client.Option{client.WithHTTPClient(hc), client.WithAttemptTimeout(attemptTimeout)}
	if id%2 == 1 {
		// Half the clients send their requests over streams.
		opts = append(opts, client.WithStreams())
	}
	cl := client.New(urls, opts...)
	defer cl.Close()
	r := rand.New(rand.NewPCG(uint64(w.seed), uint64(id)+1))
	// seen is the last value this client read or wrote per key, which a
	// cas expects; the first cas of a key expects it absent.
	seen := make(map[string]string)
	for n := 1; stop.Err() == nil; n++ {
		op := check.KVOp{Client: id, Key: w.keys[r.IntN(len(w.keys))], Value: fmt.Sprintf("c%d-%d", id, n)}
		switch p := r.IntN(100); {
		case p < w.getPct:
			op.Kind, op.Value = check.Get, ""
		case p < w.getPct+w.putPct:
			op.Kind = check.Put
		default:
			op.Kind = check.CAS
			if v, ok := seen[op.Key]; ok {
				op.Expect = &v
			}
		}
		op = do(cl, op, w.rec, opTimeout)
		if op.Outcome == check.OK {
			switch {
			case op.Kind == check.Get && op.Found:
				seen[op.Key] = op.Read
			case op.Kind == check.Put, op.Kind == check.CAS && op.Swapped:
				seen[op.Key] = op.Value
			}
		}
		think(stop, r)
	}
}

// think pauses between two operations of a client, for up to maxThink,
// or until stop ends.
func think(stop context.Context, r *rand.Rand) {
	t := time.NewTimer(time.Duration(r.Int64N(int64(maxThink))))
	defer t.Stop()
	select {
	case <-stop.Done():
	case <-t.C:
	}
}

func (w *kvWorkload) serve(url string, member, first int, hc *http.Client, bound time.Duration) error {
	cl := client.New([]string{url}, client.WithHTTPClient(hc), client.WithAttemptTimeout(attemptTimeout))
	deadline := time.Now().Add(bound)
	get := do(cl, check.KVOp{Client: first, Kind: check.Get, Key: w.keys[0]}, w.rec, time.Until(deadline))
	put := do(cl, check.KVOp{Client: first + 1, Kind: check.Put, Key: w.keys[0], Value: fmt.Sprintf("live-%d", member)}, w.rec, time.Until(deadline))
	if get.Outcome != check.OK || put.Outcome != check.OK {
		return fmt.Errorf("read: %s, write: %s", get.Outcome, put.Outcome)
	}
	return nil
}

func (w *kvWorkload) check(*cluster, *http.Client) (ops, unknown int, err error) {
	h := w.rec.history()
	for _, op := range h {
		if op.Outcome == check.Unknown {
			unknown++
		}
	}
	if r := check.CheckKV(h, check.KVOptions{Timeout: checkTimeout}); !r.OK {
		err = errors.New(r.String())
	}
	return len(h), unknown, err
}

// report writes the history, and porcupine's visualisation of the keys
// that failed if the history is not linearizable.
func (w *kvWorkload) report(dir string) error {
	h := w.rec.history()
	// The checker writes the history and the visualisation if the history
	// is not linearizable; the history is written in any case.
	if r := check.CheckKV(h, check.KVOptions{Timeout: checkTimeout, ReportDir: dir}); len(r.Report) == 0 {
		return writeHistory(filepath.Join(dir, check.KVHistory), h)
	}
	return nil
}

// writeHistory writes items to a new file at path as JSON lines.
func writeHistory[T any](path string, items []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(check.WriteLines(f, items), f.Close())
}

// do runs op through cl, bounded by timeout, records it and returns it
// with its outcome: OK with its result; Fail if a member refused it
// (400, 404 other than a key's absence, 413: it was not applied);
// Unknown otherwise (its context ended while no member could serve it).
// The client retries a call with the same request id, so the operation
// spans every try.
func do(cl *client.Client, op check.KVOp, rec *recorder[check.KVOp], timeout time.Duration) check.KVOp {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op.Invoke = rec.now()
	var err error
	switch op.Kind {
	case check.Get:
		var v []byte
		v, _, err = cl.Get(ctx, op.Key)
		op.Found, op.Read = err == nil, string(v)
		if errors.Is(err, client.ErrNotFound) {
			err = nil
		}
	case check.Put:
		_, err = cl.Put(ctx, op.Key, []byte(op.Value))
	case check.CAS:
		var old *[]byte
		if op.Expect != nil {
			b := []byte(*op.Expect)
			old = &b
		}
		op.Swapped, _, err = cl.CAS(ctx, op.Key, old, []byte(op.Value))
	}
	op.Complete = rec.now()
	var refused *client.Error
	switch {
	case err == nil:
		op.Outcome = check.OK
	case errors.As(err, &refused) && refused.StatusCode >= 400 && refused.StatusCode < 500:
		op.Outcome = check.Fail
	default:
		op.Outcome = check.Unknown
	}
	if op.Outcome != check.OK {
		op.Found, op.Read, op.Swapped = false, "", false
	}
	rec.add(op)
	return op
}
