package ordering

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// mergeMsg is a message in the merge tests: rank's message seq on topic
// (0: the group), stamped ts.
type mergeMsg struct {
	rank, topic int
	seq         uint64
	ts          Timestamp
}

func (m mergeMsg) key() key {
	return key{ts: m.ts, seq: m.seq, rank: int32(m.rank), topic: int32(m.topic)}
}

func (m mergeMsg) payload() []byte {
	return fmt.Appendf(nil, "m%d/%d#%d", m.rank, m.topic, m.seq)
}

// mergeStep is one step of a merge test: messages arrive, in order, and
// then the core delivers those stamped below below (if not zero), or
// those up to cut (if not nil) and puts back the others in the merge,
// as Finish does.
type mergeStep struct {
	arrive []mergeMsg
	below  Timestamp
	cut    *Cut
}

// mergeCore returns a core of members that subscribes to topics, with
// only what the merge uses set up.
func mergeCore(members, topics int) *Core {
	c := &Core{cfg: Config{Members: members}}
	all := make([]int, members)
	for r := range all {
		all[r] = r
	}
	for range topics {
		c.cfg.Topics = append(c.cfg.Topics, Topic{Subscribers: all, Mode: Atomic})
	}
	c.initChans(c.initTopics())
	return c
}

// mergeRef is the reference the merge is checked against: the held
// messages, sorted by keyLess before each delivery.
type mergeRef struct {
	held []mergeMsg
	next map[[2]int]uint64 // by rank and topic: the next to deliver
}

// deliver removes and returns the held messages that ok accepts, in
// delivery order, stopping at the first it does not if stop. It returns
// an error for a message whose channel's earlier ones are not all
// delivered: the barrier never passes a missing message, and a cut is
// never beyond one.
func (r *mergeRef) deliver(ok func(mergeMsg) bool, stop bool) ([]mergeMsg, error) {
	slices.SortFunc(r.held, func(a, b mergeMsg) int {
		switch {
		case keyLess(a.key(), b.key()):
			return -1
		case keyLess(b.key(), a.key()):
			return 1
		}
		return 0
	})
	var out []mergeMsg
	kept := r.held[:0]
	for i, m := range r.held {
		if !ok(m) {
			if stop {
				kept = append(kept, r.held[i:]...)
				break
			}
			kept = append(kept, m)
			continue
		}
		ch := [2]int{m.rank, m.topic}
		if r.next[ch] == 0 {
			r.next[ch] = 1
		}
		if m.seq != r.next[ch] {
			return nil, fmt.Errorf("%v delivered before message %d of its channel", m, r.next[ch])
		}
		r.next[ch]++
		out = append(out, m)
	}
	r.held = kept
	return out, nil
}

// runMerge runs steps on a core's merge and on the reference, and
// returns an error at the first difference in what they deliver or hold.
func runMerge(members, topics int, steps []mergeStep) error {
	c := mergeCore(members, topics)
	ref := mergeRef{next: make(map[[2]int]uint64)}
	for i, s := range steps {
		for _, m := range s.arrive {
			c.holdMessage(c.slotOf(m.rank, m.topic), m.seq, m.ts, m.payload())
			ref.held = append(ref.held, m)
		}
		var want []mergeMsg
		var err error
		switch {
		case s.cut != nil:
			c.deliverCut(*s.cut)
			c.remerge()
			want, err = ref.deliver(func(m mergeMsg) bool { return m.seq <= s.cut.limit(m.key()) }, false)
		case s.below > 0:
			c.deliverBelow(s.below)
			want, err = ref.deliver(func(m mergeMsg) bool { return m.ts < s.below }, true)
		}
		if err != nil {
			return fmt.Errorf("step %d: the test breaks the barrier rule: %v", i, err)
		}
		got := c.ready.Deliveries
		c.ready.Deliveries = nil
		if len(got) != len(want) {
			return fmt.Errorf("step %d: delivered %d messages, want %d", i, len(got), len(want))
		}
		for k, d := range got {
			m := want[k]
			if d.Sender != m.rank || d.Topic != m.topic || d.Seq != m.seq || d.TS != m.ts || string(d.Payload) != string(m.payload()) {
				return fmt.Errorf("step %d: delivery %d is m%d/%d#%d@%d %q, want %v", i, k, d.Sender, d.Topic, d.Seq, d.TS, d.Payload, m)
			}
		}
		if c.Buffered() != len(ref.held) {
			return fmt.Errorf("step %d: %d buffered, want %d", i, c.Buffered(), len(ref.held))
		}
	}
	return nil
}

