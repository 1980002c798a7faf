package paxos

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
)

// delivery is one step of a state machine script: a payload delivered at
// an index, and what apply should make of it.
type delivery struct {
	index   uint64
	payload []byte
	// applied is whether apply acts on it (false: ignored or skipped);
	// res its result then.
	applied bool
	res     result
}

func put(id, key, value string) []byte {
	return encodeCommand(command{op: opPut, id: id, key: key, value: []byte(value)})
}

func del(id, key string) []byte { return encodeCommand(command{op: opDelete, id: id, key: key}) }

// cas expects old (nil: absent).
func cas(id, key string, old *string, value string) []byte {
	c := command{op: opCAS, id: id, key: key, value: []byte(value)}
	if old != nil {
		c.hasOld, c.old = true, []byte(*old)
	}
	return encodeCommand(c)
}

func barrierCmd(id string) []byte { return encodeCommand(command{op: opBarrier, id: id}) }

func str(s string) *string { return &s }

func ok(index uint64) result { return result{index: index, ok: true} }

func notOK(index uint64) result { return result{index: index} }

func TestStateApply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window int
		steps  []delivery
		// data is the store afterwards; kept the request ids with kept
		// results, oldest first.
		data    map[string]string
		applied uint64
		kept    []string
	}{{
		name: "put overwrites",
		steps: []delivery{
			{1, put("a", "k", "1"), true, ok(1)},
			{2, put("b", "k", "2"), true, ok(2)},
		},
		data: map[string]string{"k": "2"}, applied: 2, kept: []string{"a", "b"},
	}, {
		name: "delete reports whether the key existed",
		steps: []delivery{
			{1, put("a", "k", "1"), true, ok(1)},
			{2, del("b", "k"), true, ok(2)},
			{3, del("c", "k"), true, notOK(3)},
		},
		data: map[string]string{}, applied: 3, kept: []string{"a", "b", "c"},
	}, {
		name: "cas compares with the current value, absence included",
		steps: []delivery{
			{1, cas("a", "k", str(""), "x"), true, notOK(1)}, // absent is not empty
			{2, cas("b", "k", nil, ""), true, ok(2)},
			{3, cas("c", "k", nil, "y"), true, notOK(3)}, // present now, if empty
			{4, cas("d", "k", str("z"), "y"), true, notOK(4)},
			{5, cas("e", "k", str(""), "y"), true, ok(5)},
		},
		data: map[string]string{"k": "y"}, applied: 5, kept: []string{"a", "b", "c", "d", "e"},
	}, {
		name: "a repeated request id gets the first result and changes nothing",
		steps: []delivery{
			{1, put("a", "k", "1"), true, ok(1)},
			{2, put("b", "k", "2"), true, ok(2)},
			{3, put("a", "k", "3"), true, ok(1)},
			{4, del("a", "k"), true, ok(1)}, // whatever the retry asks
			{5, del("c", "other"), true, notOK(5)},
			{6, del("c", "other"), true, notOK(5)},
		},
		data: map[string]string{"k": "2"}, applied: 6, kept: []string{"a", "b", "c"},
	}, {
		name: "deliveries at or below the applied index are ignored",
		steps: []delivery{
			{5, put("a", "k", "1"), true, ok(5)},
			{5, put("b", "k", "2"), false, result{}},
			{3, put("c", "k", "3"), false, result{}},
			{6, put("d", "k", "4"), true, ok(6)},
		},
		data: map[string]string{"k": "4"}, applied: 6, kept: []string{"a", "d"},
	}, {
		name: "malformed payloads are skipped but take their index",
		steps: []delivery{
			{1, []byte("garbage"), false, result{}},
			{2, nil, false, result{}},
			{3, append(put("a", "k", "1"), 0), false, result{}},
			{4, put("b", "k", "2"), true, ok(4)},
			{4, put("c", "k", "3"), false, result{}},
		},
		data: map[string]string{"k": "2"}, applied: 4, kept: []string{"b"},
	}, {
		name: "barriers change nothing and are not kept",
		steps: []delivery{
			{1, barrierCmd("x"), true, ok(1)},
			{2, put("a", "k", "1"), true, ok(2)},
			{3, barrierCmd("x"), true, ok(3)},
		},
		data: map[string]string{"k": "1"}, applied: 3, kept: []string{"a"},
	}, {
		name:   "the oldest results are evicted beyond the window",
		window: 2,
		steps: []delivery{
			{1, put("a", "k", "1"), true, ok(1)},
			{2, put("b", "k", "2"), true, ok(2)},
			{3, put("c", "k", "3"), true, ok(3)},  // evicts a
			{4, put("b", "k", "4"), true, ok(2)},  // still kept
			{5, put("a", "k", "5"), true, ok(5)},  // applied again; evicts b
			{6, put("b", "k", "6"), true, ok(6)},  // so is b; evicts c
			{7, del("c", "none"), true, notOK(7)}, // and c; evicts a
		},
		data: map[string]string{"k": "6"}, applied: 7, kept: []string{"b", "c"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newState(slog.New(slog.DiscardHandler))
			if tc.window > 0 {
				s.window = tc.window
			}
			for i, d := range tc.steps {
				a, applied := s.apply(d.index, d.payload)
				if applied != d.applied || a.res != d.res {
					t.Fatalf("step %d (index %d): applied=%v %+v, want applied=%v %+v", i, d.index, applied, a.res, d.applied, d.res)
				}
			}
			if got := s.data(); !maps.Equal(got, tc.data) {
				t.Errorf("data %v, want %v", got, tc.data)
			}
			if got := s.appliedIndex(); got != tc.applied {
				t.Errorf("applied %d, want %d", got, tc.applied)
			}
			if got := s.kept(); !slices.Equal(got, tc.kept) {
				t.Errorf("kept results of %v, want %v", got, tc.kept)
			}
		})
	}
}

