package jepsen

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/check"
)

// fakeStore serves the store's API from one map, for the tests of the
// recording: linearizable, or (stale) answering reads from the state
// before the last write. A write whose request id it saw before gets the
// first answer again; the first try of every dropN-th write is applied
// and its connection then dropped, so that the client retries it.
type fakeStore struct {
	stale bool
	dropN int

	mu      sync.Mutex
	index   uint64
	cur     map[string]string
	prev    map[string]string
	answers map[string][]byte
	writes  int
}

func newFakeStore(stale bool, dropN int) *fakeStore {
	return &fakeStore{stale: stale, dropN: dropN, cur: map[string]string{}, prev: map[string]string{}, answers: map[string][]byte{}}
}

func (f *fakeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.PathValue("key")
	if r.Method == http.MethodGet {
		state := f.cur
		if f.stale {
			state = f.prev
		}
		w.Header().Set("X-Convoy-Index", strconv.FormatUint(f.index, 10))
		v, ok := state[key]
		if !ok {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		w.Write([]byte(v))
		return
	}
	id := r.Header.Get("Idempotency-Key")
	answer, seen := f.answers[id]
	if !seen {
		f.prev = map[string]string{}
		for k, v := range f.cur {
			f.prev[k] = v
		}
		f.index++
		var out any
		switch r.Method {
		case http.MethodPut:
			var b [64]byte
			n, _ := r.Body.Read(b[:])
			f.cur[key] = string(b[:n])
			out = map[string]any{"index": f.index}
		case http.MethodPost:
			var req struct {
				Old *string `json:"old"`
				New string  `json:"new"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			v, ok := f.cur[key]
			swap := ok == (req.Old != nil) && (req.Old == nil || *req.Old == v)
			if swap {
				f.cur[key] = req.New
			}
			out = map[string]any{"ok": swap, "index": f.index}
		}
		answer, _ = json.Marshal(out)
		f.answers[id] = answer
		f.writes++
		if f.dropN > 0 && f.writes%f.dropN == 0 {
			// Applied, but the client never hears of it: it retries.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
	}
	w.Header().Set("X-Convoy-Index", strconv.FormatUint(f.index, 10))
	w.Write(answer)
}

// runClients runs three clients of w against url for 300ms, and on
// until they recorded 50 operations (as count says), however loaded the
// machine, within 10s.
func runClients(w workload, url string, hc *http.Client, count func() int) {
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { w.runClient(stop, i, []string{url}, hc) })
	}
	for start := time.Now(); stop.Err() == nil && (time.Since(start) < 300*time.Millisecond || count() < 50); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
}

// record runs the workload against f for a while and returns the history.
func record(t *testing.T, f *fakeStore) []check.KVOp {
	mux := http.NewServeMux()
	mux.Handle("GET /kv/{key}", f)
	mux.Handle("PUT /kv/{key}", f)
	mux.Handle("POST /kv/{key}/cas", f)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	hc := newHTTPClient((&net.Dialer{Timeout: dialTimeout}).DialContext)
	defer hc.CloseIdleConnections()
	w := newKVWorkload(1, time.Now())
	runClients(w, srv.URL, hc, func() int { return len(w.rec.history()) })
	ops := w.rec.history()
	if len(ops) < 50 {
		t.Fatalf("only %d operations recorded", len(ops))
	}
	return ops
}

// TestRecordingLinearizable: the history of a linearizable store,
// retries included, passes the check, and every write is OK.
func TestRecordingLinearizable(t *testing.T) {
	ops := record(t, newFakeStore(false, 5))
	if r := check.CheckKV(ops, check.KVOptions{Timeout: 10 * time.Second}); !r.OK {
		t.Fatalf("a linearizable store's history fails the check: %v", r)
	}
	for _, op := range ops {
		if op.Outcome != check.OK {
			t.Fatalf("operation %+v: outcome %s, want ok (the client retries dropped writes)", op, op.Outcome)
		}
	}
}

// TestRecordingStale: the history of a store that reads stale values
// fails the check.
func TestRecordingStale(t *testing.T) {
	ops := record(t, newFakeStore(true, 0))
	r := check.CheckKV(ops, check.KVOptions{Timeout: 10 * time.Second})
	if r.OK || !r.Has(check.Linearizable) {
		t.Fatalf("a store with stale reads passes the check: %v", r)
	}
}
