// Package vscheck checks histories of a view-managed Convoy group against
// its guarantees: one total order of messages and views shared by every
// member, per-sender FIFO, and virtual synchrony.
//
// A history is what one incarnation of a member saw, in order: the views
// it installed and the messages it delivered. Histories may be prefixes —
// a member killed with SIGKILL loses the tail of what it recorded — so
// every check holds for any prefix of a correct history, and nothing
// requires a history to be complete. The types are JSON-friendly so that
// member processes can stream their histories as JSON lines.
package vscheck

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// View is a view as a member saw it installed.
type View struct {
	Epoch uint64 `json:"epoch"`
	// Start is the global index of the last message delivered before the
	// view; its first message gets Start+1.
	Start uint64 `json:"start"`
	// Members are the member ids in rank order.
	Members []uint64 `json:"members"`
}

// Delivery is a message as a member delivered it.
type Delivery struct {
	Epoch  uint64 `json:"epoch"`
	Index  uint64 `json:"index"`
	Sender uint64 `json:"sender"`
	// Incarnation is the sender's incarnation, numbered by the test from
	// 1, or 0 if unknown. A new incarnation numbers its messages from 1
	// again.
	Incarnation uint64 `json:"incarnation,omitempty"`
	Seq         uint64 `json:"seq"`
	Payload     string `json:"payload"`
}

// Event is one entry of a history: exactly one of View and Delivery is
// set.
type Event struct {
	View     *View     `json:"view,omitempty"`
	Delivery *Delivery `json:"delivery,omitempty"`
}

// Kind classifies a violation by the guarantee it breaks.
type Kind int

const (
	// Malformed: a history is out of shape (a delivery before any view,
	// an event that is neither a view nor a delivery, or both).
	Malformed Kind = iota
	// Sequence: a history's own sequence is broken (a gap in the indexes,
	// a view misplaced among the deliveries, an epoch skipped, a delivery
	// in an epoch other than the view installed).
	Sequence
	// TotalOrder: two histories deliver different messages at one index,
	// or install different views with one epoch.
	TotalOrder
	// Duplicate: a message is delivered twice, or at two indexes.
	Duplicate
	// FIFO: a sender's messages are delivered out of their order.
	FIFO
	// NotMember: a message is delivered in a view without its sender.
	NotMember
	// VirtualSynchrony: histories that install view e+1 delivered
	// different messages in view e, or a message of view e is delivered
	// beyond the cut.
	VirtualSynchrony
	// Incarnations: an incarnation of a member installs a view without
	// it, ends though the group kept it, or starts too early.
	Incarnations
)

