package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/tests/jepsen/check"
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
type recorder struct {
	zero time.Time
	mu   sync.Mutex
	ops  []check.KVOp
}

func (r *recorder) now() int64 { return time.Since(r.zero).Nanoseconds() }

func (r *recorder) add(op check.KVOp) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *recorder) history() []check.KVOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]check.KVOp(nil), r.ops...)
}

// workload is the key-value workload a seed chooses: how many keys and
// the mix of operations.
type workload struct {
	keys []string
	// getPct and putPct are the percentages of gets and puts; the rest
	// are compare-and-swaps.
	getPct, putPct int
}

func newWorkload(seed int64) workload {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6b76))
	w := workload{getPct: 30 + r.IntN(21), putPct: 20 + r.IntN(21)}
	for i := range 3 + r.IntN(3) {
		w.keys = append(w.keys, fmt.Sprintf("k%d", i+1))
	}
	return w
}

func (w workload) String() string {
	return fmt.Sprintf("%d keys, %d%% get, %d%% put, %d%% cas", len(w.keys), w.getPct, w.putPct, 100-w.getPct-w.putPct)
}

// newHTTPClient returns the HTTP client of a run's clients, which
// connects with dial.
func newHTTPClient(dial netns.DialFunc) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 16,
	}}
}

// runClient runs client id's operations through cl until stop ends,
// recording each; an operation under way when stop ends runs to its
// end.
func (w workload) runClient(stop context.Context, id int, seed int64, cl *client.Client, rec *recorder) {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(id)+1))
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
		op = do(cl, op, rec, opTimeout)
		if op.Outcome == check.OK {
			switch {
			case op.Kind == check.Get && op.Found:
				seen[op.Key] = op.Read
			case op.Kind == check.Put, op.Kind == check.CAS && op.Swapped:
				seen[op.Key] = op.Value
			}
		}
		t := time.NewTimer(time.Duration(r.Int64N(int64(maxThink))))
		select {
		case <-stop.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// do runs op through cl, bounded by timeout, records it and returns it
// with its outcome: OK with its result; Fail if a member refused it
// (400, 404 other than a key's absence, 413: it was not applied);
// Unknown otherwise (its context ended while no member could serve it).
// The client retries a call with the same request id, so the operation
// spans every try.
func do(cl *client.Client, op check.KVOp, rec *recorder, timeout time.Duration) check.KVOp {
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
