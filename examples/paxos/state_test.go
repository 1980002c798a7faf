package paxos

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
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

// t0 is an issued time; at(s) is s seconds after it.
const t0 = int64(1_700_000_000) * int64(time.Second)

func at(s float64) int64 { return t0 + int64(s*float64(time.Second)) }

// putAt is a put issued at issued (a version 2 command).
func putAt(id string, issued int64, key, value string) []byte {
	return encodeCommand(command{op: opPut, id: id, issued: issued, key: key, value: []byte(value)})
}

func delAt(id string, issued int64, key string) []byte {
	return encodeCommand(command{op: opDelete, id: id, issued: issued, key: key})
}

func expired(index uint64) result { return result{index: index, expired: true} }

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
		// clock and floor are the state's afterwards.
		clock, floor int64
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
	}, {
		// The write applied twice before issued times: attempt A1 of
		// request x, read late by an overloaded member, is delivered
		// after more than the window's writes since its retry A2 was
		// applied. Both carry x's issued time.
		name:   "a stale attempt delivered beyond the window is not applied",
		window: 3,
		steps: []delivery{
			{1, putAt("x", at(0), "k", "A2"), true, ok(1)},
			{2, putAt("o1", at(1), "k", "later 1"), true, ok(2)},
			{3, putAt("o2", at(2), "k", "later 2"), true, ok(3)},
			{4, putAt("o3", at(3), "other", "o"), true, ok(4)},
			{5, putAt("o4", at(4), "other", "o"), true, ok(5)}, // evicts x's result, unexpired
			{6, putAt("x", at(0), "k", "A1"), true, expired(6)},
		},
		data: map[string]string{"k": "later 2", "other": "o"}, applied: 6,
		kept: []string{"o2", "o3", "o4"}, clock: at(4), floor: at(1),
	}, {
		name: "a write expires once the clock is more than the lifetime past its issued time",
		steps: []delivery{
			{1, putAt("x", at(0), "k", "A2"), true, ok(1)},
			{2, putAt("y", at(10), "k", "y"), true, ok(2)},
			{3, putAt("x", at(0), "k", "A1"), true, ok(1)}, // kept: deduplicated
			{4, putAt("z", at(60), "z", "z"), true, ok(4)}, // x is exactly a lifetime old: kept
			{5, putAt("x", at(0), "k", "A1"), true, ok(1)},
			{6, putAt("w", at(60.5), "w", "w"), true, ok(6)}, // x expired: evicted
			{7, putAt("x", at(0), "k", "A1"), true, expired(7)},
			{8, putAt("v", at(0.4), "k", "v"), true, expired(8)}, // a new id, as old
			{9, delAt("u", at(0.6), "w"), true, ok(9)},           // younger than the lifetime
		},
		data: map[string]string{"k": "y", "z": "z"}, applied: 9,
		kept: []string{"y", "z", "w", "u"}, clock: at(60.5),
	}, {
		name:   "the floor refuses writes issued at or before it, not later ones",
		window: 2,
		steps: []delivery{
			{1, putAt("a", at(10), "a", "1"), true, ok(1)},
			{2, putAt("b", at(5), "b", "1"), true, ok(2)},
			{3, putAt("c", at(20), "c", "1"), true, ok(3)}, // evicts a: floor 10
			{4, putAt("b", at(5), "b", "2"), true, ok(2)},  // still kept, below the floor
			{5, putAt("a", at(10), "a", "2"), true, expired(5)},
			{6, putAt("d", at(10), "d", "1"), true, expired(6)},
			{7, putAt("e", at(3), "e", "1"), true, expired(7)},
			{8, putAt("f", at(10.001), "f", "1"), true, ok(8)}, // evicts b: floor stays 10
			{9, putAt("g", at(11), "g", "1"), true, ok(9)},     // evicts c: floor 20
			{10, putAt("h", at(19), "h", "1"), true, expired(10)},
		},
		data: map[string]string{"a": "1", "b": "1", "c": "1", "f": "1", "g": "1"}, applied: 10,
		kept: []string{"f", "g"}, clock: at(20), floor: at(20),
	}, {
		name:   "commands without an issued time follow the rules from before",
		window: 3,
		steps: []delivery{
			{1, put("a", "k", "1"), true, ok(1)},
			{2, putAt("b", at(0), "k", "2"), true, ok(2)},
			{3, putAt("c", at(120), "k", "3"), true, ok(3)}, // b expired, behind a
			{4, put("d", "k", "4"), true, ok(4)},            // never expires; evicts a
			{5, putAt("b", at(0), "k", "5"), true, ok(2)},   // b's result, then b goes
			{6, put("b", "k", "6"), true, ok(6)},            // applied again, as before
			{7, put("e", "k", "7"), true, ok(7)},            // evicts c, unexpired: floor 120
			{8, put("f", "k", "8"), true, ok(8)},            // evicts d: no floor
			{9, put("b", "k", "9"), true, ok(6)},
			{10, put("g", "k", "10"), true, ok(10)}, // issued "before" the floor
		},
		data: map[string]string{"k": "10"}, applied: 10, kept: []string{"e", "f", "g"}, clock: at(120), floor: at(120),
	}, {
		name: "a malformed command does not move the clock; a barrier does",
		steps: []delivery{
			{1, append(putAt("a", at(100), "k", "1"), 0), false, result{}},
			{2, putAt("b", at(0), "k", "2"), true, ok(2)},
			{3, encodeCommand(command{op: opBarrier, id: "x", issued: at(61)}), true, ok(3)},
			{4, putAt("c", at(0), "k", "3"), true, expired(4)},
		},
		data: map[string]string{"k": "2"}, applied: 4, clock: at(61),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newState(slog.New(slog.DiscardHandler))
			if tc.window > 0 {
				s.window = tc.window
			}
			for i, d := range tc.steps {
				a, applied := applyOne(s, d.index, d.payload)
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
			if s.mu.clock != tc.clock || s.mu.floor != tc.floor {
				t.Errorf("clock %d, floor %d; want %d, %d", s.mu.clock-t0, s.mu.floor-t0, tc.clock-t0, tc.floor-t0)
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
	for e := range s.mu.order.all() {
		out = append(out, e.id)
	}
	return out
}

// dump describes the whole state, the same for equal states.
func (s *state) dump() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b strings.Builder
	fmt.Fprintf(&b, "applied %d clock %d floor %d\n", s.mu.applied, s.mu.clock, s.mu.floor)
	s.mu.data.Ascend(func(p pair) bool {
		fmt.Fprintf(&b, "%q=%q\n", p.key, p.value)
		return true
	})
	for k := range s.mu.order.all() {
		fmt.Fprintf(&b, "result %q issued %d pos %d %+v\n", k.id, k.issued, k.pos, k.res)
		if byID, ok := s.mu.results[k.id]; byID != k.res {
			fmt.Fprintf(&b, "by id (%t) as %+v\n", ok, byID)
		}
	}
	if len(s.mu.results) != s.mu.order.len() {
		fmt.Fprintf(&b, "%d results, %d in order\n", len(s.mu.results), s.mu.order.len())
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
		s.apply(nil, uint64(i), p)
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
				a1, ok1 := applyOne(orig, m.index, m.payload)
				a2, ok2 := applyOne(got, m.index, m.payload)
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

// TestFifo: the queue of kept results gives its entries back in order
// across its chunks, and a view stays as it was however the queue goes
// on.
func TestFifo(t *testing.T) {
	entry := func(i int) kept { return kept{id: fmt.Sprint(i), res: result{index: uint64(i)}} }
	ids := func(q fifo) []string {
		var out []string
		for k := range q.all() {
			out = append(out, k.id)
		}
		if len(out) != q.len() {
			t.Fatalf("%d entries, len %d", len(out), q.len())
		}
		return out
	}
	span := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprint(i))
		}
		return out
	}
	var q fifo
	next, popped := 0, 0
	push := func(n int) {
		for range n {
			q.push(entry(next))
			next++
		}
	}
	pop := func(n int) {
		for range n {
			if k := q.pop(); k != entry(popped) {
				t.Fatalf("popped %+v, want %+v", k, entry(popped))
			}
			popped++
		}
	}
	push(fifoChunk + 5)
	empty := fifo{}
	v1 := q.view()
	pop(fifoChunk - 1)
	v2 := q.view() // the front is the last entry of the first chunk
	push(2*fifoChunk + 3)
	pop(2)
	v3 := q.view()
	pop(q.len())
	push(7)
	for _, tc := range []struct {
		name string
		q    fifo
		want []string
	}{
		{"empty", empty, nil},
		{"v1", v1, span(0, fifoChunk+5)},
		{"v2", v2, span(fifoChunk-1, fifoChunk+5)},
		{"v3", v3, span(fifoChunk+1, 3*fifoChunk+8)},
		{"queue", q, span(3*fifoChunk+8, 3*fifoChunk+15)},
	} {
		if got := ids(tc.q); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %d entries %v..., want %d from %v", tc.name, len(got), got[:min(3, len(got))], len(tc.want), tc.want[:min(1, len(tc.want))])
		}
	}
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
		s.apply(nil, i, put(fmt.Sprintf("later-%d", i), k, "changed"))
		if i%3 == 0 {
			s.apply(nil, i, del(fmt.Sprintf("gone-%d", i), k)) // ignored: index applied
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

// filledIssued returns a state after n writes with issued times, on a
// few hundred keys: the first half a write every 100 ms, so that results
// are evicted by time, then a write every 10 ms, so that they are
// evicted by count while unexpired, and the floor rises. Each is issued
// up to 2 s before its delivery, and some 70 s before (and expire).
func filledIssued(n int) *state {
	s := newState(slog.New(slog.DiscardHandler))
	s.window = n * 2 / 5
	for i := 1; i <= n; i++ {
		k := fmt.Sprintf("key-%d", i%300)
		id := fmt.Sprintf("r%d", i)
		var p []byte
		switch i % 3 {
		case 0, 1:
			p = putAt(id, issuedAt(i, n), k, strings.Repeat("v", i%50))
		case 2:
			p = delAt(id, issuedAt(i, n), k)
		}
		s.apply(nil, uint64(i), p)
	}
	return s
}

// issuedAt is the issued time of filledIssued's write i of n.
func issuedAt(i, n int) int64 {
	d := float64(i) / 10
	if i > n/2 {
		d = float64(n/2)/10 + float64(i-n/2)/100
	}
	if i%17 == 0 {
		return at(d - 70)
	}
	return at(d - float64(i%20)/10)
}

// TestSnapshotRestoreIssued: a state with issued times restored from a
// snapshot has the same clock, floor and kept results with their issued
// times, and decides every later delivery as the original does: retries
// deduplicated or expired alike, by time and by the floor.
func TestSnapshotRestoreIssued(t *testing.T) {
	const n = 2000
	orig := filledIssued(n)
	orig.mu.RLock()
	clock, floor := orig.mu.clock, orig.mu.floor
	orig.mu.RUnlock()
	if clock == 0 || floor == 0 || clock-floor > int64(RequestLifetime) {
		t.Fatalf("clock %d, floor %d: want both set, within a lifetime", clock-t0, floor-t0)
	}
	kept := orig.kept()
	oldest, newest := kept[0], kept[len(kept)-1]
	more := []struct {
		payload []byte
		expired bool
	}{
		{putAt("r1", issuedAt(1, n), "key-1", "evicted by time"), true},
		{putAt("r1100", issuedAt(1100, n), "key-1", "evicted by count"), true},
		{putAt(oldest, issuedOf(t, orig, oldest), "key-1", "a kept one"), false},
		{putAt(newest, issuedOf(t, orig, newest), "key-1", "the newest"), false},
		{putAt("fresh-at-floor", floor, "key-2", "x"), true},
		{putAt("fresh", floor+1, "key-2", "y"), false},
		{putAt("late", clock+int64(65*time.Second), "key-3", "moves the clock"), false},
		{putAt(oldest, issuedOf(t, orig, oldest), "key-1", "now expired"), true},
		{putAt("old", clock-int64(15*time.Second), "key-4", "expired"), true},
	}
	for of := 1; of <= 3; of++ {
		t.Run(fmt.Sprintf("parts=%d", of), func(t *testing.T) {
			orig := filledIssued(n)
			got := filled(7) // something to replace
			got.window = orig.window
			if err := got.restore(readers(snapshotParts(t, orig, of))); err != nil {
				t.Fatal(err)
			}
			if a, b := got.dump(), orig.dump(); a != b {
				t.Fatalf("restored state differs: %s", firstDiff(a, b))
			}
			for i, m := range more {
				index := uint64(n + 1 + i)
				a1, ok1 := applyOne(orig, index, m.payload)
				a2, ok2 := applyOne(got, index, m.payload)
				if !ok1 || ok1 != ok2 || a1.res != a2.res {
					t.Fatalf("index %d: original %v %+v, restored %v %+v", index, ok1, a1.res, ok2, a2.res)
				}
				if a1.res.expired != m.expired {
					t.Errorf("%s at index %d: %+v, want expired %v", a1.cmd.id, index, a1.res, m.expired)
				}
			}
			if a, b := got.dump(), orig.dump(); a != b {
				t.Fatalf("states differ after more deliveries: %s", firstDiff(a, b))
			}
		})
	}
}

// issuedOf returns the issued time of id's kept result.
func issuedOf(t *testing.T, s *state, id string) int64 {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.mu.results[id]; !ok {
		t.Fatalf("no result kept for %q", id)
	}
	for k := range s.mu.order.all() {
		if k.id == id {
			return k.issued
		}
	}
	t.Fatalf("the result of %q is not in the eviction queue", id)
	return 0
}

// TestRestoreOldVersions: parts in the formats of members from before
// batches (version 2: no positions) and before issued times (version 1:
// a state without clock or floor whose results have no issued time
// either) still restore.
func TestRestoreOldVersions(t *testing.T) {
	for _, tc := range []struct {
		version byte
		orig    *state
	}{
		{snapshotVersionV1, filled(1000)},
		{snapshotVersionV2, filledIssued(2000)},
	} {
		for of := 1; of <= 3; of++ {
			parts := make([][]byte, of)
			for p := range of {
				parts[p] = snapshotOld(tc.orig, tc.version, p, of)
			}
			got := filled(100)
			got.window = tc.orig.window
			if err := got.restore(readers(parts)); err != nil {
				t.Fatalf("version %d, %d parts: %v", tc.version, of, err)
			}
			if a, b := got.dump(), tc.orig.dump(); a != b {
				t.Fatalf("version %d, %d parts: restored state differs: %s", tc.version, of, firstDiff(a, b))
			}
		}
	}
}

// snapshotOld writes part of of s's state (without batches; for version
// 1, without issued times) in the format of version 1 or 2.
func snapshotOld(s *state, version byte, part, of int) []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b := []byte{version}
	b = binary.AppendUvarint(b, s.mu.applied)
	b = binary.AppendUvarint(b, uint64(part))
	b = binary.AppendUvarint(b, uint64(of))
	if version == snapshotVersionV2 {
		b = binary.AppendUvarint(b, uint64(s.mu.clock))
		b = binary.AppendUvarint(b, uint64(s.mu.floor))
	}
	var keys, results []byte
	var nk, nr uint64
	s.mu.data.Ascend(func(p pair) bool {
		if partOf(p.key, of) == part {
			nk++
			keys = appendField(keys, []byte(p.key))
			keys = appendField(keys, p.value)
		}
		return true
	})
	for _, k := range keptInPart(s.mu.order.all(), part, of) {
		nr++
		results = appendField(results, []byte(k.id))
		results = binary.AppendUvarint(results, k.res.index)
		if version == snapshotVersionV2 {
			results = binary.AppendUvarint(results, uint64(k.issued))
		}
		ok := byte(0)
		if k.res.ok {
			ok = 1
		}
		results = append(results, ok)
	}
	b = binary.AppendUvarint(b, nk)
	b = append(b, keys...)
	b = binary.AppendUvarint(b, nr)
	return append(b, results...)
}