func (k Kind) String() string {
	switch k {
	case Malformed:
		return "malformed"
	case Sequence:
		return "sequence"
	case TotalOrder:
		return "total order"
	case Duplicate:
		return "duplicate"
	case FIFO:
		return "FIFO"
	case NotMember:
		return "not a member"
	case VirtualSynchrony:
		return "virtual synchrony"
	case Incarnations:
		return "incarnations"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Violation is one broken guarantee.
type Violation struct {
	Kind Kind
	// Msg says what broke and where.
	Msg string
}

func (v Violation) Error() string { return v.Msg }

// maxErrors bounds how many violations Check reports.
const maxErrors = 20

// errs collects violations, up to maxErrors.
type errs struct {
	list    []Violation
	dropped int
}

func (e *errs) add(kind Kind, format string, args ...any) {
	if len(e.list) == maxErrors {
		e.dropped++
		return
	}
	e.list = append(e.list, Violation{Kind: kind, Msg: fmt.Sprintf(format, args...)})
}

func (e *errs) err() error {
	list := make([]error, 0, len(e.list)+1)
	for _, v := range e.list {
		list = append(list, v)
	}
	if e.dropped > 0 {
		list = append(list, fmt.Errorf("and %d more violations", e.dropped))
	}
	return errors.Join(list...)
}

// placed is where a message was first seen, for error messages.
type placed struct {
	msg     string // epoch, sender, seq and payload
	history string
}

// Check verifies the guarantees over all histories, keyed by a name that
// identifies the incarnation in error messages:
//
//   - every history starts with a view;
//   - within a history, views have consecutive epochs, each view is
//     placed exactly at its Start index (right after the delivery with
//     that index), and deliveries have consecutive indexes and belong to
//     the view installed last;
//   - every history that installs a view gives it the same start and
//     members;
//   - every history that delivers index i delivers the same message
//     there, and a payload is delivered at one index only (so no history
//     delivers it twice);
//   - a message is delivered in a view whose members include its sender;
//   - per-sender FIFO: within a history, a sender's sequence numbers
//     increase as long as the sender stays a member of the views in
//     between and keeps its incarnation (a sender that leaves the views
//     returns as a new incarnation, whose numbers start again at 1; so
//     does one whose deliveries carry a new Incarnation);
//   - virtual synchrony: every history that installs view e+1 after view
//     e delivered exactly the same messages in e, and no history delivers
//     a message of view e beyond the start of view e+1 (the cut).
//
// It returns nil if every check holds, or an error listing (up to 20)
// violations.
func Check(histories map[string][]Event) error {
	return check(histories).err()
}

// Violations runs the checks of Check and returns the violations it
// finds, up to 20 of them, and how many more it left out.
func Violations(histories map[string][]Event) (list []Violation, more int) {
	e := check(histories)
	return e.list, e.dropped
}

func check(histories map[string][]Event) *errs {
	e := &errs{}
	views := make(map[uint64]View)
	viewFrom := make(map[uint64]string)
	byIndex := make(map[uint64]placed)
	payloadAt := make(map[string]uint64)
	// inView[epoch][history]: the messages a history delivered in view
	// epoch before installing epoch+1.
	inView := make(map[uint64]map[string]string)
	// lastIn[epoch]: the highest index some history delivered in epoch,
	// and which one.
	type highest struct {
		index   uint64
		history string
	}
	lastIn := make(map[uint64]highest)

	for _, name := range slices.Sorted(maps.Keys(histories)) {
		var (
			cur     *View  // the view installed last
			last    uint64 // the index of the last delivery (or cur.Start)
			inCur   strings.Builder
			lastSeq = make(map[uint64]uint64) // per sender, the last seq delivered
			lastInc = make(map[uint64]uint64) // per sender, its last incarnation
			seen    = make(map[string]uint64) // payloads delivered, at index
		)
		for i, ev := range histories[name] {
			switch {
			case ev.View != nil && ev.Delivery != nil:
				e.add(Malformed, "%s, event %d: both a view and a delivery", name, i)
			case ev.View != nil:
				v := *ev.View
				if prev, ok := views[v.Epoch]; ok && !sameView(prev, v) {
					e.add(TotalOrder, "view %d differs: %s in %s, %s in %s", v.Epoch, describe(prev), viewFrom[v.Epoch], describe(v), name)
				} else if !ok {
					views[v.Epoch], viewFrom[v.Epoch] = v, name
				}
				if cur != nil {
					if v.Epoch != cur.Epoch+1 {
						e.add(Sequence, "%s, event %d: view %d installed after view %d", name, i, v.Epoch, cur.Epoch)
					}
					if v.Start != last {
						e.add(Sequence, "%s, event %d: view %d (start %d) installed after index %d", name, i, v.Epoch, v.Start, last)
					}
					if v.Epoch == cur.Epoch+1 {
						if inView[cur.Epoch] == nil {
							inView[cur.Epoch] = make(map[string]string)
						}
						inView[cur.Epoch][name] = inCur.String()
					}
					// A sender absent from the new view returns, if ever,
					// as a new incarnation numbering from 1 again.
					for s := range lastSeq {
						if !slices.Contains(v.Members, s) {
							delete(lastSeq, s)
						}
					}
				}
				cur, last = &v, v.Start
				inCur.Reset()
			case ev.Delivery != nil:
				d := *ev.Delivery
				if cur == nil {
					e.add(Malformed, "%s, event %d: delivery of index %d before any view", name, i, d.Index)
					last = d.Index
					continue
				}
				if d.Epoch != cur.Epoch {
					e.add(Sequence, "%s, event %d: delivery of index %d in epoch %d, but view %d is installed", name, i, d.Index, d.Epoch, cur.Epoch)
				}
				if !slices.Contains(cur.Members, d.Sender) {
					e.add(NotMember, "%s, event %d: index %d sent by %d, but sender %d is not a member of view %d", name, i, d.Index, d.Sender, d.Sender, cur.Epoch)
				}
				if d.Index != last+1 {
					e.add(Sequence, "%s, event %d: index %d delivered after index %d", name, i, d.Index, last)
				}
				last = d.Index
				msg := fmt.Sprintf("epoch %d sender %d seq %d payload %q", d.Epoch, d.Sender, d.Seq, d.Payload)
				if d.Incarnation != 0 {
					msg = fmt.Sprintf("epoch %d sender %d incarnation %d seq %d payload %q", d.Epoch, d.Sender, d.Incarnation, d.Seq, d.Payload)
				}
				if p, ok := byIndex[d.Index]; ok && p.msg != msg {
					e.add(TotalOrder, "index %d: %s in %s, %s in %s", d.Index, p.msg, p.history, msg, name)
				} else if !ok {
					byIndex[d.Index] = placed{msg, name}
				}
				if at, ok := seen[d.Payload]; ok {
					e.add(Duplicate, "%s, event %d: payload %q delivered twice, at indexes %d and %d", name, i, d.Payload, at, d.Index)
				} else if at, ok := payloadAt[d.Payload]; ok && at != d.Index {
					e.add(Duplicate, "payload %q delivered at index %d by one history and at index %d in %s", d.Payload, at, d.Index, name)
				}
				seen[d.Payload] = d.Index
				if _, ok := payloadAt[d.Payload]; !ok {
					payloadAt[d.Payload] = d.Index
				}
				if inc, ok := lastInc[d.Sender]; ok && inc != d.Incarnation {
					delete(lastSeq, d.Sender)
				}
				lastInc[d.Sender] = d.Incarnation
				if prev, ok := lastSeq[d.Sender]; ok && d.Seq <= prev {
					e.add(FIFO, "%s, event %d: sender %d's seq %d delivered after its seq %d (FIFO)", name, i, d.Sender, d.Seq, prev)
				}
				lastSeq[d.Sender] = d.Seq
				if h := lastIn[d.Epoch]; d.Index > h.index {
					lastIn[d.Epoch] = highest{d.Index, name}
				}
				fmt.Fprintf(&inCur, "%d:%s;", d.Index, msg)
			default:
				e.add(Malformed, "%s, event %d: neither a view nor a delivery", name, i)
			}
		}
	}

	// Virtual synchrony.
	for _, epoch := range slices.Sorted(maps.Keys(inView)) {
		names := slices.Sorted(maps.Keys(inView[epoch]))
		ref := inView[epoch][names[0]]
		for _, name := range names[1:] {
			if got := inView[epoch][name]; got != ref {
				e.add(VirtualSynchrony, "virtual synchrony broken in view %d: %s and %s installed view %d after delivering different messages in it (%d and %d deliveries)",
					epoch, names[0], name, epoch+1, strings.Count(ref, ";"), strings.Count(got, ";"))
			}
		}
	}
	for _, epoch := range slices.Sorted(maps.Keys(lastIn)) {
		next, ok := views[epoch+1]
		if h := lastIn[epoch]; ok && h.index > next.Start {
			e.add(VirtualSynchrony, "virtual synchrony broken: %s delivered index %d in view %d, beyond the cut of view %d (start %d)",
				h.history, h.index, epoch, epoch+1, next.Start)
		}
	}
	return e
}

func sameView(a, b View) bool { return a.Start == b.Start && slices.Equal(a.Members, b.Members) }

func describe(v View) string { return fmt.Sprintf("start %d members %v", v.Start, v.Members) }

// Views returns every view some history installed, by epoch (the first
// seen, when histories disagree: Check reports that).
func Views(histories map[string][]Event) map[uint64]View {
	out := make(map[uint64]View)
	for _, name := range slices.Sorted(maps.Keys(histories)) {
		for _, ev := range histories[name] {
			if v := ev.View; v != nil {
				if _, ok := out[v.Epoch]; !ok {
					out[v.Epoch] = *v
				}
			}
		}
	}
	return out
}

// Missing returns, for each history that lacks some of them, the
// accepted payloads it did not deliver, in the order given. Pass the
// histories of members that must have delivered every message (the
// survivors) and the payloads whose sends those members' groups accepted.
//
// A history that starts late (a joiner, or a later incarnation of a
// member) received the messages before its first view as state, not as
// deliveries: a payload that one of the histories delivered at an index
// up to the start of that first view counts as received.
func Missing(histories map[string][]Event, accepted []string) map[string][]string {
	at := make(map[string]uint64)
	for _, h := range histories {
		for _, ev := range h {
			if d := ev.Delivery; d != nil {
				at[d.Payload] = d.Index
			}
		}
	}
	out := make(map[string][]string)
	for name, h := range histories {
		got := make(map[string]bool, len(h))
		var start uint64
		if len(h) > 0 && h[0].View != nil {
			start = h[0].View.Start
		}
		for _, ev := range h {
			if d := ev.Delivery; d != nil {
				got[d.Payload] = true
			}
		}
		for _, p := range accepted {
			if i, ok := at[p]; !got[p] && !(ok && i <= start) {
				out[name] = append(out[name], p)
			}
		}
	}
	return out
}

// CheckIncarnations verifies the life of member id across its successive
// incarnations (the histories of one member, in order; each may be a
// prefix): every view an incarnation installs contains id, and every
// incarnation but the last ended because the group excluded it — the
// view after its last one, as views gives it, does not contain id — and
// the next incarnation starts in a later view. views is typically Views
// over every history.
func CheckIncarnations(id uint64, incarnations [][]Event, views map[uint64]View) error {
	var e errs
	prevLast := uint64(0) // the last epoch of the previous incarnation
	for n, h := range incarnations {
		var first, last uint64
		for _, ev := range h {
			v := ev.View
			if v == nil {
				continue
			}
			if first == 0 {
				first = v.Epoch
			}
			last = v.Epoch
			if !slices.Contains(v.Members, id) {
				e.add(Incarnations, "member %d, incarnation %d installed view %d, which does not contain it (members %v)", id, n+1, v.Epoch, v.Members)
			}
		}
		if n > 0 && first != 0 && first <= prevLast+1 {
			e.add(Incarnations, "member %d, incarnation %d starts in view %d, not after view %d that excluded incarnation %d", id, n+1, first, prevLast+1, n)
		}
		if n == len(incarnations)-1 {
			break
		}
		if last == 0 {
			// A joiner excluded before its state arrived installed no
			// view: nothing to check for it.
			continue
		}
		next, ok := views[last+1]
		switch {
		case !ok:
			e.add(Incarnations, "member %d, incarnation %d ended after view %d, but no history installed view %d", id, n+1, last, last+1)
		case slices.Contains(next.Members, id):
			e.add(Incarnations, "member %d, incarnation %d ended after view %d, but view %d contains it (members %v)", id, n+1, last, last+1, next.Members)
		}
		prevLast = last
	}
	return e.err()
}
