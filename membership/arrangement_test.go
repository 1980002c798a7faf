package membership

import (
	"slices"
	"testing"
)

// The neighbour relation is symmetric (heartbeats flow both ways), every
// member of a group of three or more has at least two neighbours (a
// second path to confirm a suspicion), and every neighbour of a member
// shares another neighbour with it or is reachable through one, so probes
// have somewhere to go.
func TestNeighbours(t *testing.T) {
	for n := 1; n <= 150; n++ {
		for r := 0; r < n; r++ {
			nb := Neighbours(n, r)
			if slices.Contains(nb, r) {
				t.Fatalf("n=%d: rank %d is its own neighbour", n, r)
			}
			if n >= 3 && len(nb) < 2 {
				t.Fatalf("n=%d: rank %d has neighbours %v", n, r, nb)
			}
			if want := 2 * side(n); n > 4 && len(nb) > want {
				t.Fatalf("n=%d: rank %d has %d neighbours, more than %d", n, r, len(nb), want)
			}
			for _, s := range nb {
				if !slices.Contains(Neighbours(n, s), r) {
					t.Fatalf("n=%d: %d watches %d but not the other way", n, r, s)
				}
			}
		}
	}
	if got := Neighbours(9, 4); !slices.Equal(got, []int{3, 5, 1, 7}) {
		t.Fatalf("Neighbours(9, 4) = %v, want [3 5 1 7]", got)
	}
	if Neighbours(3, 5) != nil {
		t.Fatal("a rank outside the view has neighbours")
	}
}
