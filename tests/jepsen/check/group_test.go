package check

import (
	"fmt"
	"slices"
	"testing"
)

func gview(epoch, start uint64, members ...uint64) GroupEvent {
	return GroupEvent{View: &GroupView{Epoch: epoch, Start: start, Members: members}}
}

// gdel is the delivery at index of message seq of sender's incarnation,
// in view epoch; its payload is "sender.incarnation.seq".
func gdel(epoch, index, sender, inc, seq uint64) GroupEvent {
	return GroupEvent{Delivery: &GroupDelivery{Epoch: epoch, Index: index, Sender: sender, Incarnation: inc, Seq: seq,
		Payload: fmt.Sprintf("%d.%d.%d", sender, inc, seq)}}
}

func replay(ev GroupEvent) GroupEvent {
	d := *ev.Delivery
	d.Replayed = true
	return GroupEvent{Delivery: &d}
}

func sent(payload string, status SendStatus) Send {
	var s Send
	fmt.Sscanf(payload, "%d.%d", &s.Sender, &s.Incarnation)
	s.Payload, s.Status, s.Invoke, s.Complete = payload, status, 0, 1
	return s
}

// goodGroup is a correct run: members 1, 2 and 3 deliver in view 1;
// member 3's first incarnation is excluded by view 2 after index 4 (its
// history is a prefix: it recorded up to index 3), and its second joins
// in view 3. In durable mode, every member is then killed and restarts
// on its log: members 1 and 2 replay it, member 3 (a wiped disk)
// receives the state, and all go on in view 4.
func goodGroup(durable bool) GroupHistory {
	common := []GroupEvent{
		gview(1, 0, 1, 2, 3),
		gdel(1, 1, 1, 1, 1), gdel(1, 2, 2, 1, 1), gdel(1, 3, 3, 1, 1), gdel(1, 4, 1, 1, 2),
		gview(2, 4, 1, 2),
		gdel(2, 5, 2, 1, 2), gdel(2, 6, 1, 1, 3),
		gview(3, 6, 1, 2, 3),
		gdel(3, 7, 3, 2, 1), gdel(3, 8, 1, 1, 4),
	}
	ok := Delivered
	if durable {
		ok = Durable
	}
	h := GroupHistory{
		Durable: durable,
		Incarnations: []Incarnation{
			{Member: 1, Incarnation: 1, Events: common, Final: !durable},
			{Member: 2, Incarnation: 1, Events: slices.Clone(common), Final: !durable},
			{Member: 3, Incarnation: 1, Events: slices.Clone(common[:4]), Excluded: 2},
			{Member: 3, Incarnation: 2, Events: slices.Clone(common[8:]), Final: !durable},
		},
		Sends: []Send{
			sent("1.1.1", ok), sent("1.1.2", Accepted), sent("1.1.3", ok), sent("1.1.4", ok),
			sent("2.1.1", ok), sent("2.1.2", Unanswered), sent("2.1.3", Unanswered),
			sent("3.1.1", Accepted), sent("3.1.2", Excluded), sent("3.1.3", Rejected),
			sent("3.2.1", ok),
		},
	}
	if durable {
		var replayed []GroupEvent
		for _, ev := range common {
			if ev.Delivery != nil {
				replayed = append(replayed, replay(ev))
			}
		}
		after := []GroupEvent{gview(4, 8, 1, 2, 3), gdel(4, 9, 1, 2, 1), gdel(4, 10, 3, 3, 1)}
		h.Incarnations = append(h.Incarnations,
			Incarnation{Member: 1, Incarnation: 2, Events: append(slices.Clone(replayed), after...), Final: true},
			Incarnation{Member: 2, Incarnation: 2, Events: append(slices.Clone(replayed), after...), Final: true},
			Incarnation{Member: 3, Incarnation: 3, Events: slices.Clone(after), Final: true},
		)
		h.Sends = append(h.Sends, sent("1.2.1", Durable), sent("3.3.1", Accepted))
	}
	return h
}

// events of member m's incarnation inc, for a change to edit.
func incOf(h *GroupHistory, m, inc uint64) *Incarnation {
	for i := range h.Incarnations {
		if h.Incarnations[i].Member == m && h.Incarnations[i].Incarnation == inc {
			return &h.Incarnations[i]
		}
	}
	panic("no such incarnation")
}

func TestCheckGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		durable bool
		// change plants a violation in a correct run.
		change func(h *GroupHistory)
		want   Property   // "" for a correct history
		also   []Property // other properties the change may break too
	}{
		{name: "correct", change: func(*GroupHistory) {}},
		{name: "correct, durable, after a restart of every member", durable: true, change: func(*GroupHistory) {}},
		{name: "correct: a member killed, its history a prefix", change: func(h *GroupHistory) {
			m2 := incOf(h, 2, 1)
			m2.Events, m2.Final = m2.Events[:7], false
		}},
		{name: "correct: an unanswered send delivered", change: func(h *GroupHistory) {
			for _, m := range []uint64{1, 2} {
				inc := incOf(h, m, 1)
				inc.Events = append(inc.Events, gdel(3, 9, 2, 1, 3))
			}
			inc := incOf(h, 3, 2)
			inc.Events = append(inc.Events, gdel(3, 9, 2, 1, 3))
		}},
		{name: "two members with different orders", want: TotalOrder, also: []Property{VirtualSynchrony, NoDuplicate}, change: func(h *GroupHistory) {
			m2 := incOf(h, 2, 1)
			m2.Events[2], m2.Events[3] = gdel(1, 2, 3, 1, 1), gdel(1, 3, 2, 1, 1)
		}},
		{name: "duplicate delivery", want: NoDuplicate, also: []Property{FIFO}, change: func(h *GroupHistory) {
			m1 := incOf(h, 1, 1)
			m1.Events = append(m1.Events, gdel(3, 9, 1, 1, 1))
		}},
		{name: "duplicate delivery of a replayed message", durable: true, want: NoDuplicate, also: []Property{Fencing}, change: func(h *GroupHistory) {
			m1 := incOf(h, 1, 2)
			m1.Events = append(m1.Events, gdel(4, 11, 1, 1, 4))
		}},
		{name: "fenced incarnation's message delivered after its exclusion", want: Fencing, change: func(h *GroupHistory) {
			m1 := incOf(h, 1, 1)
			m1.Events = append(m1.Events, gdel(3, 9, 3, 1, 2))
		}},
		{name: "fencing without being told", want: Fencing, change: func(h *GroupHistory) {
			incOf(h, 3, 1).Excluded = 0
			m1 := incOf(h, 1, 1)
			m1.Events = append(m1.Events, gdel(3, 9, 3, 1, 2))
		}},
		{name: "message of a killed incarnation after the restart", durable: true, want: Fencing, change: func(h *GroupHistory) {
			m1 := incOf(h, 1, 2)
			m1.Events = append(m1.Events, gdel(4, 11, 2, 1, 4))
			h.Sends = append(h.Sends, sent("2.1.4", Unanswered))
		}},
		{name: "durable message lost after recovery", durable: true, want: Durability, also: []Property{TotalOrder, Fencing, VirtualSynchrony}, change: func(h *GroupHistory) {
			// Members 1 and 2 restart without index 8, which they
			// reported durable, and go on from index 7.
			for _, m := range []uint64{1, 2} {
				inc := incOf(h, m, 2)
				inc.Events = append(inc.Events[:7], gview(4, 7, 1, 2, 3), gdel(4, 8, 1, 2, 1), gdel(4, 9, 3, 3, 1))
			}
			incOf(h, 3, 3).Events = []GroupEvent{gview(4, 7, 1, 2, 3), gdel(4, 8, 1, 2, 1), gdel(4, 9, 3, 3, 1)}
		}},
		{name: "correct: the rest of the log handed, not replayed, before the first view", durable: true, change: func(h *GroupHistory) {
			// Members 1 and 2 replay up to index 6; the group restarts
			// from their logs, which hold 7 and 8.
			for _, m := range []uint64{1, 2} {
				inc := incOf(h, m, 2)
				inc.Events[6].Delivery.Replayed, inc.Events[7].Delivery.Replayed = false, false
			}
		}},
		{name: "delivery before the first view differs", durable: true, want: TotalOrder, also: []Property{NoDuplicate, Durability}, change: func(h *GroupHistory) {
			inc := incOf(h, 2, 2)
			inc.Events[6], inc.Events[7] = gdel(3, 7, 1, 1, 4), gdel(3, 8, 3, 2, 1)
		}},
		{name: "replayed delivery differs", durable: true, want: TotalOrder, change: func(h *GroupHistory) {
			m2 := incOf(h, 2, 2)
			m2.Events[2] = replay(gdel(1, 3, 2, 1, 3))
		}},
		{name: "message never sent", want: NoCreation, change: func(h *GroupHistory) {
			m1 := incOf(h, 1, 1)
			m1.Events = append(m1.Events, gdel(3, 9, 2, 1, 9))
		}},
		{name: "rejected message delivered", want: NoCreation, change: func(h *GroupHistory) {
			h.Sends = append(h.Sends, sent("2.1.4", Rejected))
			m1 := incOf(h, 1, 1)
			m1.Events = append(m1.Events, gdel(3, 9, 2, 1, 4))
		}},
		{name: "virtual synchrony: a member misses a message of the view", want: VirtualSynchrony, also: []Property{TotalOrder}, change: func(h *GroupHistory) {
			m2 := incOf(h, 2, 1)
			m2.Events = append(slices.Clone(m2.Events[:4]), gview(2, 3, 1, 2))
			m2.Final = false
		}},
		{name: "FIFO", want: FIFO, change: func(h *GroupHistory) {
			for _, m := range []uint64{1, 2} {
				inc := incOf(h, m, 1)
				inc.Events[1], inc.Events[4] = gdel(1, 1, 1, 1, 2), gdel(1, 4, 1, 1, 1)
			}
			incOf(h, 3, 1).Events[1] = gdel(1, 1, 1, 1, 2)
		}},
		{name: "delivered message missing from a final history", want: Delivery, change: func(h *GroupHistory) {
			m2 := incOf(h, 2, 1)
			m2.Events = m2.Events[:10]
		}},
		{name: "accepted message missing from its own final history", want: Delivery, change: func(h *GroupHistory) {
			h.Sends = append(h.Sends, sent("1.1.5", Accepted))
		}},
		{name: "incarnation zero", want: Wellformed, change: func(h *GroupHistory) {
			h.Incarnations = append(h.Incarnations, Incarnation{Member: 4})
		}},
		{name: "a payload sent twice", want: Wellformed, change: func(h *GroupHistory) {
			h.Sends = append(h.Sends, sent("2.1.1", Accepted))
		}},
		{name: "an event that is neither a view nor a delivery", want: Wellformed, change: func(h *GroupHistory) {
			m1 := incOf(h, 1, 1)
			m1.Events = append(m1.Events, GroupEvent{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodGroup(tc.durable)
			tc.change(&h)
			expectOnly(t, CheckGroup(h), tc.want, tc.also...)
		})
	}
}
