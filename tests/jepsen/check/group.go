package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/convoy-gcs/convoy/internal/vscheck"
)

// GroupView is a view as a member saw it installed.
type GroupView struct {
	Epoch uint64 `json:"epoch"`
	// Start is the index of the last message delivered before the view;
	// its first message gets Start+1.
	Start uint64 `json:"start"`
	// Members are the member ids in rank order.
	Members []uint64 `json:"members"`
}

// GroupDelivery is a message as a member delivered it. Sender and
// Incarnation name the incarnation that sent it; Seq is its number
// among that incarnation's messages.
type GroupDelivery struct {
	Epoch       uint64 `json:"epoch"`
	Index       uint64 `json:"index"`
	Sender      uint64 `json:"sender"`
	Incarnation uint64 `json:"incarnation"`
	Seq         uint64 `json:"seq"`
	// Payload identifies the message: the workload makes every payload
	// unique.
	Payload string `json:"payload"`
	// Replayed marks a delivery read back from the member's own durable
	// log after a restart.
	Replayed bool `json:"replayed,omitempty"`
}

// A delivery is recovered, rather than delivered in a view of its
// incarnation, if it is replayed or comes before the incarnation's first
// view: in durable mode, a member restarted on its log hands the entries
// that the group confirms after its replay (the group restarted from the
// logs, or the member rejoins where its log ends), and a member that
// rejoins is handed the messages it missed, before its first view.

// GroupEvent is one entry of a history: exactly one of View and Delivery
// is set.
type GroupEvent struct {
	View     *GroupView     `json:"view,omitempty"`
	Delivery *GroupDelivery `json:"delivery,omitempty"`
}

// Incarnation is what one incarnation of a member installed and
// delivered, in order. A member's incarnations are numbered from 1: a
// process started again, on its data or on a wiped directory, and a
// member rejoining after the group excluded it, are new incarnations.
// The history may be a prefix of what the incarnation did.
type Incarnation struct {
	Member      uint64       `json:"member"`
	Incarnation uint64       `json:"incarnation"`
	Events      []GroupEvent `json:"events"`
	// Final says the incarnation lasted to the end of the run, after the
	// final quiet period, and its history is complete: it was neither
	// killed nor excluded.
	Final bool `json:"final,omitempty"`
	// Excluded is the epoch of the view that the incarnation was told
	// excluded it, or 0.
	Excluded uint64 `json:"excluded,omitempty"`
}

func (inc Incarnation) name() string {
	return fmt.Sprintf("member %d incarnation %d", inc.Member, inc.Incarnation)
}

// SendStatus is what a sender was told about a message.
type SendStatus string

// Send statuses.
const (
	// Accepted: Send returned once the group took the message.
	Accepted SendStatus = "accepted"
	// Delivered: Send waited until the sender delivered the message.
	Delivered SendStatus = "delivered"
	// Stable: Send waited until every member held the message.
	Stable SendStatus = "stable"
	// Durable: Send waited until the message was durable (delivered in
	// durable mode: on every member's disk).
	Durable SendStatus = "durable"
	// Excluded: Send failed because the group excluded the sender; the
	// message may have been delivered, within the cut.
	Excluded SendStatus = "excluded"
	// Rejected: Send failed before the group took the message; it is
	// never delivered.
	Rejected SendStatus = "rejected"
	// Unanswered: no answer was recorded (the sender was killed, or the
	// call timed out): the message may or may not be delivered.
	Unanswered SendStatus = "unanswered"
)

// Send is one call of Send, recorded before the call and completed with
// what it returned.
type Send struct {
	Sender      uint64     `json:"sender"`
	Incarnation uint64     `json:"incarnation"`
	Payload     string     `json:"payload"`
	Invoke      int64      `json:"invoke"`
	Complete    int64      `json:"complete"`
	Status      SendStatus `json:"status"`
}

// GroupHistory is everything a run of the group workload recorded.
type GroupHistory struct {
	// Durable says the group ran with durable delivery.
	Durable      bool          `json:"durable,omitempty"`
	Incarnations []Incarnation `json:"incarnations"`
	Sends        []Send        `json:"sends"`
}

