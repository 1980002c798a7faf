package membership

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ChangeInput is what a member knows about the current view's change, as
// read from the store in one consistent snapshot (plus its own wedge
// state). Decide reads it and never modifies it.
type ChangeInput struct {
	// Current is the committed current view (epoch e).
	Current View
	// CaughtUp holds the joiners (of any view) that completed their state
	// transfer: only they count towards a majority.
	CaughtUp map[ID]bool
	// Suspected holds the members of Current with a recorded (confirmed)
	// suspicion, or whose registration lease is gone. Other IDs are
	// ignored.
	Suspected map[ID]bool
	// Joins are the pending join requests. A request whose ID is a member
	// of Current with the same (or an older) incarnation is ignored; one
	// with a newer incarnation of a current member means the old
	// incarnation is dead: that member is treated as suspected and the new
	// incarnation is admitted as a joiner. Of several requests for one ID
	// the newest incarnation counts.
	Joins []Member
	// Leaves holds the graceful leave requests from members of Current.
	// Other IDs are ignored.
	Leaves map[ID]bool
	// Reports holds the final reports for Current.Epoch, by reporter ID.
	Reports map[ID]Report
	// Topics holds the members' topic requests (TopicRequest); those of
	// members that are not in the next view, or of other incarnations,
	// are ignored.
	Topics []TopicRequest
}

// Decision is what one member concludes from a ChangeInput. When Change
// is false only Leader and HasLeader are set.
type Decision struct {
	// Change says a view change is under way or needed, so members must
	// wedge: a suspicion, join or leave is pending, or a report is
	// present.
	Change bool
	// Leader is the lowest-ranked member of Current not suspected (a
	// leaving member may lead); HasLeader is false, and Leader 0, if every
	// member is suspected.
	Leader    ID
	HasLeader bool
	// Next lists the proposed members of view e+1: Current's members in
	// rank order minus the suspected and the leaving ones, then the
	// joiners sorted by ID.
	Next []Member
	// Waiting lists, in rank order, the members of Next that were in
	// Current and have not reported yet: the leader waits for them.
	Waiting []ID
	// Minority says Next does not keep a majority of Current's caught-up
	// members (HasMajority is false, or Next is empty): nobody may install
	// it, and members stop delivering and wait.
	Minority bool
	// Excluded says self is a member of Current but not of Next (suspected,
	// replaced by a new incarnation, or leaving).
	Excluded bool
	// Propose is the record to commit, set iff self is the Leader, Change
	// holds, Minority does not and Waiting is empty (every proposed
	// member's final report is in). The caller commits it conditioned on
	// Current being current; the store checks the majority rule again
	// against its own state.
	Propose *View
}

// ErrBadView is returned by Decide when the current view record itself is
// malformed (no members, a member listed twice, Sent of the wrong size).
var ErrBadView = errors.New("membership: malformed view record")

// Decide computes, from one consistent snapshot of the store, what member
// self must do about the change of view in.Current. It is a pure function:
// no I/O, no clock, no randomness. Members that read the same snapshot
// agree on everything but Excluded and Propose, which only the leader
// gets.
//
// The cut ends view e where every member of view e+1 can end it: for each
// sender of e, the lowest sequence that a continuing member of e+1
// reported holding. Every reported delivered index must lie within it.
//
// Reports from other incarnations of a member and from suspected members
// are ignored (not needed, and not validated, so that a faulty member
// cannot hold up the change). Decide returns an error wrapping
// ErrBadReport, naming the reporter, for a report filed under another ID,
// from a non-member, for another epoch, with Held of the wrong size, or
// with a delivered index before Current.Start or beyond the cut; and one
// wrapping ErrBadView for a malformed Current.
func Decide(self ID, in ChangeInput) (Decision, error) {
	cur := &in.Current
	if err := checkView(cur); err != nil {
		return Decision{}, err
	}
	gone := make(map[ID]bool) // suspected, including replaced incarnations
	for id, ok := range in.Suspected {
		if ok && cur.Rank(id) >= 0 {
			gone[id] = true
		}
	}
	joiners := admit(cur, in.Joins, gone)
	leaving := make(map[ID]bool)
	for id, ok := range in.Leaves {
		if ok && cur.Rank(id) >= 0 {
			leaving[id] = true
		}
	}

	var d Decision
	for _, m := range cur.Members {
		if !gone[m.ID] {
			d.Leader, d.HasLeader = m.ID, true
			break
		}
	}
	var staying []Member // members of Current that continue, in rank order
	for _, m := range cur.Members {
		if !gone[m.ID] && !leaving[m.ID] {
			staying = append(staying, m)
		}
	}
	next := append(slices.Clone(staying), joiners...)
	d.Change = len(gone) > 0 || len(joiners) > 0 || len(leaving) > 0 || len(in.Reports) > 0 || topicsWanted(cur, next, in.Topics)
	if !d.Change {
		return d, nil
	}
	d.Next = next
	d.Excluded = cur.Rank(self) >= 0 && (gone[self] || leaving[self])
	d.Minority = len(d.Next) == 0 || !HasMajority(cur, func(id ID) bool { return in.CaughtUp[id] }, d.Next)

	reports, err := validReports(cur, in.Reports, gone)
	if err != nil {
		return Decision{}, err
	}
	for _, m := range staying {
		if _, ok := reports[m.ID]; !ok {
			d.Waiting = append(d.Waiting, m.ID)
		}
	}
	if len(d.Waiting) > 0 || len(staying) == 0 {
		return d, nil
	}

	cut := finalCut(cur, staying, reports)
	end := End(cur, cut)
	// Rule 6's check, over every report that counts (the continuing
	// members' and the leaving ones'): nothing anyone delivered may lie
	// beyond the cut.
	for _, id := range sortedIDs(reports) {
		if r := reports[id]; r.Delivered > end {
			return Decision{}, fmt.Errorf("%w: report from %d: delivered %d beyond the cut's end %d of view %d",
				ErrBadReport, id, r.Delivered, end, cur.Epoch)
		}
	}
	if d.HasLeader && self == d.Leader && !d.Minority {
		d.Propose = proposal(&in, d.Next, cut)
		d.Propose.Topics = topicsNext(cur, d.Next, staying, reports, in.Topics)
	}
	return d, nil
}

