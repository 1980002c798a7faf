package sharedlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
)

// delivery is one step of a state machine test: a payload delivered at
// an index (0: the one after the previous step's), and the answer
// expected for it ("" for none): "kind id value@index".
type delivery struct {
	index   uint64
	payload []byte
	answer  string
}

// run applies the deliveries to s and checks their answers.
func run(t *testing.T, s *state, ds []delivery) {
	t.Helper()
	var last uint64
	for i, d := range ds {
		index := d.index
		if index == 0 {
			index = last + 1
		}
		last = index
		key, r, ok := s.apply(index, d.payload)
		got := ""
		if ok {
			got = fmt.Sprintf("%v %s %d@%d", kind(key[0]), key[1:], r.value, r.index)
		}
		if got != d.answer {
			t.Fatalf("step %d (index %d): answer %q, want %q", i, index, got, d.answer)
		}
	}
}

// describe prints the whole state deterministically.
func describe(s *state) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b strings.Builder
	fmt.Fprintf(&b, "applied=%d trim=%d tail=%d\n", s.applied, s.trim, s.tailLocked())
	for i, e := range s.entries {
		fmt.Fprintf(&b, "%d %q %v\n", s.trim+uint64(i), e.data, e.streams)
	}
	for _, name := range slices.Sorted(maps.Keys(s.streams)) {
		fmt.Fprintf(&b, "stream %s %v\n", name, s.streams[name])
	}
	_ = s.dedupe.each(func(key string, _ uint32, r result) error {
		fmt.Fprintf(&b, "result %v %s %d@%d\n", kind(key[0]), key[1:], r.value, r.index)
		return nil
	})
	return b.String()
}

func testState() *state { return newState(slog.New(slog.DiscardHandler)) }