// CheckGroup checks a history of the raw group. Deliveries not
// recovered (neither replayed nor before the incarnation's first view)
// are checked by package vscheck: one total order of messages and views
// with consecutive indexes in each history (TotalOrder), virtual
// synchrony (VirtualSynchrony), per-sender FIFO within an incarnation
// (FIFO), and no message delivered twice (NoDuplicate). Besides:
//
//   - a recovered delivery holds the message every other history holds
//     at its index, and no history delivers a message twice, recovered or
//     not (TotalOrder, NoDuplicate);
//   - every message delivered was sent by the incarnation it names, and
//     its send was not rejected (NoCreation);
//   - a message is delivered only in a view that holds its sender, and no
//     message of an incarnation is delivered beyond the start of the view
//     that excluded it — the view it was told excluded it, else the
//     first view after its last one without its member, else, as a
//     bound, the first view of a later incarnation of its member
//     (Fencing);
//   - every final incarnation delivered every message reported
//     delivered, stable or durable, and every message its own incarnation
//     sent and the group accepted, or holds it as state from before its
//     first view (Delivery; Durability for the durable ones in durable
//     mode);
//   - in durable mode, a message reported durable is at the same index in
//     every history that delivered that index, recovered or not
//     (Durability).
func CheckGroup(h GroupHistory) Result {
	g := &groupChecker{c: newCollector("group"), h: h}
	g.wellformed()
	g.orderAndSynchrony()
	g.checkRecovered()
	g.sent()
	g.fencing()
	g.delivered()
	g.durable()
	return g.c.result()
}

type groupChecker struct {
	c *collector
	h GroupHistory

	incs  []Incarnation           // the well-formed incarnations, in order
	sends map[string]Send         // by payload
	views map[uint64]vscheck.View // by epoch
	// at: each delivered message's first index, and where it was seen.
	at map[string]placedMsg
	// byIndex: the message first delivered at each index.
	byIndex map[uint64]placedMsg
}

type placedMsg struct {
	d     GroupDelivery
	where string
}

func sameMessage(a, b GroupDelivery) bool {
	return a.Sender == b.Sender && a.Incarnation == b.Incarnation && a.Seq == b.Seq && a.Payload == b.Payload
}

func (d GroupDelivery) describe() string {
	return fmt.Sprintf("%q (member %d incarnation %d seq %d)", d.Payload, d.Sender, d.Incarnation, d.Seq)
}

// wellformed checks the shape of the incarnations and sends.
func (g *groupChecker) wellformed() {
	type key struct{ member, inc uint64 }
	seen := make(map[key]bool)
	for _, inc := range g.h.Incarnations {
		k := key{inc.Member, inc.Incarnation}
		switch {
		case inc.Incarnation == 0:
			g.c.add(Wellformed, inc.name(), "incarnations are numbered from 1")
			continue
		case seen[k]:
			g.c.add(Wellformed, inc.name(), "two histories of one incarnation")
			continue
		}
		seen[k] = true
		g.incs = append(g.incs, inc)
	}
	slices.SortStableFunc(g.incs, func(a, b Incarnation) int {
		return cmp.Or(cmp.Compare(a.Member, b.Member), cmp.Compare(a.Incarnation, b.Incarnation))
	})
	g.sends = make(map[string]Send)
	for i, s := range g.h.Sends {
		where := fmt.Sprintf("send %d (%q by member %d incarnation %d)", i, s.Payload, s.Sender, s.Incarnation)
		switch s.Status {
		case Accepted, Delivered, Stable, Durable, Excluded, Rejected, Unanswered:
		default:
			g.c.add(Wellformed, where, "unknown status %q", s.Status)
			continue
		}
		if s.Status != Unanswered && s.Complete < s.Invoke {
			g.c.add(Wellformed, where, "completed at %d, before its invocation at %d", s.Complete, s.Invoke)
			continue
		}
		if _, ok := g.sends[s.Payload]; ok {
			g.c.add(Wellformed, where, "the payload was sent before: messages cannot be told apart")
			continue
		}
		g.sends[s.Payload] = s
	}
}

// recovered reports, for each event of inc, whether it is a recovered
// delivery: replayed, or before the first view.
func recovered(inc Incarnation) []bool {
	out := make([]bool, len(inc.Events))
	viewed := false
	for i, ev := range inc.Events {
		viewed = viewed || ev.View != nil
		out[i] = ev.View == nil && ev.Delivery != nil && (ev.Delivery.Replayed || !viewed)
	}
	return out
}