// checkView rejects a current view that Decide cannot work with.
func checkView(v *View) error {
	if len(v.Members) == 0 {
		return fmt.Errorf("%w: view %d has no members", ErrBadView, v.Epoch)
	}
	if len(v.Sent) != len(v.Members) {
		return fmt.Errorf("%w: view %d has %d members but %d sent counts", ErrBadView, v.Epoch, len(v.Members), len(v.Sent))
	}
	seen := make(map[ID]bool, len(v.Members))
	for _, m := range v.Members {
		if seen[m.ID] {
			return fmt.Errorf("%w: view %d lists member %d twice", ErrBadView, v.Epoch, m.ID)
		}
		seen[m.ID] = true
	}
	return nil
}

// admit returns the joiners the join requests admit, sorted by ID, and
// marks in gone every member of cur that a newer incarnation replaces.
func admit(cur *View, joins []Member, gone map[ID]bool) []Member {
	newest := make(map[ID]Member)
	for _, j := range joins {
		if r := cur.Rank(j.ID); r >= 0 && j.Incarnation <= cur.Members[r].Incarnation {
			continue // already a member, or a stale request of an earlier incarnation
		}
		if n, ok := newest[j.ID]; ok && n.Incarnation >= j.Incarnation {
			continue
		}
		newest[j.ID] = j
	}
	out := make([]Member, 0, len(newest))
	for id, j := range newest {
		if cur.Rank(id) >= 0 {
			gone[id] = true
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// validReports returns the reports that count: those of the current
// incarnation of members of cur that are not gone. It fails on a report
// that cannot be right.
func validReports(cur *View, all map[ID]Report, gone map[ID]bool) (map[ID]Report, error) {
	out := make(map[ID]Report, len(all))
	for _, id := range sortedIDs(all) {
		r := all[id]
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: report from %d: %s", ErrBadReport, id, fmt.Sprintf(format, args...))
		}
		if r.Member.ID != id {
			return nil, bad("filed by member %v", r.Member)
		}
		rank := cur.Rank(id)
		if rank < 0 {
			return nil, bad("not a member of view %d", cur.Epoch)
		}
		if r.Member.Incarnation != cur.Members[rank].Incarnation || gone[id] {
			continue
		}
		switch {
		case r.Epoch != cur.Epoch:
			return nil, bad("for view %d, not %d", r.Epoch, cur.Epoch)
		case len(r.Held) != len(cur.Members):
			return nil, bad("holds %d senders, view %d has %d", len(r.Held), cur.Epoch, len(cur.Members))
		case len(r.TopicHeld) != len(cur.Topics):
			return nil, bad("holds %d topics, view %d has %d", len(r.TopicHeld), cur.Epoch, len(cur.Topics))
		case slices.ContainsFunc(r.TopicHeld, func(h []uint64) bool { return len(h) != len(cur.Members) }):
			return nil, bad("holds a topic's messages of other than view %d's %d senders", cur.Epoch, len(cur.Members))
		case r.Delivered < cur.Start:
			return nil, bad("delivered %d before view %d's start %d", r.Delivered, cur.Epoch, cur.Start)
		}
		out[id] = r
	}
	return out, nil
}

// finalCut computes the cut that ends cur: for every sender of cur, in
// rank order, the lowest Held among the reports of the given members.
// Members without a report are skipped.
func finalCut(cur *View, staying []Member, reports map[ID]Report) []SenderCut {
	cut := make([]SenderCut, len(cur.Members))
	for s, m := range cur.Members {
		cut[s].ID = m.ID
		first := true
		for _, k := range staying {
			r, ok := reports[k.ID]
			if !ok {
				continue
			}
			if first || r.Held[s] < cut[s].Seq {
				cut[s].Seq, first = r.Held[s], false
			}
		}
	}
	return cut
}

// proposal builds the record of view e+1 with members next ending the
// current view at cut.
func proposal(in *ChangeInput, next []Member, cut []SenderCut) *View {
	cur := &in.Current
	wasJoining := make(map[ID]bool, len(cur.Joining))
	for _, id := range cur.Joining {
		wasJoining[id] = true
	}
	v := &View{
		Epoch:   cur.Epoch + 1,
		Members: slices.Clone(next),
		Cut:     cut,
		Start:   End(cur, cut),
		Sent:    make([]uint64, len(next)),
	}
	for i, m := range next {
		r := cur.Rank(m.ID)
		switch {
		case r >= 0 && cur.Members[r].Incarnation == m.Incarnation:
			v.Sent[i] = cur.Sent[r] + cut[r].Seq
			if wasJoining[m.ID] && !in.CaughtUp[m.ID] {
				v.Joining = append(v.Joining, m.ID)
			}
		default:
			v.Joining = append(v.Joining, m.ID)
		}
	}
	return v
}

func sortedIDs[V any](m map[ID]V) []ID {
	ids := make([]ID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