// BenchmarkApply measures the state machine at its steady state under
// the benchmark's write load: puts of 64-byte values to 10,000 keys by 12
// clients, with a full window of kept results (DedupeWindow).
func BenchmarkApply(b *testing.B) {
	const clients, keys = 12, 10000
	s := newState(slog.New(slog.DiscardHandler))
	issued := time.Now().UnixNano()
	value := make([]byte, 64)
	payload := func(i int) []byte {
		return encodeCommand(command{
			op:     opPut,
			id:     fmt.Sprintf("%032x-%d", i%clients, i/clients),
			issued: issued,
			key:    fmt.Sprintf("key-%d", (i*7919)%keys),
			value:  value,
		})
	}
	index := uint64(0)
	for i := range DedupeWindow {
		index++
		if _, ok := applyOne(s, index, payload(i)); !ok {
			b.Fatal("not applied")
		}
	}
	payloads := make([][]byte, b.N)
	for i := range payloads {
		payloads[i] = payload(DedupeWindow + i)
	}
	b.ResetTimer()
	for _, p := range payloads {
		index++
		if _, ok := applyOne(s, index, p); !ok {
			b.Fatal("not applied")
		}
	}
}

// applyOne applies a delivery of one command (not a batch) and returns
// its effect, and whether it was applied.
func applyOne(s *state, index uint64, payload []byte) (effect, bool) {
	es := s.apply(nil, index, payload)
	if len(es) > 1 {
		panic(fmt.Sprintf("a delivery of %d commands", len(es)))
	}
	if len(es) == 0 {
		return effect{}, false
	}
	return es[0], true
}

