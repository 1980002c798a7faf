package vsync

import (
	"errors"
	"fmt"
	"testing"
)

func TestAllowed(t *testing.T) {
	// Every pair of phases, with whether the protocol allows it.
	allowed := map[[2]Phase]bool{
		{Joining, Recovering}: true, {Joining, Active}: true,
		{Recovering, Joining}: true, {Recovering, Active}: true,
		{Active, Wedged}: true, {Active, Joining}: true,
		{Wedged, Reported}: true, {Wedged, Active}: true, {Wedged, Joining}: true,
		{Reported, Active}: true, {Reported, Joining}: true,
	}
	for p := range numPhases {
		for q := range numPhases {
			want := allowed[[2]Phase{p, q}] || q.Final() && !p.Final()
			if got := Allowed(p, q); got != want {
				t.Errorf("Allowed(%s, %s) = %v, want %v", p, q, got, want)
			}
			err := Check(p, q)
			var te *ErrTransition
			if want != (err == nil) || !want && (!errors.As(err, &te) || te.From != p || te.To != q) {
				t.Errorf("Check(%s, %s) = %v", p, q, err)
			}
		}
	}
}

func TestPhaseProperties(t *testing.T) {
	for _, tc := range []struct {
		p                     Phase
		inView, ending, final bool
	}{
		{Joining, false, false, false},
		{Recovering, false, false, false},
		{Active, true, false, false},
		{Wedged, true, true, false},
		{Reported, true, true, false},
		{Left, false, false, true},
		{Failed, false, false, true},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			if tc.p.InView() != tc.inView || tc.p.Ending() != tc.ending || tc.p.Final() != tc.final {
				t.Errorf("InView %v Ending %v Final %v, want %v %v %v",
					tc.p.InView(), tc.p.Ending(), tc.p.Final(), tc.inView, tc.ending, tc.final)
			}
		})
	}
}

func TestOutOfRange(t *testing.T) {
	bad := numPhases
	if got := bad.String(); got != fmt.Sprintf("phase(%d)", uint8(bad)) {
		t.Errorf("String() = %q", got)
	}
	if Allowed(bad, Active) || Allowed(Active, bad) {
		t.Error("a phase out of range is allowed")
	}
}

// Every phase but the final ones can reach every other phase, and every
// phase is reachable from Joining (where a member starts): no phase is a
// dead end or unreachable.
func TestReachable(t *testing.T) {
	reach := func(from Phase) map[Phase]bool {
		seen := map[Phase]bool{from: true}
		for todo := []Phase{from}; len(todo) > 0; {
			p := todo[0]
			todo = todo[1:]
			for q := range numPhases {
				if Allowed(p, q) && !seen[q] {
					seen[q] = true
					todo = append(todo, q)
				}
			}
		}
		return seen
	}
	for p := range numPhases {
		got := reach(p)
		for q := range numPhases {
			if !p.Final() && !got[q] {
				t.Errorf("%s cannot reach %s", p, q)
			}
		}
	}
	if got := reach(Joining); len(got) != int(numPhases) {
		t.Errorf("reachable from joining: %v", got)
	}
}