// TestApply: what each command does to the state and what it answers.
func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   []delivery
		want string
	}{{
		name: "appends get dense positions from 0, in delivery order",
		ds: []delivery{
			{payload: appendCmd("a", "x"), answer: "append a 0@1"},
			{payload: appendCmd("b", "y"), answer: "append b 1@2"},
			{payload: appendCmd("c", ""), answer: "append c 2@3"},
		},
		want: `applied=3 trim=0 tail=3
0 "x" []
1 "y" []
2 "" []
result append a 0@1
result append b 1@2
result append c 2@3
`,
	}, {
		name: "positions count appends, not deliveries",
		ds: []delivery{
			{payload: barrierCmd("q1"), answer: "barrier q1 0@1"},
			{payload: appendCmd("a", "x"), answer: "append a 0@2"},
			{payload: barrierCmd("q2"), answer: "barrier q2 1@3"},
			{payload: trimCmd("t", 0), answer: "trim t 0@4"},
			{payload: appendCmd("b", "y"), answer: "append b 1@5"},
		},
		want: `applied=5 trim=0 tail=2
0 "x" []
1 "y" []
result append a 0@2
result trim t 0@4
result append b 1@5
`,
	}, {
		name: "an append names streams; each stream lists its positions",
		ds: []delivery{
			{payload: appendCmd("a", "x", "s1"), answer: "append a 0@1"},
			{payload: appendCmd("b", "y"), answer: "append b 1@2"},
			{payload: appendCmd("c", "z", "s2", "s1"), answer: "append c 2@3"},
		},
		want: `applied=3 trim=0 tail=3
0 "x" [s1]
1 "y" []
2 "z" [s2 s1]
stream s1 [0 2]
stream s2 [2]
result append a 0@1
result append b 1@2
result append c 2@3
`,
	}, {
		name: "a retried append lands once and gets the original position",
		ds: []delivery{
			{payload: appendCmd("a", "x"), answer: "append a 0@1"},
			{payload: appendCmd("b", "y"), answer: "append b 1@2"},
			{payload: appendCmd("a", "x"), answer: "append a 0@1"},
			{payload: appendCmd("a", "other data, same id"), answer: "append a 0@1"},
		},
		want: `applied=4 trim=0 tail=2
0 "x" []
1 "y" []
result append a 0@1
result append b 1@2
`,
	}, {
		name: "request ids are per kind",
		ds: []delivery{
			{payload: appendCmd("k", "x"), answer: "append k 0@1"},
			{payload: trimCmd("k", 1), answer: "trim k 1@2"},
			{payload: appendCmd("k", "x"), answer: "append k 0@1"},
		},
		want: `applied=3 trim=1 tail=1
result append k 0@1
result trim k 1@2
`,
	}, {
		name: "trim drops a prefix, stops at the tail and never goes back",
		ds: []delivery{
			{payload: appendCmd("a", "x", "s"), answer: "append a 0@1"},
			{payload: appendCmd("b", "y", "s", "r"), answer: "append b 1@2"},
			{payload: appendCmd("c", "z", "s"), answer: "append c 2@3"},
			{payload: trimCmd("t1", 2), answer: "trim t1 2@4"},
			{payload: trimCmd("t2", 1), answer: "trim t2 2@5"},
			{payload: trimCmd("t3", 99), answer: "trim t3 3@6"},
			{payload: appendCmd("d", "w", "s"), answer: "append d 3@7"},
			{payload: trimCmd("t1", 0), answer: "trim t1 2@4"},
		},
		want: `applied=8 trim=3 tail=4
3 "w" [s]
stream s [3]
result append a 0@1
result append b 1@2
result append c 2@3
result trim t1 2@4
result trim t2 2@5
result trim t3 3@6
result append d 3@7
`,
	}, {
		name: "a barrier answers the tail and changes nothing",
		ds: []delivery{
			{payload: appendCmd("a", "x"), answer: "append a 0@1"},
			{payload: barrierCmd("q"), answer: "barrier q 1@2"},
			{payload: barrierCmd("q"), answer: "barrier q 1@3"},
		},
		want: `applied=3 trim=0 tail=1
0 "x" []
result append a 0@1
`,
	}, {
		name: "malformed payloads are skipped but count as applied",
		ds: []delivery{
			{payload: nil},
			{payload: []byte("garbage")},
			{payload: append([]byte{2}, appendCmd("a", "x")[1:]...)},
			{payload: []byte{commandVersion, 7, 1, 'k'}},
			{payload: appendCmd("a", "x")[:5]},
			{payload: append(appendCmd("a", "x"), 0)},
			{payload: appendCmd("a", "x", "no spaces")},
			{payload: appendCmd("b", "y"), answer: "append b 0@8"},
		},
		want: `applied=8 trim=0 tail=1
0 "y" []
result append b 0@8
`,
	}, {
		name: "deliveries at or below the last applied index are ignored",
		ds: []delivery{
			{payload: appendCmd("a", "x"), answer: "append a 0@1"},
			{payload: appendCmd("b", "y"), answer: "append b 1@2"},
			{index: 2, payload: appendCmd("c", "replayed")},
			{index: 1, payload: trimCmd("t", 5)},
			{index: 3, payload: appendCmd("d", "z"), answer: "append d 2@3"},
		},
		want: `applied=3 trim=0 tail=3
0 "x" []
1 "y" []
2 "z" []
result append a 0@1
result append b 1@2
result append d 2@3
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := testState()
			run(t, s, tc.ds)
			if got := describe(s); got != tc.want {
				t.Errorf("state:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestReads: reads by position, range and stream, with trimmed and
// unwritten positions.
func TestReads(t *testing.T) {
	s := testState()
	// Positions 0..5; 0 and 1 trimmed. Stream a: 0, 2, 4; b: 3, 5.
	run(t, s, []delivery{
		{payload: appendCmd("0", "e0", "a"), answer: "append 0 0@1"},
		{payload: appendCmd("1", "e1"), answer: "append 1 1@2"},
		{payload: appendCmd("2", "e2", "a"), answer: "append 2 2@3"},
		{payload: appendCmd("3", "e3", "b"), answer: "append 3 3@4"},
		{payload: appendCmd("4", "e4", "a"), answer: "append 4 4@5"},
		{payload: appendCmd("5", "e5", "b"), answer: "append 5 5@6"},
		{payload: trimCmd("t", 2), answer: "trim t 2@7"},
	})
	for _, tc := range []struct {
		pos  uint64
		want string
		err  error
	}{
		{0, "", ErrTrimmed},
		{1, "", ErrTrimmed},
		{2, "e2", nil},
		{5, "e5", nil},
		{6, "", ErrUnwritten},
		{1 << 63, "", ErrUnwritten},
	} {
		got, err := s.read(tc.pos)
		if string(got) != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("read(%d) = %q, %v; want %q, %v", tc.pos, got, err, tc.want, tc.err)
		}
	}
	positions := func(es []Entry) string {
		var b strings.Builder
		for _, e := range es {
			fmt.Fprintf(&b, "%d:%s ", e.Position, e.Data)
		}
		return strings.TrimSpace(b.String())
	}
	for _, tc := range []struct {
		from, to uint64
		want     string
	}{
		{0, 100, "2:e2 3:e3 4:e4 5:e5"},
		{0, 3, "2:e2"},
		{3, 5, "3:e3 4:e4"},
		{4, 4, ""},
		{5, 2, ""},
		{6, 10, ""},
	} {
		if got := positions(s.readRange(tc.from, tc.to)); got != tc.want {
			t.Errorf("readRange(%d, %d) = %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		from uint64
		want string
	}{
		{"a", 0, "2:e2 4:e4"},
		{"a", 3, "4:e4"},
		{"a", 5, ""},
		{"b", 0, "3:e3 5:e5"},
		{"b", 5, "5:e5"},
		{"none", 0, ""},
	} {
		if got := positions(s.readStream(tc.name, tc.from)); got != tc.want {
			t.Errorf("readStream(%s, %d) = %q, want %q", tc.name, tc.from, got, tc.want)
		}
	}
	if p := s.progress(); p != (progress{applied: 7, trim: 2, tail: 6}) {
		t.Errorf("progress %+v", p)
	}
}

// TestReadBounds: a range or stream read stops at MaxRangeEntries
// entries or MaxRangeBytes bytes, and always returns a first entry.
func TestReadBounds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sizes   []int // entry sizes, each appended to stream s
		want    int   // entries returned
		wantPos uint64
	}{
		{"entry count", slices.Repeat([]int{1}, MaxRangeEntries+500), MaxRangeEntries, 0},
		{"bytes", slices.Repeat([]int{1 << 20}, 6), 4, 0},
		{"a first entry above the byte bound", []int{MaxRangeBytes + 1, 1}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testState()
			for i, n := range tc.sizes {
				s.apply(uint64(i+1), appendCmd(fmt.Sprint(i), string(make([]byte, n)), "s"))
			}
			for what, got := range map[string][]Entry{
				"range":  s.readRange(0, 1<<62),
				"stream": s.readStream("s", 0),
			} {
				if len(got) != tc.want || got[0].Position != tc.wantPos {
					t.Errorf("%s read returned %d entries from %d, want %d", what, len(got), got[0].Position, tc.want)
				}
			}
		})
	}
}

// TestDedupeBound: the table keeps the most recent results; a retry of
// an evicted one is applied again. Eviction follows delivery order, so
// it is the same on every member, and survives a snapshot.
func TestDedupeBound(t *testing.T) {
	s := testState()
	s.dedupe.limit = 3
	run(t, s, []delivery{
		{payload: appendCmd("a", "x"), answer: "append a 0@1"},
		{payload: appendCmd("b", "y"), answer: "append b 1@2"},
		{payload: barrierCmd("q"), answer: "barrier q 2@3"},
		{payload: trimCmd("c", 0), answer: "trim c 0@4"},
		{payload: appendCmd("d", "z"), answer: "append d 2@5"},
		// a was evicted by d; the retry of b is answered, then a lands
		// again (and evicts b).
		{payload: appendCmd("b", "y"), answer: "append b 1@2"},
		{payload: appendCmd("a", "x"), answer: "append a 3@7"},
	})
	restored := testState()
	restored.dedupe.limit = 3
	restoreFrom(t, restored, s, 2)
	if describe(restored) != describe(s) {
		t.Fatalf("restored:\n%s\nwant:\n%s", describe(restored), describe(s))
	}
	// The same evictions follow on both: c, then d, then a.
	for _, st := range []*state{s, restored} {
		run(t, st, []delivery{
			{index: 8, payload: appendCmd("e", "w"), answer: "append e 4@8"},
			{payload: trimCmd("c", 0), answer: "trim c 0@9"},
			{payload: appendCmd("a", "x"), answer: "append a 3@7"},
			{payload: appendCmd("d", "z"), answer: "append d 5@11"},
		})
	}
	if describe(restored) != describe(s) {
		t.Fatalf("diverged after restore:\n%s\nvs\n%s", describe(restored), describe(s))
	}
}

// snapshot returns the `of` parts of s's snapshot.
func snapshot(t *testing.T, s *state, of int) [][]byte {
	t.Helper()
	parts := make([][]byte, of)
	for p := range parts {
		var b bytes.Buffer
		if err := s.Snapshot(&b, p, of); err != nil {
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

func restoreFrom(t *testing.T, dst, src *state, of int) {
	t.Helper()
	if err := dst.Restore(readers(snapshot(t, src, of))); err != nil {
		t.Fatal(err)
	}
}
