package sharedlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// states used by the snapshot tests, by name.
func snapshotStates() map[string][]delivery {
	var many []delivery
	for i := range 300 {
		var streams []string
		if i%3 == 0 {
			streams = append(streams, "three")
		}
		if i%5 == 0 {
			streams = append(streams, "five", "x:y")
		}
		many = append(many, delivery{payload: appendCmd(fmt.Sprint("r", i), strings.Repeat("d", i%17), streams...),
			answer: fmt.Sprintf("append r%d %d@%d", i, i, i+1)})
	}
	many = append(many,
		delivery{payload: trimCmd("t", 101), answer: "trim t 101@301"},
		delivery{payload: barrierCmd("q"), answer: "barrier q 300@302"})
	return map[string][]delivery{
		"empty":                   nil,
		"only skipped deliveries": {{payload: []byte("junk")}, {payload: nil}},
		"a few entries": {
			{payload: appendCmd("a", "x", "s"), answer: "append a 0@1"},
			{payload: appendCmd("b", "", "s", "t"), answer: "append b 1@2"},
		},
		"everything trimmed": {
			{payload: appendCmd("a", "x", "s"), answer: "append a 0@1"},
			{payload: trimCmd("t", 5), answer: "trim t 1@2"},
		},
		"many entries, streams, a trim": many,
	}
}

// TestSnapshotRestore: a state restored from its snapshot, in any
// number of parts, equals the original, and goes on exactly like it.
func TestSnapshotRestore(t *testing.T) {
	for name, ds := range snapshotStates() {
		for _, of := range []int{1, 2, 3, 4, 48} {
			t.Run(fmt.Sprintf("%s/%d parts", name, of), func(t *testing.T) {
				src := testState()
				run(t, src, ds)
				dst := testState()
				// Whatever dst held before is replaced.
				run(t, dst, []delivery{{payload: appendCmd("old", "stale", "s"), answer: "append old 0@1"}})
				restoreFrom(t, dst, src, of)
				if got, want := describe(dst), describe(src); got != want {
					t.Fatalf("restored:\n%s\nwant:\n%s", got, want)
				}
				next := src.progress().applied
				more := []delivery{
					{index: next, payload: appendCmd("replayed", "no")}, // at the applied index: ignored
					{index: next + 1, payload: appendCmd("a", "retry")},
					{index: next + 2, payload: appendCmd("new", "n", "s")},
					{index: next + 3, payload: trimCmd("t2", 1)},
				}
				for _, st := range []*state{src, dst} {
					for _, d := range more {
						st.apply(d.index, d.payload)
					}
				}
				if got, want := describe(dst), describe(src); got != want {
					t.Fatalf("after more deliveries:\n%s\nwant:\n%s", got, want)
				}
			})
		}
	}
}

// TestRestoreRejects: parts that do not make up one snapshot are refused
// and leave the state as it was.
func TestRestoreRejects(t *testing.T) {
	src := testState()
	run(t, src, snapshotStates()["many entries, streams, a trim"])
	other := testState()
	run(t, other, snapshotStates()["a few entries"])
	parts := snapshot(t, src, 3)
	for _, tc := range []struct {
		name  string
		parts [][]byte
	}{
		{"a part missing", parts[:2]},
		{"parts out of order", [][]byte{parts[1], parts[0], parts[2]}},
		{"a part of another state", [][]byte{parts[0], parts[1], snapshot(t, other, 3)[2]}},
		{"a part of another cut", [][]byte{parts[0], parts[1], snapshot(t, src, 4)[2]}},
		{"a truncated part", [][]byte{parts[0], parts[1][:len(parts[1])-1], parts[2]}},
		{"trailing bytes", [][]byte{parts[0], append(slices.Clone(parts[1]), 0), parts[2]}},
		{"unknown version", [][]byte{append([]byte{9}, parts[0][1:]...), parts[1], parts[2]}},
		{"empty part", [][]byte{parts[0], {}, parts[2]}},
		{"garbage", [][]byte{[]byte("not a snapshot at all")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := testState()
			run(t, dst, []delivery{{payload: appendCmd("keep", "me"), answer: "append keep 0@1"}})
			before := describe(dst)
			err := dst.Restore(readers(tc.parts))
			if !errors.Is(err, errSnapshot) {
				t.Fatalf("Restore: %v, want errSnapshot", err)
			}
			if describe(dst) != before {
				t.Fatalf("a refused Restore changed the state")
			}
		})
	}
}

// TestSnapshotArguments: part and of must make sense.
func TestSnapshotArguments(t *testing.T) {
	s := testState()
	for _, tc := range [][2]int{{0, 0}, {-1, 2}, {2, 2}} {
		if err := s.Snapshot(&strings.Builder{}, tc[0], tc[1]); err == nil {
			t.Errorf("Snapshot(part %d of %d) succeeded", tc[0], tc[1])
		}
	}
}

// TestCheckpoint: a checkpoint is the state at its index however much is
// applied after it — appends, trims that drop its entries, evictions of
// its kept results — even while its parts are written: restored, it is
// exactly the state that the deliveries up to that index make.
func TestCheckpoint(t *testing.T) {
	build := func(n int) *state {
		s := testState()
		s.dedupe.limit = 50
		for i := 1; i <= n; i++ {
			s.apply(uint64(i), appendCmd(fmt.Sprint("r", i), strings.Repeat("d", i%17), "s"))
		}
		return s
	}
	const at = 200
	s := build(at)
	cp, err := s.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	later := func(from, to uint64) {
		for i := from; i <= to; i++ {
			if i%10 == 0 {
				s.apply(i, trimCmd(fmt.Sprint("t", i), i-100)) // drops entries the checkpoint holds
				continue
			}
			s.apply(i, appendCmd(fmt.Sprint("later", i), "changed", "s"))
		}
	}
	// Before the checkpoint is read, and while it is.
	later(at+1, at+300)
	done := make(chan []*bytes.Buffer)
	go func() {
		parts := make([]*bytes.Buffer, 3)
		for p := range parts {
			parts[p] = new(bytes.Buffer)
			if err := cp.Snapshot(parts[p], p, len(parts)); err != nil {
				t.Error(err)
			}
		}
		done <- parts
	}()
	later(at+301, at+600)
	parts := <-done
	cp.Release()
	if s.checkpoints != 0 {
		t.Fatalf("%d checkpoints live after Release", s.checkpoints)
	}
	got := testState()
	got.dedupe.limit = 50
	readers := make([]io.Reader, len(parts))
	for i, p := range parts {
		readers[i] = p
	}
	if err := got.Restore(readers); err != nil {
		t.Fatal(err)
	}
	if a, b := describe(got), describe(build(at)); a != b {
		t.Fatalf("the checkpoint's state:\n%s\nthe state at its index:\n%s", a, b)
	}
}
