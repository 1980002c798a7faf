package sharedlog

import (
	"errors"
	"testing"
)

// FuzzRestore restores a state from arbitrary parts, as a joiner does
// from what its donors send: up to three parts, as many as count says.
// Parts that do not make up a snapshot must be refused with errSnapshot,
// leaving the state as it was; parts it accepts must make a state that
// survives its own snapshot, in one to three parts, unchanged.
func FuzzRestore(f *testing.F) {
	f.Fuzz(func(t *testing.T, count uint8, p0, p1, p2 []byte) {
		parts := [][]byte{p0, p1, p2}[:count%4]
		s := testState()
		run(t, s, []delivery{{payload: appendCmd("keep", "me", "s"), answer: "append keep 0@1"}})
		before := describe(s)
		if err := s.Restore(readers(parts)); err != nil {
			if !errors.Is(err, errSnapshot) {
				t.Fatalf("Restore: %v, want errSnapshot", err)
			}
			if describe(s) != before {
				t.Fatal("a refused Restore changed the state")
			}
			return
		}
		want := describe(s)
		for of := 1; of <= 3; of++ {
			again := testState()
			restoreFrom(t, again, s, of)
			if got := describe(again); got != want {
				t.Fatalf("restored from %d parts:\n%s\nwant:\n%s", of, got, want)
			}
		}
	})
}