// events returns the history's events as package vscheck sees them,
// without the recovered deliveries.
func events(inc Incarnation) []vscheck.Event {
	out := make([]vscheck.Event, 0, len(inc.Events))
	rec := recovered(inc)
	for i, ev := range inc.Events {
		if rec[i] {
			continue
		}
		var v vscheck.Event
		if ev.View != nil {
			v.View = &vscheck.View{Epoch: ev.View.Epoch, Start: ev.View.Start, Members: ev.View.Members}
		}
		if d := ev.Delivery; d != nil {
			v.Delivery = &vscheck.Delivery{Epoch: d.Epoch, Index: d.Index, Sender: d.Sender, Incarnation: d.Incarnation, Seq: d.Seq, Payload: d.Payload}
		}
		out = append(out, v)
	}
	return out
}

// orderAndSynchrony runs package vscheck over the deliveries not
// recovered.
func (g *groupChecker) orderAndSynchrony() {
	all := make(map[string][]vscheck.Event, len(g.incs))
	for _, inc := range g.incs {
		all[inc.name()] = events(inc)
	}
	g.views = vscheck.Views(all)
	list, more := vscheck.Violations(all)
	for _, v := range list {
		var p Property
		switch v.Kind {
		case vscheck.Malformed:
			p = Wellformed
		case vscheck.Sequence, vscheck.TotalOrder:
			p = TotalOrder
		case vscheck.Duplicate:
			p = NoDuplicate
		case vscheck.FIFO:
			p = FIFO
		case vscheck.NotMember:
			p = Fencing
		case vscheck.VirtualSynchrony:
			p = VirtualSynchrony
		default:
			p = TotalOrder
		}
		g.c.add(p, "histories", "%s", v.Msg)
	}
	g.c.omit(more)
	// Index the messages, deliveries not recovered first, so that a
	// recovered one that differs is the one reported.
	g.at = make(map[string]placedMsg)
	g.byIndex = make(map[uint64]placedMsg)
	for _, recov := range []bool{false, true} {
		for _, inc := range g.incs {
			rec := recovered(inc)
			for i, ev := range inc.Events {
				if d := ev.Delivery; d != nil && ev.View == nil && rec[i] == recov {
					if _, ok := g.at[d.Payload]; !ok {
						g.at[d.Payload] = placedMsg{*d, inc.name()}
					}
					if _, ok := g.byIndex[d.Index]; !ok {
						g.byIndex[d.Index] = placedMsg{*d, inc.name()}
					}
				}
			}
		}
	}
}

// checkRecovered checks the recovered deliveries against the others, and
// every history for duplicates that involve a recovered delivery.
func (g *groupChecker) checkRecovered() {
	for _, inc := range g.incs {
		count := make(map[string]int)
		recov := make(map[string]bool)
		rec := recovered(inc)
		for i, ev := range inc.Events {
			d := ev.Delivery
			if d == nil || ev.View != nil {
				continue
			}
			count[d.Payload]++
			if !rec[i] {
				continue
			}
			recov[d.Payload] = true
			if p := g.byIndex[d.Index]; !sameMessage(p.d, *d) {
				g.c.add(TotalOrder, inc.name(), "recovered %s at index %d, where %s delivered %s", d.describe(), d.Index, p.where, p.d.describe())
			}
		}
		for _, p := range slices.Sorted(maps.Keys(recov)) {
			if count[p] > 1 {
				g.c.add(NoDuplicate, inc.name(), "delivered %q %d times, recovered among them", p, count[p])
			}
		}
	}
}

// sent checks that every message delivered was sent.
func (g *groupChecker) sent() {
	for _, p := range slices.Sorted(maps.Keys(g.at)) {
		m := g.at[p]
		s, ok := g.sends[p]
		switch {
		case !ok:
			g.c.add(NoCreation, m.where, "delivered %s at index %d, which was never sent", m.d.describe(), m.d.Index)
		case s.Status == Rejected:
			g.c.add(NoCreation, m.where, "delivered %s at index %d, whose send was rejected", m.d.describe(), m.d.Index)
		case s.Sender != m.d.Sender || s.Incarnation != m.d.Incarnation:
			g.c.add(NoCreation, m.where, "delivered %s at index %d, sent by member %d incarnation %d", m.d.describe(), m.d.Index, s.Sender, s.Incarnation)
		}
	}
}