func TestMerge(t *testing.T) {
	msg := func(rank, topic int, seq uint64, ts Timestamp) mergeMsg { return mergeMsg{rank, topic, seq, ts} }
	tests := []struct {
		name            string
		members, topics int
		steps           []mergeStep
	}{
		{"in order", 3, 0, []mergeStep{
			{arrive: []mergeMsg{msg(1, 0, 1, 10), msg(2, 0, 1, 15), msg(1, 0, 2, 20)}, below: 16},
			{arrive: []mergeMsg{msg(2, 0, 2, 25)}, below: 100},
		}},
		{"nothing below the barrier", 2, 0, []mergeStep{
			{arrive: []mergeMsg{msg(1, 0, 1, 10)}, below: 10},
			{below: 11},
		}},
		{"out of order within a channel", 2, 0, []mergeStep{
			{arrive: []mergeMsg{msg(1, 0, 3, 30), msg(1, 0, 1, 10)}, below: 20},
			{arrive: []mergeMsg{msg(1, 0, 4, 40)}, below: 20},
			{arrive: []mergeMsg{msg(1, 0, 2, 20)}, below: 35},
			{below: 100},
		}},
		{"a channel waits for its next while others go on", 3, 0, []mergeStep{
			{arrive: []mergeMsg{msg(1, 0, 2, 20), msg(2, 0, 1, 5), msg(2, 0, 2, 15), msg(2, 0, 3, 25)}, below: 10},
			{arrive: []mergeMsg{msg(1, 0, 1, 10)}, below: 30},
		}},
		{"equal stamps from different ranks", 4, 0, []mergeStep{
			{arrive: []mergeMsg{msg(3, 0, 1, 10), msg(1, 0, 1, 10), msg(2, 0, 1, 10), msg(0, 0, 1, 10), msg(2, 0, 2, 11), msg(1, 0, 2, 12)}, below: 12},
			{below: 100},
		}},
		{"topics", 3, 2, []mergeStep{
			{arrive: []mergeMsg{msg(1, 2, 1, 11), msg(1, 0, 1, 10), msg(2, 1, 1, 11), msg(1, 1, 1, 12), msg(0, 2, 1, 11)}, below: 12},
			// A faulty sender's equal stamps on two channels: by topic.
			{arrive: []mergeMsg{msg(2, 2, 1, 20), msg(2, 0, 1, 20), msg(2, 1, 2, 20), msg(0, 1, 1, 20)}, below: 21},
		}},
		{"out of order on topics", 2, 2, []mergeStep{
			{arrive: []mergeMsg{msg(1, 1, 2, 20), msg(1, 2, 2, 21), msg(1, 2, 1, 15)}, below: 18},
			{arrive: []mergeMsg{msg(1, 1, 1, 16)}, below: 100},
		}},
		{"cut, then put back", 3, 1, []mergeStep{
			{arrive: []mergeMsg{
				msg(0, 0, 1, 10), msg(1, 0, 1, 11), msg(1, 0, 2, 30), msg(2, 0, 1, 12), msg(2, 0, 2, 13),
				msg(1, 1, 1, 5), msg(2, 1, 1, 40), msg(2, 1, 3, 60), msg(0, 1, 1, 7),
			}, below: 11},
			// Messages within the cut go whatever their stamps, in order;
			// those beyond it, behind a missing one too, stay.
			{cut: &Cut{Senders: []uint64{1, 2, 1}, Topics: [][]uint64{{1, 0, 1}}}},
			{arrive: []mergeMsg{msg(2, 1, 2, 50), msg(0, 0, 2, 55)}, below: 100},
		}},
		{"cut within nothing held", 2, 0, []mergeStep{
			{arrive: []mergeMsg{msg(1, 0, 2, 20)}},
			{cut: &Cut{Senders: []uint64{0, 0}}},
			{arrive: []mergeMsg{msg(1, 0, 1, 10)}, below: 100},
		}},
		{"cut after deliveries", 2, 0, []mergeStep{
			{arrive: []mergeMsg{msg(1, 0, 1, 10), msg(1, 0, 2, 20), msg(1, 0, 3, 30), msg(0, 0, 1, 25)}, below: 15},
			{cut: &Cut{Senders: []uint64{0, 2}}},
			{cut: &Cut{Senders: []uint64{1, 3}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := runMerge(tt.members, tt.topics, tt.steps); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMergeRandom checks the merge against the reference over random
// schedules: each channel's messages stamped in increasing order, close
// enough that different senders' stamps often tie; they arrive shuffled
// and the barrier follows, never passing a missing message, with a cut
// now and then.
func TestMergeRandom(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		members, topics := 1+r.IntN(5), r.IntN(3)
		var all []mergeMsg
		for rank := range members {
			ts := Timestamp(r.IntN(5))
			seq := make([]uint64, topics+1)
			for range r.IntN(30) {
				ts += Timestamp(1 + r.IntN(4))
				topic := r.IntN(topics + 1)
				seq[topic]++
				all = append(all, mergeMsg{rank, topic, seq[topic], ts})
			}
		}
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		arrived := make(map[mergeMsg]bool)
		held := make(map[[2]int]uint64)  // by rank and topic: how many arrived in sequence
		cutAt := make(map[[2]int]uint64) // the highest cut so far
		var steps []mergeStep
		var barrier Timestamp
		for len(all) > 0 {
			n := min(len(all), 1+r.IntN(6))
			s := mergeStep{arrive: all[:n:n]}
			for _, m := range all[:n] {
				arrived[m] = true
			}
			all = all[n:]
			// The barrier stays at or below every missing message.
			limit := Timestamp(math.MaxUint64)
			for _, m := range all {
				limit = min(limit, m.ts)
			}
			if r.IntN(8) == 0 {
				cut := Cut{Senders: make([]uint64, members)}
				for range topics {
					cut.Topics = append(cut.Topics, make([]uint64, members))
				}
				for ch := range heldPrefixes(arrived, members, topics, held) {
					lo := cutAt[ch]
					v := lo + uint64(r.IntN(int(held[ch]-lo)+1))
					if ch[1] == 0 {
						cut.Senders[ch[0]] = v
					} else {
						cut.Topics[ch[1]-1][ch[0]] = v
					}
				}
				s.cut = &cut
				for ch := range held {
					cutAt[ch] = max(cutAt[ch], cut.limit(key{rank: int32(ch[0]), topic: int32(ch[1])}))
				}
			} else if limit > barrier {
				barrier += Timestamp(r.Uint64N(uint64(min(limit-barrier, 20)))) + 1
				s.below = barrier
			}
			steps = append(steps, s)
		}
		steps = append(steps, mergeStep{below: math.MaxUint64})
		if err := runMerge(members, topics, steps); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// heldPrefixes updates held, by rank and topic, to the count of each
// channel's messages arrived in sequence, and returns it.
func heldPrefixes(arrived map[mergeMsg]bool, members, topics int, held map[[2]int]uint64) map[[2]int]uint64 {
	for rank := range members {
		for topic := range topics + 1 {
			ch := [2]int{rank, topic}
			for {
				found := false
				for m := range arrived {
					if m.rank == rank && m.topic == topic && m.seq == held[ch]+1 {
						found = true
						break
					}
				}
				if !found {
					break
				}
				held[ch]++
			}
		}
	}
	return held
}
