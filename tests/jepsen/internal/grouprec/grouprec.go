// Package grouprec is what a member of the fault campaign's group
// workload (tests/jepsen/internal/groupmember) records, and how the
// records of every run of every member make one check.GroupHistory.
//
// Each run of a member (a process, from a start to its exit or its
// kill) writes a file of its own as JSON lines of Record, numbering its
// incarnations from 1: a new one starts after the group excluded it. A
// message's payload names the run and the incarnation that sent it
// (Payload), since a delivery names only its sender; History numbers
// each member's incarnations across its runs from 1, in the order of
// (run, incarnation in the run).
package grouprec

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/check"
)

// Record is one line of a run's file: exactly one of the fields after
// Inc is set.
type Record struct {
	// Inc is the run's incarnation the record belongs to, from 1.
	Inc uint64 `json:"inc"`
	// View is a view the incarnation installed; Excluded the view that
	// went on without it (epoch 0 if the member could not tell which).
	View     *check.GroupView `json:"view,omitempty"`
	Excluded *check.GroupView `json:"excluded,omitempty"`
	// Delivery is a message the member delivered; its Incarnation is
	// left 0 (the payload names the sender's).
	Delivery *check.GroupDelivery `json:"delivery,omitempty"`
	// Invoke is a call of Send, written out before the call (Payload and
	// Invoke set); Return what it returned (Payload, Complete and Status
	// set). The payload names the sending incarnation.
	Invoke *check.Send `json:"invoke,omitempty"`
	Return *check.Send `json:"return,omitempty"`
	// Final: the incarnation finished the run (it delivered a message of
	// its own sent after every sender stopped), so that its history holds
	// every message reported durable.
	Final bool `json:"final,omitempty"`
}

// Payload is the payload of message k of incarnation inc of run run of
// member member: unique in a campaign's run.
func Payload(member, run, inc uint64, k int) string {
	return fmt.Sprintf("%d.%d.%d.%d", member, run, inc, k)
}

// sender is a run's incarnation of a member.
type sender struct{ member, run, inc uint64 }

// parsePayload returns the incarnation that sent payload p.
func parsePayload(p string) (sender, bool) {
	var s sender
	var k int
	n, err := fmt.Sscanf(p, "%d.%d.%d.%d", &s.member, &s.run, &s.inc, &k)
	return s, err == nil && n == 4 && s.run > 0 && s.inc > 0
}

// Run is what one run of a member recorded.
type Run struct {
	Member, Run uint64
	Records     []Record
}

// History makes the history of a whole run of the workload from the
// records of every run of every member (each may be a prefix, the last
// of a member included). Incarnation n of a member is the n-th of the
// (run, incarnation) pairs of that member that any record names, in
// order; an incarnation is final if it recorded Final and no exclusion
// after it. A send without its return is unanswered.
func History(runs []Run) check.GroupHistory {
	// Every incarnation named anywhere, numbered per member.
	seen := make(map[sender]bool)
	for _, r := range runs {
		for _, rec := range r.Records {
			seen[sender{r.Member, r.Run, max(rec.Inc, 1)}] = true
			if s, ok := parsePayload(payloadOf(rec)); ok {
				seen[s] = true
			}
		}
	}
	named := slices.SortedFunc(maps.Keys(seen), func(a, b sender) int {
		return cmp.Or(cmp.Compare(a.member, b.member), cmp.Compare(a.run, b.run), cmp.Compare(a.inc, b.inc))
	})
	number := make(map[sender]uint64, len(named))
	for i, s := range named {
		if i == 0 || named[i-1].member != s.member {
			number[s] = 1
		} else {
			number[s] = number[named[i-1]] + 1
		}
	}
	incOf := func(p string) uint64 {
		if s, ok := parsePayload(p); ok {
			return number[s]
		}
		return 0
	}

	h := check.GroupHistory{Durable: true}
	sends := make(map[string]int) // index in h.Sends, by payload
	for _, r := range runs {
		byInc := make(map[uint64]*check.Incarnation)
		var order []uint64
		inc := func(n uint64) *check.Incarnation {
			n = max(n, 1)
			if byInc[n] == nil {
				byInc[n] = &check.Incarnation{Member: r.Member, Incarnation: number[sender{r.Member, r.Run, n}]}
				order = append(order, n)
			}
			return byInc[n]
		}
		for _, rec := range r.Records {
			in := inc(rec.Inc)
			switch {
			case rec.View != nil:
				in.Events = append(in.Events, check.GroupEvent{View: rec.View})
			case rec.Excluded != nil:
				in.Excluded, in.Final = rec.Excluded.Epoch, false
			case rec.Delivery != nil:
				d := *rec.Delivery
				d.Incarnation = incOf(d.Payload)
				in.Events = append(in.Events, check.GroupEvent{Delivery: &d})
			case rec.Invoke != nil:
				s := *rec.Invoke
				s.Sender, s.Incarnation, s.Status = r.Member, incOf(s.Payload), check.Unanswered
				sends[s.Payload] = len(h.Sends)
				h.Sends = append(h.Sends, s)
			case rec.Return != nil:
				if i, ok := sends[rec.Return.Payload]; ok {
					h.Sends[i].Complete, h.Sends[i].Status = rec.Return.Complete, rec.Return.Status
				}
			case rec.Final:
				in.Final = true
			}
		}
		for _, n := range order {
			h.Incarnations = append(h.Incarnations, *byInc[n])
		}
	}
	return h
}

// payloadOf returns the payload a record names, or "".
func payloadOf(rec Record) string {
	switch {
	case rec.Delivery != nil:
		return rec.Delivery.Payload
	case rec.Invoke != nil:
		return rec.Invoke.Payload
	}
	return ""
}

// Mix is what the seed of a schedule makes its members send: the
// percentage of sends that wait until the message is delivered (the
// others return once the group accepts it), and the pause after each.
func Mix(seed int64) (waitPct int, pause time.Duration) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x67726f7570))
	return 20 + r.IntN(61), time.Duration(2+r.IntN(9)) * time.Millisecond
}