// data returns a copy of the store.
func (s *state) data() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]string, s.mu.data.Len())
	s.mu.data.Ascend(func(p pair) bool {
		out[p.key] = string(p.value)
		return true
	})
	return out
}

// kept returns the request ids with kept results, oldest first.
func (s *state) kept() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for _, e := range s.mu.order.all() {
		out = append(out, e.id)
	}
	return out
}

// dump describes the whole state, the same for equal states.
func (s *state) dump() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b strings.Builder
	fmt.Fprintf(&b, "applied %d\n", s.mu.applied)
	s.mu.data.Ascend(func(p pair) bool {
		fmt.Fprintf(&b, "%q=%q\n", p.key, p.value)
		return true
	})
	for _, e := range s.mu.order.all() {
		k, _ := s.mu.results.Get(kept{id: e.id})
		fmt.Fprintf(&b, "result %q %+v\n", e.id, k.res)
	}
	if s.mu.results.Len() != s.mu.order.len() {
		fmt.Fprintf(&b, "%d results, %d in order\n", s.mu.results.Len(), s.mu.order.len())
	}
	return b.String()
}

// filled returns a state after n writes on a few hundred keys, with a
// window smaller than n so that some results were evicted.
func filled(n int) *state {
	s := newState(slog.New(slog.DiscardHandler))
	s.window = n / 2
	for i := 1; i <= n; i++ {
		k := fmt.Sprintf("key-%d", i%300)
		var p []byte
		switch i % 4 {
		case 0, 1:
			p = put(fmt.Sprintf("r%d", i), k, strings.Repeat("v", i%50))
		case 2:
			p = del(fmt.Sprintf("r%d", i), k)
		case 3:
			p = cas(fmt.Sprintf("r%d", i), k, nil, "new")
		}
		if i == n/2 {
			p = put("big", "big", strings.Repeat("b", 100<<10)) // read in pieces
		}
		s.apply(uint64(i), p)
	}
	return s
}

func snapshotParts(t *testing.T, s *state, of int) [][]byte {
	t.Helper()
	parts := make([][]byte, of)
	for p := range of {
		var b bytes.Buffer
		if err := s.snapshot(&b, p, of); err != nil {
			t.Fatal(err)
		}
		parts[p] = b.Bytes()
	}
	return parts
}

func readers(parts [][]byte) []io.Reader {
	out := make([]io.Reader, len(parts))
	for i, p := range parts {
		out[i] = bytes.NewReader(p)
	}
	return out
}