// fencing checks that no message of an incarnation is delivered beyond
// the view that excluded it.
func (g *groupChecker) fencing() {
	type key struct{ member, inc uint64 }
	lastView := make(map[key]uint64)  // the last epoch each incarnation installed
	firstView := make(map[key]uint64) // the first
	told := make(map[key]uint64)
	for _, inc := range g.incs {
		k := key{inc.Member, inc.Incarnation}
		if inc.Excluded != 0 {
			told[k] = inc.Excluded
		}
		for _, ev := range inc.Events {
			if v := ev.View; v != nil {
				if _, ok := firstView[k]; !ok {
					firstView[k] = v.Epoch
				}
				lastView[k] = v.Epoch
			}
		}
	}
	epochs := slices.Sorted(maps.Keys(g.views))
	// bound returns the view beyond whose start nothing of k may be
	// delivered, and why.
	bound := func(k key) (vscheck.View, string, bool) {
		if e, ok := told[k]; ok {
			if v, ok := g.views[e]; ok {
				return v, "excluded it", true
			}
		}
		if last, ok := lastView[k]; ok {
			for _, e := range epochs {
				if v := g.views[e]; e > last && !slices.Contains(v.Members, k.member) {
					return v, "excluded it", true
				}
			}
		}
		var later []key
		for l := range firstView {
			if l.member == k.member && l.inc > k.inc {
				later = append(later, l)
			}
		}
		if len(later) > 0 {
			next := slices.MinFunc(later, func(a, b key) int { return cmp.Compare(a.inc, b.inc) })
			if v, ok := g.views[firstView[next]]; ok {
				return v, fmt.Sprintf("was the first of incarnation %d", next.inc), true
			}
		}
		return vscheck.View{}, "", false
	}
	reported := make(map[string]bool)
	for _, inc := range g.incs {
		for _, ev := range inc.Events {
			d := ev.Delivery
			if d == nil || ev.View != nil || reported[d.Payload] {
				continue
			}
			v, why, ok := bound(key{d.Sender, d.Incarnation})
			if ok && (d.Index > v.Start || d.Epoch >= v.Epoch) {
				reported[d.Payload] = true
				g.c.add(Fencing, inc.name(), "delivered %s at index %d in view %d, beyond the start (%d) of view %d, which %s",
					d.describe(), d.Index, d.Epoch, v.Start, v.Epoch, why)
			}
		}
	}
}

// delivered checks that the final incarnations delivered what they
// must.
func (g *groupChecker) delivered() {
	for _, inc := range g.incs {
		if !inc.Final {
			continue
		}
		got := make(map[string]bool)
		start, started := uint64(0), false
		for _, ev := range inc.Events {
			if d := ev.Delivery; d != nil && ev.View == nil {
				got[d.Payload] = true
			}
			if v := ev.View; v != nil && !started {
				start, started = v.Start, true
			}
		}
		for _, p := range slices.Sorted(maps.Keys(g.sends)) {
			s := g.sends[p]
			switch {
			case s.Status == Delivered, s.Status == Stable, s.Status == Durable:
			case s.Status == Accepted && s.Sender == inc.Member && s.Incarnation == inc.Incarnation:
			default:
				continue
			}
			if got[p] {
				continue
			}
			if m, ok := g.at[p]; ok && m.d.Index <= start {
				continue // part of the state it started from
			}
			prop := Delivery
			if g.h.Durable && s.Status == Durable {
				prop = Durability
			}
			g.c.add(prop, inc.name(), "lacks %q, sent by member %d incarnation %d and reported %s", p, s.Sender, s.Incarnation, s.Status)
		}
	}
}

// durable checks, in durable mode, that every message reported durable
// is at its index in every history that delivered that index.
func (g *groupChecker) durable() {
	if !g.h.Durable {
		return
	}
	for _, p := range slices.Sorted(maps.Keys(g.sends)) {
		if g.sends[p].Status != Durable {
			continue
		}
		m, ok := g.at[p]
		if !ok {
			continue // the final incarnations are checked for it
		}
		for _, inc := range g.incs {
			for _, ev := range inc.Events {
				if d := ev.Delivery; d != nil && ev.View == nil && d.Index == m.d.Index && !sameMessage(*d, m.d) {
					g.c.add(Durability, inc.name(), "delivered %s at index %d, where %s delivered %s, reported durable", d.describe(), d.Index, m.where, m.d.describe())
				}
			}
		}
	}
}
