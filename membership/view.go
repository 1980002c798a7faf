package membership

import (
	"errors"

	"github.com/convoy-gcs/convoy/membership/record"
)

// The view records, defined in package record (which the durable log
// uses without the etcd client); see there.
type (
	// ID identifies a member process.
	ID = record.ID
	// Member is one incarnation of a member.
	Member = record.Member
	// SenderCut says how many of one sender's messages of a view are
	// delivered in that view.
	SenderCut = record.SenderCut
	// View is a committed view record.
	View = record.View
	// Suffix says that a joiner receives the group's messages from a
	// donor's log.
	Suffix = record.Suffix
	// LogPos identifies the last entry of a restarted member's log.
	LogPos = record.LogPos
	// Topic is one topic of a view.
	Topic = record.Topic
)

// End returns the global index of the last message of view v given its
// cut (the next view's Start): v.Start plus every sender's cut.
func End(v *View, cut []SenderCut) uint64 {
	end := v.Start
	for _, c := range cut {
		end += c.Seq
	}
	return end
}

// Report is a member's final report for a view it has wedged: it sends,
// announces and delivers nothing more in that view, so the report cannot
// change.
type Report struct {
	Epoch  uint64 `json:"epoch"`
	Member Member `json:"member"`
	// Held[r] is, for the member of rank r in the view, the highest
	// sequence number s such that the reporter holds that member's
	// messages 1..s complete.
	Held []uint64 `json:"held"`
	// TopicHeld[t][r] is, for the view's topic t (from 0) and the member
	// of rank r, the highest s such that the reporter holds that member's
	// messages 1..s on the topic: zero for a topic it does not subscribe
	// to, but its own count of every topic. Nil in a view without topics.
	TopicHeld [][]uint64 `json:"topic_held,omitempty"`
	// Delivered is the global index of the last message the reporter
	// delivered in the view (or the view's Start if none).
	Delivered uint64 `json:"delivered"`
	// Hears lists the members the reporter heard from after it wedged:
	// whom it still reaches (see Suspected).
	Hears []ID `json:"hears,omitempty"`
	// Seq numbers the reporter's writes of its report for the view, from
	// 1 (0: unnumbered): it writes again when whom it hears changes or a
	// write was given up, and a write that lands late never replaces a
	// later one (Store.PutReport).
	Seq uint64 `json:"seq,omitempty"`
}

// Errors about views, for callers to test with errors.Is.
var (
	// ErrConflict: the view the caller built on is no longer current (a
	// different view or cut was committed first).
	ErrConflict = errors.New("membership: view changed concurrently")
	// ErrNoMajority: the proposed view does not hold a majority of the
	// caught-up members of the current view.
	ErrNoMajority = errors.New("membership: no majority of the current view")
	// ErrNoView: no view has been committed yet.
	ErrNoView = errors.New("membership: no view committed")
	// ErrBadReport: a final report contradicts the view (wrong size, or a
	// delivered index beyond the cut).
	ErrBadReport = errors.New("membership: inconsistent report")
)

// HasMajority reports whether next keeps a majority of cur's caught-up
// members: the members of cur, except joiners of cur that have not
// completed their state transfer (caughtUp says which have).
func HasMajority(cur *View, caughtUp func(ID) bool, next []Member) bool {
	joining := make(map[ID]bool, len(cur.Joining))
	for _, id := range cur.Joining {
		joining[id] = true
	}
	// A member counts as kept only in the same incarnation: a new one
	// under the same ID is a joiner without the old one's state.
	in := make(map[Member]bool, len(next))
	for _, m := range next {
		in[Member{ID: m.ID, Incarnation: m.Incarnation}] = true
	}
	var voters, kept int
	for _, m := range cur.Members {
		if joining[m.ID] && (caughtUp == nil || !caughtUp(m.ID)) {
			continue
		}
		voters++
		if in[Member{ID: m.ID, Incarnation: m.Incarnation}] {
			kept++
		}
	}
	return 2*kept > voters
}
