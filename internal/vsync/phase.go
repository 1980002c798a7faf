// Package vsync holds the view-change protocol of one member of a
// view-managed group: the phases a member goes through, the transitions
// allowed between them, and Core, which makes the member's view-change
// decisions without I/O or a clock of its own. The runtime hands Core
// what it reads from etcd (State) and the time (Tick, Deadline),
// carries out the actions Core returns, and tells it what came of them
// (Entered, Installed, Ending, Rereported, Excluded, Left, Failed);
// Core moves the member from phase to phase on the way. The scripts in
// testdata/core show the protocol at work, step by step.
//
// # Phases
//
// A member of a view-managed group is always in exactly one phase. A
// new incarnation starts Joining. The transitions, with the call of
// Core that makes each:
//
//	Joining    → Active      Entered    it entered a view that admits it
//	Joining    → Recovering  State      most of the last view failed (a
//	                                    member with a durable log)
//	Recovering → Joining     State      the group needs no restart after all
//	Recovering → Active      Entered    it entered the view that restarts
//	                                    the group
//	Active     → Wedged      State      a read shows the view ending (a
//	                                    suspicion, a lapsed registration, a
//	                                    join, a leave, a report)
//	                         Wedge      the runtime saw the view break (a
//	                                    multicast group failed)
//	                         Ending     it installs a view it did not report
//	                                    for, or a view in between
//	                         Installed  likewise, on its way to Active
//	Wedged     → Reported    Tick       its final report is due
//	Wedged     → Active      Installed  it installed the next view
//	Reported   → Active      Installed  it installed the next view
//	Active, Wedged, Reported → Joining  Excluded  a view left it out, or it
//	                                    gave way to a restart: a new
//	                                    incarnation rejoins
//	any phase but Left and Failed → Left    Left    excluded while leaving on purpose
//	any phase but Left and Failed → Failed  Failed  its durable log or a view failed
//
// The phases, with the actions Core may return in each:
//
//   - Joining: outside every view. The incarnation is registered in etcd
//     and waits until the group is founded (Bootstrap, by the registered
//     member with the lowest ID) or a view admits it (RequestJoin, again
//     whenever the request is gone; Enter once a view names this
//     incarnation). A member excluded from a view comes back here as a
//     new incarnation.
//   - Recovering: outside every view, and most of the last view failed,
//     so no view change can follow it: after half a lease (registrations
//     lost with etcd come back meanwhile) the member claims its durable
//     log in etcd (Claim, again whenever the claim is gone). Once no
//     member of the view lives on and a majority of its caught-up
//     members have claimed with the logs they had in it, the claimant
//     with the lowest ID commits the view that restarts the group from
//     the highest log (Recover), after the others had a while to claim
//     too. The member enters that view like a joiner (Enter).
//   - Active: in a view, sending and delivering. A read of etcd may end
//     the view (Wedge).
//   - Wedged: the view is ending. The member stopped sending, announcing
//     and delivering in it, and heartbeats to every member for a few
//     intervals so that its final report can say whom it still hears;
//     then the report is due (Report, from Tick once Deadline passed).
//   - Reported: its final report (what it holds of every sender, what it
//     delivered, whom it hears) is on its way to etcd; it waits for the
//     next view (Install), and proposes it if it leads the change
//     (Propose, once per etcd revision read; a leaving leader may propose
//     while still Wedged). Once the report is a suspect timeout old, it
//     is written again if whom the member hears changed
//     (RefreshReport).
//   - Left: it left the group on purpose and a view without it is
//     installed. Final: Core returns nothing more.
//   - Failed: the member stopped: its durable log failed, or a view could
//     not be opened. Final.
//
// In every phase within a view, a read may bring the next view (Install,
// one view at a time: a member that missed views installs those in
// between first, read from etcd, and is excluded by the first that
// leaves it out) or a restart of the group from the logs, which it gives
// way to (Exclude); Core also says when the next view would lack a
// majority of the current one, and when it would not any more
// (Minority), and when every joiner of the view holds its state, so that
// donors stop serving them (DonorsDone).
//
// A member in Active, Wedged or Reported may be restoring: it joined its
// view and waits for its state (a snapshot streamed by donors, or the
// messages its log misses). Restoring is the runtime's, independent of
// the phase: a joiner that still waits for its state takes part in
// ending the view like any member, and if the next view keeps it, it
// waits for its state as of that view's start.
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