// TestSnapshotRestore: a state restored from a snapshot in 1 to 4 parts
// equals the original — data, applied index, kept results and their
// eviction order — replaces whatever was there, and goes on exactly like
// the original: retries are still deduplicated, and deliveries the
// snapshot already covers are ignored.
func TestSnapshotRestore(t *testing.T) {
	for of := 1; of <= 4; of++ {
		t.Run(fmt.Sprintf("parts=%d", of), func(t *testing.T) {
			orig := filled(1000)
			got := filled(7) // something to replace
			got.window = orig.window
			if err := got.restore(readers(snapshotParts(t, orig, of))); err != nil {
				t.Fatal(err)
			}
			if a, b := got.dump(), orig.dump(); a != b {
				t.Fatalf("restored state differs:\n%s\nwant:\n%s", firstDiff(a, b), "")
			}
			more := []struct {
				index   uint64
				payload []byte
			}{
				{990, put("late", "key-1", "ignored")}, // covered by the snapshot
				{1001, put("r999", "key-1", "dup")},    // a kept result
				{1002, put("r1", "key-1", "evicted")},  // an evicted one
				{1003, put("fresh", "key-2", "x")},
			}
			for _, m := range more {
				a1, ok1 := orig.apply(m.index, m.payload)
				a2, ok2 := got.apply(m.index, m.payload)
				if ok1 != ok2 || a1.res != a2.res {
					t.Fatalf("index %d: original %v %+v, restored %v %+v", m.index, ok1, a1.res, ok2, a2.res)
				}
			}
			if a, b := got.dump(), orig.dump(); a != b {
				t.Fatalf("states differ after more deliveries: %s", firstDiff(a, b))
			}
			if r, ok := got.resultOf("r999"); !ok || r.index != 999 {
				t.Fatalf("r999's result after restore: %+v %v", r, ok)
			}
		})
	}
}

// TestSnapshotEmpty: an empty state survives the trip too.
func TestSnapshotEmpty(t *testing.T) {
	orig := newState(slog.New(slog.DiscardHandler))
	got := filled(10)
	if err := got.restore(readers(snapshotParts(t, orig, 3))); err != nil {
		t.Fatal(err)
	}
	if a, b := got.dump(), orig.dump(); a != b {
		t.Fatalf("restored %q, want %q", a, b)
	}
}

// TestRestoreRejects: parts that do not decode or do not belong together
// are an error, and the state stays as it was.
func TestRestoreRejects(t *testing.T) {
	a := snapshotParts(t, filled(100), 2)
	b := snapshotParts(t, filled(101), 2)
	one := snapshotParts(t, filled(100), 1)
	for _, tc := range []struct {
		name  string
		parts [][]byte
	}{
		{"parts at different indexes", [][]byte{a[0], b[1]}},
		{"a part missing", [][]byte{a[0]}},
		{"parts swapped", [][]byte{a[1], a[0]}},
		{"a part of another cut", [][]byte{one[0], a[1]}},
		{"empty part", [][]byte{{}, a[1]}},
		{"truncated", [][]byte{a[0][:len(a[0])-1], a[1]}},
		{"trailing byte", [][]byte{a[0], append(bytes.Clone(a[1]), 0)}},
		{"other version", [][]byte{append([]byte{9}, a[0][1:]...), a[1]}},
		{"a one-part snapshot given twice", [][]byte{one[0], one[0]}},
		{"huge length", [][]byte{{snapshotVersion, 1, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := filled(10)
			before := s.dump()
			if err := s.restore(readers(tc.parts)); err == nil {
				t.Fatal("restored")
			}
			if after := s.dump(); after != before {
				t.Fatalf("state changed by a failed restore")
			}
		})
	}
}

// firstDiff returns the first line where a and b differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d: %q vs %q", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(la), len(lb))
}

// TestCheckpoint: a checkpoint is the state at its index however much is
// applied after it, even while its parts are written: restored, it is
// exactly the state that applying the deliveries up to that index makes.
func TestCheckpoint(t *testing.T) {
	const at, more = 600, 1400
	s := filled(at)
	cp := s.checkpoint()
	// The rest of filled's deliveries, while the parts are written.
	done := make(chan [][]byte)
	go func() {
		parts := make([][]byte, 3)
		for p := range parts {
			var b bytes.Buffer
			if err := cp.Snapshot(&b, p, len(parts)); err != nil {
				t.Error(err)
			}
			parts[p] = b.Bytes()
		}
		cp.Release()
		done <- parts
	}()
	for i := uint64(at + 1); i <= at+more; i++ {
		k := fmt.Sprintf("key-%d", i%300)
		s.apply(i, put(fmt.Sprintf("later-%d", i), k, "changed"))
		if i%3 == 0 {
			s.apply(i, del(fmt.Sprintf("gone-%d", i), k)) // ignored: index applied
		}
	}
	parts := <-done
	got := newState(slog.New(slog.DiscardHandler))
	got.window = s.window
	if err := got.restore(readers(parts)); err != nil {
		t.Fatal(err)
	}
	// filled(at) again, from scratch: the deliveries up to the index.
	want := filled(at)
	if a, b := got.dump(), want.dump(); a != b {
		t.Fatalf("the checkpoint's state differs from the state at its index: %s", firstDiff(a, b))
	}
	if a, b := s.dump(), want.dump(); a == b {
		t.Fatal("the live state did not change after the checkpoint")
	}
}
