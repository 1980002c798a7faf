package jepsen

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/check"
)

// fakeLog serves the shared log's API from one slice, for the tests of
// the log workload's recording: correct, or (staleTail) answering a tail
// one short of the last append. A write whose request id it saw before
// gets the first answer again; the first try of every dropN-th write is
// applied and its connection then dropped, so that the client retries
// it.
type fakeLog struct {
	staleTail bool
	dropN     int

	mu      sync.Mutex
	trim    uint64
	entries [][]byte // entries[i] is at position trim+i
	streams map[string][]uint64
	answers map[string][]byte
	writes  int
}

func newFakeLog(staleTail bool, dropN int) *fakeLog {
	return &fakeLog{staleTail: staleTail, dropN: dropN, streams: map[string][]uint64{}, answers: map[string][]byte{}}
}

func (f *fakeLog) tail() uint64 { return f.trim + uint64(len(f.entries)) }

type fakeEntry struct {
	Position uint64 `json:"position"`
	Data     []byte `json:"data"`
}

func (f *fakeLog) handler() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	// write applies a write once per request id and answers it; it
	// drops the connection of the first try of every dropN-th write.
	write := func(w http.ResponseWriter, r *http.Request, apply func() any) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.Header.Get("Idempotency-Key")
		answer, seen := f.answers[id]
		if !seen {
			answer, _ = json.Marshal(apply())
			f.answers[id] = answer
			f.writes++
			if f.dropN > 0 && f.writes%f.dropN == 0 {
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
		}
		w.Write(answer)
	}
	mux.HandleFunc("POST /log", func(w http.ResponseWriter, r *http.Request) {
		var b [64]byte
		n, _ := r.Body.Read(b[:])
		write(w, r, func() any {
			pos := f.tail()
			f.entries = append(f.entries, slices.Clone(b[:n]))
			if s := r.URL.Query().Get("streams"); s != "" {
				for name := range strings.SplitSeq(s, ",") {
					f.streams[name] = append(f.streams[name], pos)
				}
			}
			return map[string]uint64{"position": pos}
		})
	})
	mux.HandleFunc("POST /log/trim", func(w http.ResponseWriter, r *http.Request) {
		before, _ := strconv.ParseUint(r.URL.Query().Get("before"), 10, 64)
		write(w, r, func() any {
			if before = min(before, f.tail()); before > f.trim {
				f.entries = f.entries[before-f.trim:]
				f.trim = before
			}
			return map[string]uint64{"trim": f.trim}
		})
	})
	mux.HandleFunc("GET /log/tail", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		tail := f.tail()
		if f.staleTail && tail > 0 {
			tail--
		}
		writeJSON(w, http.StatusOK, map[string]uint64{"tail": tail})
	})
	mux.HandleFunc("GET /log/{position}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		pos, _ := strconv.ParseUint(r.PathValue("position"), 10, 64)
		switch {
		case pos < f.trim:
			writeJSON(w, http.StatusGone, map[string]string{"error": "trimmed"})
		case pos >= f.tail():
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unwritten"})
		default:
			w.Write(f.entries[pos-f.trim])
		}
	})
	mux.HandleFunc("GET /log", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		from, _ := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
		to, _ := strconv.ParseUint(r.URL.Query().Get("to"), 10, 64)
		out := []fakeEntry{}
		for p := max(from, f.trim); p < min(to, f.tail()); p++ {
			out = append(out, fakeEntry{p, f.entries[p-f.trim]})
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /streams/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		from, _ := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
		out := []fakeEntry{}
		for _, p := range f.streams[r.PathValue("name")] {
			if p >= max(from, f.trim) {
				out = append(out, fakeEntry{p, f.entries[p-f.trim]})
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"serving": true, "trim": f.trim, "tail": f.tail()})
	})
	return mux
}

// recordLog runs the log workload against f for a while, then reads its
// log back as the end of a run does, and checks the whole.
func recordLog(t *testing.T, f *fakeLog) ([]check.LogOp, check.Result) {
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	hc := newHTTPClient((&net.Dialer{Timeout: dialTimeout}).DialContext)
	defer hc.CloseIdleConnections()
	w := newLogWorkload(1, time.Now())
	runClients(w, srv.URL, hc, func() int { return len(w.rec.history()) })
	m := &member{id: 1, http: strings.TrimPrefix(srv.URL, "http://")}
	if err := w.serve(m.url(), m.id, 3, hc, 10*time.Second); err != nil {
		t.Fatalf("the fake log did not serve: %v", err)
	}
	c := &cluster{members: []*member{m}, tl: newTimeline()}
	_, _, err := w.check(c, hc)
	if len(w.dumps) != 1 {
		t.Fatalf("%d logs read back, want 1 (%v)", len(w.dumps), err)
	}
	ops := w.rec.history()
	if len(ops) < 50 {
		t.Fatalf("only %d operations recorded", len(ops))
	}
	return ops, check.CheckLog(ops, w.dumps)
}

// TestLogRecordingCorrect: the history of a correct log, retries
// included, passes the check; every operation is OK, and the history
// holds every kind of operation.
func TestLogRecordingCorrect(t *testing.T) {
	ops, r := recordLog(t, newFakeLog(false, 5))
	if !r.OK {
		t.Fatalf("a correct log's history fails the check: %v", r)
	}
	kinds := make(map[check.LogKind]bool)
	for _, op := range ops {
		kinds[op.Kind] = true
		if op.Outcome != check.OK {
			t.Fatalf("operation %+v: outcome %s, want ok (the client retries dropped writes)", op, op.Outcome)
		}
	}
	if len(kinds) != 6 {
		t.Errorf("operations of kinds %v only", kinds)
	}
}

// TestLogRecordingStaleTail: the history of a log whose tail lags its
// last append fails the check.
func TestLogRecordingStaleTail(t *testing.T) {
	_, r := recordLog(t, newFakeLog(true, 0))
	if r.OK || !r.Has(check.TailMonotonic) {
		t.Fatalf("a log with stale tails passes the check: %v", r)
	}
}
