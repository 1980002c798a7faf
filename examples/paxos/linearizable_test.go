package paxos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/examples/paxos/client"
)

// workload is several clients doing random operations on a few keys,
// each against its own first member, recording what they did.
type workload struct {
	clients  int
	keys     int
	duration time.Duration
	seed     uint64
	// impatient is the percentage of writes given a deadline so short
	// that many end with an unknown outcome.
	impatient int
}

// recorder collects a history.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	// failed counts operations with an unknown outcome; dropped failed
	// reads (which change nothing, so the history leaves them out).
	failed, dropped int
	// completed counts the operations with a known outcome.
	completed atomic.Int64
}

// minCompleted is how many operations with a known outcome a history
// needs to mean something: a workload runs on past its duration until it
// has them.
const minCompleted = 100

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(op porcupine.Operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	if !op.Output.(kvOutput).unknown {
		r.completed.Add(1)
	}
}

// run runs w against the cluster's members ids for its duration, and on
// until the history holds minCompleted completed operations (for two
// minutes more at most); midway, if not nil, is called a third of the
// way through the duration.
func (w workload) run(t *testing.T, c *cluster, ids []convoy.NodeID, midway func()) *recorder {
	t.Helper()
	rec := &recorder{start: time.Now()}
	end := rec.start.Add(w.duration)
	var wg sync.WaitGroup
	shared := map[int]*client.Client{}
	for i := range w.clients {
		// Client i starts at member i, and fails over to the others.
		var urls []string
		for k := range ids {
			urls = append(urls, c.urls(ids[(i+k)%len(ids)])...)
		}
		// Half the clients use HTTP requests, half streams, two of them
		// on each stream client (the first one's members), so that
		// their writes may arrive together and go to the group as one
		// batch.
		cl := c.client(urls)
		if i%2 == 1 {
			if shared[i/4] == nil {
				shared[i/4] = c.streamClient(urls)
			}
			cl = shared[i/4]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(t, i, cl, rec, end)
		}()
	}
	if midway != nil {
		time.Sleep(w.duration / 3)
		midway()
	}
	wg.Wait()
	return rec
}

// client is one client's loop.
func (w workload) client(t *testing.T, id int, cl *client.Client, rec *recorder, end time.Time) {
	r := rand.New(rand.NewPCG(w.seed, uint64(id)))
	// last is what this client last saw of each key, for cas to expect.
	last := make(map[string]*string)
	for n := 0; time.Now().Before(end) || rec.completed.Load() < minCompleted && time.Now().Before(end.Add(2*time.Minute)); n++ {
		key := fmt.Sprintf("k%d", r.IntN(w.keys))
		value := fmt.Sprintf("c%d-%d", id, n)
		var in kvInput
		switch p := r.IntN(100); {
		case p < 40:
			in = getOp(key)
		case p < 70:
			in = putOp(key, value)
		case p < 85:
			in = kvInput{op: "cas", key: key, value: value}
			if old := last[key]; old != nil {
				in.old, in.hasOld = *old, true
			}
		default:
			in = delOp(key)
		}
		timeout := 20 * time.Second
		if in.op != "get" && r.IntN(100) < w.impatient {
			timeout = time.Duration(1+r.IntN(3000)) * time.Microsecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		call := rec.now()
		out, err := w.do(ctx, cl, in)
		ret := rec.now()
		cancel()
		switch {
		case err == nil:
		case in.op == "get":
			// A failed read changed nothing: leave it out.
			rec.mu.Lock()
			rec.dropped++
			rec.mu.Unlock()
			t.Logf("client %d: get %s: %v", id, key, err)
			continue
		default:
			out, ret = unknown(), never
			rec.mu.Lock()
			rec.failed++
			rec.mu.Unlock()
			if timeout > time.Second {
				t.Logf("client %d: %s %s: %v (outcome unknown)", id, in.op, key, err)
			}
		}
		rec.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
		switch {
		case out.unknown:
			delete(last, key)
		case in.op == "get" && out.found:
			v := out.value
			last[key] = &v
		case in.op == "get" || in.op == "delete":
			last[key] = nil
		case in.op == "put" || in.op == "cas" && out.ok:
			v := in.value
			last[key] = &v
		}
	}
}

// do carries out one operation through the client.
func (w workload) do(ctx context.Context, cl *client.Client, in kvInput) (kvOutput, error) {
	switch in.op {
	case "get":
		v, _, err := cl.Get(ctx, in.key)
		if errors.Is(err, client.ErrNotFound) {
			return kvOutput{}, nil
		}
		return kvOutput{value: string(v), found: err == nil}, err
	case "put":
		_, err := cl.Put(ctx, in.key, []byte(in.value))
		return kvOutput{}, err
	case "delete":
		_, err := cl.Delete(ctx, in.key)
		if errors.Is(err, client.ErrNotFound) {
			return kvOutput{}, nil
		}
		return kvOutput{found: err == nil}, err
	default:
		var old *[]byte
		if in.hasOld {
			b := []byte(in.old)
			old = &b
		}
		ok, _, err := cl.CAS(ctx, in.key, old, []byte(in.value))
		return kvOutput{ok: ok}, err
	}
}

// check checks the history for linearizability, and that it holds
// enough completed operations to mean something.
func (r *recorder) check(t *testing.T) {
	t.Helper()
	completed := 0
	for _, op := range r.ops {
		if !op.Output.(kvOutput).unknown {
			completed++
		}
	}
	t.Logf("history: %d operations, %d completed, %d with unknown outcome, %d failed reads left out", len(r.ops), completed, r.failed, r.dropped)
	if completed < minCompleted {
		t.Fatalf("only %d operations completed", completed)
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, r.ops, time.Minute)
	if res == porcupine.Ok {
		return
	}
	path := filepath.Join(os.TempDir(), strings.ReplaceAll(t.Name(), "/", "_")+".html")
	if err := porcupine.VisualizePath(kvModel, info, path); err == nil {
		t.Logf("visualization: %s", path)
	}
	t.Fatalf("history check: %v", res)
}

// TestLinearizable: six clients against three members, each client
// starting at a different member, do random reads, writes, cas and
// deletes on four keys (two of them sharing a stream, whose writes then
// go to the group in batches at times); the history is linearizable, and
// every member ends with the same state.
func TestLinearizable(t *testing.T) {
	c := newCluster(t)
	c.start(3)
	ids := idsUpTo(3)
	rec := workload{clients: 6, keys: 4, duration: 2 * time.Second, seed: 1}.run(t, c, ids, nil)
	rec.check(t)
	c.waitSameState(ids...)
}

// TestLinearizableWithCrash: the same while a member crashes a third of
// the way through. Its clients fail over to the others; operations that
// end in an error (some writes are given a deadline too short to
// complete) count as possibly applied; the survivors end with the same
// state.
func TestLinearizableWithCrash(t *testing.T) {
	c := newCluster(t)
	c.start(3)
	ids := idsUpTo(3)
	rec := workload{clients: 6, keys: 4, duration: 3 * time.Second, seed: 2, impatient: 2}.run(t, c, ids, func() {
		c.crash(3)
	})
	rec.check(t)
	c.waitServing(2, 1, 2)
	c.waitSameState(1, 2)
}
