package paxos

import (
	"errors"
	"testing"
)

// FuzzRestore restores a state from arbitrary parts, as a joiner does
// from what its donors send: up to three parts, as many as count says.
// Parts that do not make up a snapshot must be refused with
// errBadSnapshot, leaving the state as it was; parts it accepts must
// make a state that survives its own snapshot, in one to three parts,
// unchanged.
func FuzzRestore(f *testing.F) {
	f.Fuzz(func(t *testing.T, count uint8, p0, p1, p2 []byte) {
		parts := [][]byte{p0, p1, p2}[:count%4]
		s := filled(10)
		before := s.dump()
		if err := s.restore(readers(parts)); err != nil {
			if !errors.Is(err, errBadSnapshot) {
				t.Fatalf("restore: %v, want errBadSnapshot", err)
			}
			if s.dump() != before {
				t.Fatal("a refused restore changed the state")
			}
			return
		}
		want := s.dump()
		for of := 1; of <= 3; of++ {
			again := filled(10)
			again.window = s.window
			if err := again.restore(readers(snapshotParts(t, s, of))); err != nil {
				t.Fatalf("the snapshot in %d parts of a restored state does not restore: %v", of, err)
			}
			if got := again.dump(); got != want {
				t.Fatalf("restored from %d parts:\n%s\nwant:\n%s", of, got, want)
			}
		}
	})
}