// batchOf returns the batch of the commands, each encoded as put and the
// others do.
func batchOf(t *testing.T, payloads ...[]byte) []byte {
	t.Helper()
	cs := make([]command, len(payloads))
	for i, p := range payloads {
		c, err := decodeCommand(p)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return encodeBatch(cs)
}

// TestStateApplyBatch: a batch's commands apply in order at its index,
// each with its own result: a repeated request id within the batch gets
// the first one's, and eviction goes by position within the batch.
func TestStateApplyBatch(t *testing.T) {
	s := newState(slog.New(slog.DiscardHandler))
	s.window = 3
	applyOne(s, 1, put("r0", "a", "0"))
	b := batchOf(t,
		put("r1", "a", "1"),
		cas("r2", "a", str("1"), "2"),
		put("r1", "x", "a retry: not applied"),
		del("r3", "a"),
		put("r4", "b", "4"),
	)
	es := s.apply(nil, 2, b)
	want := []result{ok(2), ok(2), ok(2), ok(2), ok(2)}
	if len(es) != len(want) {
		t.Fatalf("%d effects, want %d", len(es), len(want))
	}
	for i, e := range es {
		if e.res != want[i] {
			t.Errorf("command %d (%s %s): %+v, want %+v", i, e.cmd.op, e.cmd.id, e.res, want[i])
		}
	}
	if got := s.apply(nil, 2, b); len(got) != 0 {
		t.Errorf("the batch again at its index: %d effects", len(got))
	}
	if _, found, _ := s.get("a"); found {
		t.Error("key a exists after the batch deleted it")
	}
	if _, found, _ := s.get("x"); found {
		t.Error("the retry within the batch was applied")
	}
	if v, _, _ := s.get("b"); string(v) != "4" {
		t.Errorf("b = %q, want 4", v)
	}
	// Window 3: r0 went first, then r1, in batch order.
	if got, want := s.kept(), []string{"r2", "r3", "r4"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if got := s.apply(nil, 3, []byte{commandVersionBatch, 2, 0}); len(got) != 0 {
		t.Errorf("a malformed batch: %d effects", len(got))
	}
	if s.appliedIndex() != 3 {
		t.Errorf("applied %d after a malformed batch at 3", s.appliedIndex())
	}
}

// TestSnapshotRestoreBatches: results kept from batches, several at one
// index, restore with their positions, evict in the same order as the
// original's, and decide later deliveries alike.
func TestSnapshotRestoreBatches(t *testing.T) {
	const n = 400
	fill := func() *state {
		s := newState(slog.New(slog.DiscardHandler))
		s.window = 500
		id := 0
		for i := 1; i <= n; i++ {
			var ps [][]byte
			for range 1 + i%4 {
				id++
				k := fmt.Sprintf("key-%d", id%300)
				if id%3 == 0 {
					ps = append(ps, del(fmt.Sprintf("r%d", id), k))
				} else {
					ps = append(ps, put(fmt.Sprintf("r%d", id), k, strings.Repeat("v", id%40)))
				}
			}
			s.apply(nil, uint64(i), batchOf(t, ps...))
		}
		return s
	}
	for of := 1; of <= 3; of++ {
		t.Run(fmt.Sprintf("parts=%d", of), func(t *testing.T) {
			orig := fill()
			got := filled(7)
			got.window = orig.window
			if err := got.restore(readers(snapshotParts(t, orig, of))); err != nil {
				t.Fatal(err)
			}
			if a, b := got.dump(), orig.dump(); a != b {
				t.Fatalf("restored state differs: %s", firstDiff(a, b))
			}
			kept := orig.kept()
			more := batchOf(t,
				put(kept[0], "key-1", "a kept one"),
				put("r1", "key-1", "evicted"),
				put("fresh-1", "key-2", "x"),
				put("fresh-2", "key-3", "y"),
			)
			for i, p := range [][]byte{more, put("fresh-3", "key-4", "z")} {
				index := uint64(n + 1 + i)
				e1, e2 := orig.apply(nil, index, p), got.apply(nil, index, p)
				if len(e1) != len(e2) || len(e1) == 0 {
					t.Fatalf("index %d: %d effects on the original, %d restored", index, len(e1), len(e2))
				}
				for j := range e1 {
					if e1[j].res != e2[j].res {
						t.Errorf("index %d, command %d: original %+v, restored %+v", index, j, e1[j].res, e2[j].res)
					}
				}
			}
			if a, b := got.dump(), orig.dump(); a != b {
				t.Fatalf("states differ after more deliveries: %s", firstDiff(a, b))
			}
		})
	}
}
