// Package vsync holds the view-change protocol of one member of a
// view-managed group: the phases a member goes through and the
// transitions allowed between them.
//
// # Phases
//
// A member of a view-managed group is always in exactly one phase. The
// transitions:
//
//	Joining    → Active      it enters a view that admits it
//	Joining    → Recovering  most of the last view failed
//	Recovering → Joining     the group needs no restart after all
//	Recovering → Active      it enters the view that restarts the group
//	Active     → Wedged      the view is ending
//	Wedged     → Reported    its final report goes to etcd
//	Wedged     → Active      it installs the next view
//	Reported   → Active      it installs the next view
//	Active, Wedged, Reported → Joining  excluded: a new incarnation rejoins
//	any phase but Left and Failed → Left    excluded while leaving on purpose
//	any phase but Left and Failed → Failed  its durable log or a view failed
//
// The phases:
//
//   - Joining: outside every view. The incarnation is registered in etcd
//     and waits until the group is founded or a view admits it (it asks
//     to join, again whenever the request is gone). A member excluded
//     from a view comes back here as a new incarnation.
//   - Recovering: outside every view, and most of the last view failed,
//     so no view change can follow it: the member claims its durable log
//     in etcd and, as leader, commits the view that restarts the group
//     from the highest log.
//   - Active: in a view, sending and delivering.
//   - Wedged: the view is ending (a suspicion, a join, a leave, a broken
//     multicast group). The member stopped sending, announcing and
//     delivering in it, and heartbeats to every member for a few
//     intervals so that its final report can say whom it still hears.
//   - Reported: its final report (what it holds of every sender, what it
//     delivered) is on its way to etcd; it waits for the leader's next view, and
//     leads the change itself if it is the leader.
//   - Left: it left the group on purpose and a view without it is
//     installed. Final.
//   - Failed: the member stopped: its durable log failed, or a view could
//     not be opened. Final.
//
// A member in Active, Wedged or Reported may be restoring: it joined its
// view and waits for its state (a snapshot streamed by donors, or the
// messages its log misses). Restoring is independent of the phase: a
// joiner that still waits for its state takes part in ending the view
// like any member, and if the next view keeps it, it waits for its state
// as of that view's start.
//
// Installing view e+1 takes a member from Wedged or Reported to Active.
// A member that learns of e+1 while Active (its report was not needed, or
// a later view is committed: it applies the views in between in order)
// wedges first, as part of the install.
package vsync

import "fmt"

// Phase is where a member stands in the sequence of views.
type Phase uint8

// The phases, in the order a member usually goes through them.
const (
	Joining Phase = iota
	Recovering
	Active
	Wedged
	Reported
	Left
	Failed
	numPhases
)

var phaseNames = [numPhases]string{"joining", "recovering", "active", "wedged", "reported", "left", "failed"}

func (p Phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// InView reports whether a member in phase p takes part in a view.
func (p Phase) InView() bool { return p == Active || p == Wedged || p == Reported }

// Ending reports whether a member in phase p has stopped in its view,
// which is ending: Wedged or Reported.
func (p Phase) Ending() bool { return p == Wedged || p == Reported }

// Final reports whether p ends the member: nothing follows it.
func (p Phase) Final() bool { return p == Left || p == Failed }

// transitions lists, for each phase, the phases that may follow it.
// Left and Failed may follow any phase but themselves, and nothing
// follows them.
var transitions = [numPhases][]Phase{
	Joining:    {Recovering, Active},
	Recovering: {Joining, Active},
	Active:     {Wedged, Joining},
	Wedged:     {Reported, Active, Joining},
	Reported:   {Active, Joining},
}

// Allowed reports whether a member may go from phase p to phase q.
func Allowed(p, q Phase) bool {
	if p >= numPhases || q >= numPhases || p.Final() {
		return false
	}
	if q.Final() {
		return true
	}
	for _, n := range transitions[p] {
		if n == q {
			return true
		}
	}
	return false
}

// ErrTransition is returned by Check for a transition the protocol does
// not allow: a bug in the member's runtime.
type ErrTransition struct {
	From, To Phase
}

func (e *ErrTransition) Error() string {
	return fmt.Sprintf("vsync: no transition from %s to %s", e.From, e.To)
}

// Check returns an *ErrTransition if a member may not go from phase p to
// phase q, and nil otherwise.
func Check(p, q Phase) error {
	if !Allowed(p, q) {
		return &ErrTransition{From: p, To: q}
	}
	return nil
}
