package ordering

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/barrier"
)

// TestTopicProperties runs random schedules of groups with topics — 3 to
// 8 members, 1 to 5 topics with random subscribers (none, some, all) and
// modes, every member sending to the group and publishing on any topic,
// subscribed or not; records delayed and reordered across links (a
// topic's link is not ordered with its sender's others), data overtaken
// on its link, skewed clocks — and checks the guarantees of pub/sub
// within a view: nothing is delivered at a member that does not
// subscribe; every subscriber delivers every message of its topics and
// every member every message to the group, each once; FIFO per sender
// and topic; the subscribers of a topic deliver its messages in the same
// order with the same indexes; any two messages two members both
// delivered come in the same relative order at both (every member's
// sequence follows (stamp, rank, topic, sequence)); and a message of an
// atomic topic is delivered only once every subscriber holds it.
func TestTopicProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for _, fanOut := range []int{0, 2} {
		t.Run(fmt.Sprintf("fanout=%d", fanOut), func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				if err := runTopics(seed, fanOut); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
}

// randomTopics draws a view's topics for n members: each member
// subscribes to each with probability one half, and a topic is atomic or
// total order.
func randomTopics(r *rand.Rand, n int) []Topic {
	topics := make([]Topic, 1+r.IntN(5))
	for i := range topics {
		topics[i].Mode = []Mode{Atomic, TotalOrder}[r.IntN(2)]
		topics[i].Start = uint64(r.IntN(3)) * 100
		for m := range n {
			if r.IntN(2) == 0 {
				topics[i].Subscribers = append(topics[i].Subscribers, m)
			}
		}
	}
	return topics
}

// sentMsg is a message a test sent: to the group (topic 0) or a topic.
type sentMsg struct {
	from, topic int
	payload     string
}

// topicRun drives a cluster with topics at random.
type topicRun struct {
	r    *rand.Rand
	c    *cluster
	now  int64
	sent []sentMsg
}

func newTopicRun(seed uint64, n int, cfg Config) *topicRun {
	r := rand.New(rand.NewPCG(seed, 0x70b1c))
	skew := make([]int64, n)
	for i := range skew {
		skew[i] = int64(r.IntN(400)) - 200
	}
	c := newCluster(nil, n, cfg, skew)
	c.overtake = func() bool { return r.IntN(4) == 0 }
	return &topicRun{r: r, c: c, now: 1000}
}

// step takes one random step: a send, a publish, records moved on a
// link, or a tick.
func (tr *topicRun) step() {
	r, c, n := tr.r, tr.c, len(tr.c.cores)
	tr.now += int64(r.IntN(8))
	switch a := r.IntN(20); {
	case a < 2:
		i := r.IntN(n)
		p := fmt.Sprintf("%d.%d", i, len(tr.sent))
		tr.sent = append(tr.sent, sentMsg{i, 0, p})
		c.send(i, tr.now, p)
	case a < 7:
		i, topic := r.IntN(n), 1+r.IntN(len(c.cfg.Topics))
		p := fmt.Sprintf("%d.%d.t%d", i, len(tr.sent), topic)
		tr.sent = append(tr.sent, sentMsg{i, topic, p})
		c.publish(i, tr.now, topic, p)
	case a < 17:
		keys := c.linkKeys()
		if len(keys) == 0 {
			return
		}
		c.deliverOn(keys[r.IntN(len(keys))], 1+r.IntN(3), tr.now)
	default:
		c.tick(r.IntN(n), tr.now)
	}
}

// holds reports whether member m holds message (sender, topic, seq).
func holds(c *cluster, m, sender, topic int, seq uint64) bool {
	if m == sender {
		return true
	}
	slot := c.cores[m].slotOf(sender, topic)
	return slot >= 0 && c.cores[m].prom.Held(slot) >= seq
}

// atomicCheck returns an onDeliver hook that records in *violation a
// message of an atomic channel delivered before every receiver holds it.
func atomicCheck(c *cluster, violation *error) func(int, Delivery) {
	return func(member int, d Delivery) {
		if *violation != nil {
			return
		}
		receivers := allRanks(len(c.cores))
		mode := c.cfg.Mode
		if d.Topic > 0 {
			receivers, mode = c.cfg.Topics[d.Topic-1].Subscribers, c.cfg.Topics[d.Topic-1].Mode
		}
		if mode != Atomic {
			return
		}
		for _, s := range receivers {
			if !holds(c, s, d.Sender, d.Topic, d.Seq) {
				*violation = fmt.Errorf("m%d delivered %s before m%d held it", member, describeDelivery(d), s)
			}
		}
	}
}

func allRanks(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func runTopics(seed uint64, fanOut int) error {
	r := rand.New(rand.NewPCG(seed, 0x7091c5))
	n := 3 + r.IntN(6)
	cfg := Config{
		Mode: []Mode{Atomic, TotalOrder}[r.IntN(2)], Start: 50, BeaconInterval: 100, BeaconGap: time.Duration(5 + r.IntN(20)),
		FanOut: fanOut, MaxAhead: 10000, Topics: randomTopics(r, n),
	}
	tr := newTopicRun(seed, n, cfg)
	var violation error
	tr.c.onDeliver = atomicCheck(tr.c, &violation)
	for step := 0; step < 500 && violation == nil; step++ {
		tr.step()
	}
	if violation != nil {
		return violation
	}
	tr.c.settle(tr.now, tr.now+100000)
	if violation != nil {
		return violation
	}
	return checkTopicDeliveries(cfg, tr.c.delivered, tr.sent, true)
}

// checkTopicDeliveries checks what members delivered against what was
// sent: with complete, every message reached every receiver; in any
// case, nothing reached a member that does not receive it, no message
// came twice or not sent, FIFO per channel, the receivers of a channel
// delivered its messages in the same order with the same indexes, and
// each member's sequence follows (stamp, rank, topic, sequence), so that
// any two members order the messages they both delivered alike.
func checkTopicDeliveries(cfg Config, delivered [][]Delivery, sent []sentMsg, complete bool) error {
	receives := func(m, topic int) bool {
		return topic == 0 || slices.Contains(cfg.Topics[topic-1].Subscribers, m)
	}
	bySender := make(map[string]sentMsg)
	for _, s := range sent {
		bySender[s.payload] = s
	}
	// seqs holds, per topic (0: the group), the longest sequence of its
	// messages a member delivered: every other member's is a prefix of
	// it, with the same indexes (at the end of a view, only in atomic
	// mode: best effort makes no promise about who delivered what).
	seqs := make(map[int][]Delivery)
	comparable := func(topic int) bool {
		if topic == 0 {
			return complete || cfg.Mode == Atomic
		}
		return complete || cfg.Topics[topic-1].Mode == Atomic
	}
	for m, ds := range delivered {
		seen := make(map[string]bool)
		next := make(map[[2]int]uint64)
		perTopic := make(map[int][]Delivery)
		for k, d := range ds {
			s, ok := bySender[string(d.Payload)]
			if !ok {
				return fmt.Errorf("m%d delivered %s, which nobody sent", m, describeDelivery(d))
			}
			if s.from != d.Sender || s.topic != d.Topic {
				return fmt.Errorf("m%d delivered %s, sent by m%d on topic %d", m, describeDelivery(d), s.from, s.topic)
			}
			if !receives(m, d.Topic) {
				return fmt.Errorf("m%d delivered %s of a topic it does not subscribe to", m, describeDelivery(d))
			}
			if seen[string(d.Payload)] {
				return fmt.Errorf("m%d delivered %s twice", m, describeDelivery(d))
			}
			seen[string(d.Payload)] = true
			ch := [2]int{d.Sender, d.Topic}
			if d.Seq != next[ch]+1 {
				return fmt.Errorf("m%d: FIFO broken: %s after #%d", m, describeDelivery(d), next[ch])
			}
			next[ch] = d.Seq
			if k > 0 && deliveryCmp(ds[k-1], d) >= 0 {
				return fmt.Errorf("m%d delivered %s after %s", m, describeDelivery(d), describeDelivery(ds[k-1]))
			}
			perTopic[d.Topic] = append(perTopic[d.Topic], d)
		}
		if complete {
			for _, s := range sent {
				if receives(m, s.topic) && !seen[s.payload] {
					return fmt.Errorf("m%d never delivered %q (topic %d)", m, s.payload, s.topic)
				}
			}
		}
		for topic, ts := range perTopic {
			if !comparable(topic) {
				continue
			}
			start := cfg.Start
			if topic > 0 {
				start = cfg.Topics[topic-1].Start
			}
			for k, d := range ts {
				if d.Index != start+uint64(k)+1 {
					return fmt.Errorf("m%d: %s is its topic's delivery %d", m, describeDelivery(d), k+1)
				}
			}
			ref, ok := seqs[topic]
			if !ok || len(ts) > len(ref) {
				ref, ts = ts, ref
				seqs[topic] = ref
			}
			for k := range ts {
				if deliveryCmp(ts[k], ref[k]) != 0 || ts[k].Index != ref[k].Index {
					return fmt.Errorf("topic %d position %d: %s at one member, %s at another", topic, k, describeDelivery(ts[k]), describeDelivery(ref[k]))
				}
			}
		}
	}
	// Pairwise, the messages two members both delivered come in the same
	// relative order (implied by the order above; checked directly).
	for a := range delivered {
		for b := a + 1; b < len(delivered); b++ {
			if err := sameRelativeOrder(delivered[a], delivered[b]); err != nil {
				return fmt.Errorf("m%d and m%d: %w", a, b, err)
			}
		}
	}
	return nil
}

// deliveryCmp orders deliveries as the cores do.
func deliveryCmp(a, b Delivery) int {
	return cmp.Or(cmp.Compare(a.TS, b.TS), cmp.Compare(a.Sender, b.Sender), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Seq, b.Seq))
}

// sameRelativeOrder checks that the messages both a and b hold come in
// the same order in both.
func sameRelativeOrder(a, b []Delivery) error {
	id := func(d Delivery) string { return string(d.Payload) }
	inB := make(map[string]bool, len(b))
	for _, d := range b {
		inB[id(d)] = true
	}
	inA := make(map[string]bool, len(a))
	for _, d := range a {
		inA[id(d)] = true
	}
	var ca, cb []string
	for _, d := range a {
		if inB[id(d)] {
			ca = append(ca, id(d))
		}
	}
	for _, d := range b {
		if inA[id(d)] {
			cb = append(cb, id(d))
		}
	}
	for k := range ca {
		if ca[k] != cb[k] {
			return fmt.Errorf("common message %d is %q at one, %q at the other", k, ca[k], cb[k])
		}
	}
	return nil
}

// TestTopicViewEndProperties ends random atomic views with topics
// abruptly — some members crash with records in flight, the survivors
// wedge wherever they are — and checks virtual synchrony per topic: with
// the cut of every channel the minimum of what its surviving receivers
// (and its sender, if it survives) report holding, the survivors that
// subscribe to a topic end the view with the same sequence of its
// messages, all end it with the same sequence of the group's, nothing
// delivered lies beyond the cut, and each survivor gets back for sending
// again exactly its own messages beyond the cut on the group and on
// atomic topics, in its send order. A planted fault (the cut as a
// maximum) must be caught.
func TestTopicViewEndProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for _, fanOut := range []int{0, 2} {
		t.Run(fmt.Sprintf("fanout=%d", fanOut), func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				if err := runTopicViewEnd(seed, fanOut, minCut); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
	t.Run("planted fault is caught", func(t *testing.T) {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			if runTopicViewEnd(seed, 0, maxCut) != nil {
				return
			}
		}
		t.Fatal("a cut taken as the maximum of the reports went unnoticed")
	})
}

func runTopicViewEnd(seed uint64, fanOut int, cutOf func([][]uint64) []uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x71e3))
	n := 3 + r.IntN(5)
	cfg := Config{
		Mode: Atomic, Epoch: 4, Start: 1000, BeaconInterval: 100, BeaconGap: time.Duration(5 + r.IntN(20)),
		FanOut: fanOut, MaxAhead: 10000, Topics: randomTopics(r, n),
	}
	tr := newTopicRun(seed, n, cfg)
	c := tr.c
	var violation error
	c.onDeliver = atomicCheck(c, &violation)
	for step := 0; step < 100+r.IntN(400) && violation == nil; step++ {
		tr.step()
	}
	if violation != nil {
		return violation
	}
	crashed := make(map[int]bool)
	for len(crashed) < r.IntN((n+1)/2) {
		crashed[r.IntN(n)] = true
	}
	var survivors []int
	held := make(map[int][]uint64)
	heldTopics := make(map[int][][]uint64)
	for i, core := range c.cores {
		if crashed[i] {
			continue
		}
		core.Wedge()
		survivors = append(survivors, i)
		held[i], heldTopics[i] = core.Held(), core.HeldTopics()
	}
	if len(survivors) == 0 {
		return nil
	}
	var cut Cut
	var reports [][]uint64
	for _, i := range survivors {
		reports = append(reports, held[i])
	}
	cut.Senders = cutOf(reports)
	for t, topic := range cfg.Topics {
		tc := make([]uint64, n)
		for s := range n {
			// The channel's holders that survive report it.
			var rs [][]uint64
			for _, i := range survivors {
				if i == s || slices.Contains(topic.Subscribers, i) {
					rs = append(rs, []uint64{heldTopics[i][t][s]})
				}
			}
			if len(rs) > 0 {
				tc[s] = cutOf(rs)[0]
			}
		}
		cut.Topics = append(cut.Topics, tc)
	}
	ended := make([][]Delivery, n)
	for _, i := range survivors {
		rest, resend, err := c.cores[i].Finish(cut)
		if err != nil {
			return fmt.Errorf("m%d: %w", i, err)
		}
		all := append(slices.Clone(c.delivered[i]), rest...)
		for _, d := range all {
			limit := cut.Senders[d.Sender]
			if d.Topic > 0 {
				limit = cut.Topics[d.Topic-1][d.Sender]
			}
			if d.Seq > limit && (d.Topic == 0 || cfg.Topics[d.Topic-1].Mode == Atomic) {
				return fmt.Errorf("m%d delivered %s beyond the cut %d", i, describeDelivery(d), limit)
			}
		}
		// Own messages beyond the cut, on the group and atomic topics,
		// in send order.
		var want []string
		count := make(map[int]uint64)
		for _, s := range tr.sent {
			if s.from != i {
				continue
			}
			count[s.topic]++
			limit := cut.Senders[i]
			if s.topic > 0 {
				if cfg.Topics[s.topic-1].Mode != Atomic {
					continue
				}
				limit = cut.Topics[s.topic-1][i]
			}
			if count[s.topic] > limit {
				want = append(want, s.payload)
			}
		}
		var got []string
		for _, m := range resend {
			got = append(got, string(m.Payload))
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("m%d re-sends %q, want %q", i, got, want)
		}
		ended[i] = all
	}
	// What the survivors delivered holds the guarantees within a view
	// (the crashed members' sequences are left empty); then virtual
	// synchrony per channel: the survivors that receive an atomic one
	// delivered the same messages of it in the view, exactly the cut's.
	if err := checkTopicDeliveries(cfg, ended, tr.sent, false); err != nil {
		return err
	}
	for t := 0; t <= len(cfg.Topics); t++ {
		if t > 0 && cfg.Topics[t-1].Mode != Atomic {
			continue
		}
		var ref []Delivery
		first := true
		for _, i := range survivors {
			if t > 0 && !slices.Contains(cfg.Topics[t-1].Subscribers, i) {
				continue
			}
			var ds []Delivery
			for _, d := range ended[i] {
				if d.Topic == t {
					ds = append(ds, d)
				}
			}
			if first {
				ref, first = ds, false
				continue
			}
			if len(ds) != len(ref) {
				return fmt.Errorf("topic %d: m%d ended the view with %d messages, another survivor with %d", t, i, len(ds), len(ref))
			}
			for k := range ds {
				if deliveryCmp(ds[k], ref[k]) != 0 || ds[k].Index != ref[k].Index {
					return fmt.Errorf("topic %d position %d: m%d %s, another %s", t, k, i, describeDelivery(ds[k]), describeDelivery(ref[k]))
				}
			}
		}
		// The view delivered exactly the cut.
		var total uint64
		if t == 0 {
			for _, s := range cut.Senders {
				total += s
			}
		} else {
			for _, s := range cut.Topics[t-1] {
				total += s
			}
		}
		if !first && uint64(len(ref)) != total {
			return fmt.Errorf("topic %d: the view ended with %d deliveries, the cut holds %d", t, len(ref), total)
		}
	}
	return nil
}

// TestTopicRejects: records that break the topic rules are rejected and
// change nothing.
func TestTopicRejects(t *testing.T) {
	cfg := Config{Mode: Atomic, BeaconInterval: 100, Topics: []Topic{{Subscribers: []int{0, 1}, Mode: Atomic}, {Subscribers: []int{2}, Mode: Atomic}}}
	c := newCluster(t, 3, cfg, nil)
	core := c.cores[1]
	for _, tc := range []struct {
		name string
		r    Record
		want error
	}{
		{"a plain beacon", Record{Kind: KindBeacon, TS: 5}, ErrBadRecord},
		{"a topic that does not exist", Record{Kind: KindPublish, Topic: 3, Seq: 1, TS: 5}, ErrTopic},
		{"a topic not subscribed to", Record{Kind: KindPublish, Topic: 2, Seq: 1, TS: 5}, ErrTopic},
		{"a bound on a topic that does not exist", Record{Kind: KindTopicBeacon, TS: 5, Bounds: []TopicSeq{{3, 1}}}, ErrTopic},
		{"bounds out of order", Record{Kind: KindTopicBeacon, TS: 5, Bounds: []TopicSeq{{2, 1}, {1, 1}}}, ErrBadRecord},
	} {
		if err := core.Step(10, 0, tc.r); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A bound that goes backwards.
	if err := core.Step(10, 0, Record{Kind: KindPublish, Topic: 1, Seq: 1, TS: 5, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := core.Step(10, 0, Record{Kind: KindTopicBeacon, TS: 7, Bounds: []TopicSeq{{1, 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := core.Step(10, 0, Record{Kind: KindTopicBeacon, TS: 8}); err != nil {
		t.Fatal(err)
	}
	before := core.prom.Applied(0)
	if err := core.Step(10, 0, Record{Kind: KindTopicBeacon, TS: 9, Bounds: []TopicSeq{{1, 2}}}); err != nil {
		t.Fatalf("a bound ahead of what is held waits: %v", err)
	}
	if err := core.Step(10, 0, Record{Kind: KindTopicBeacon, TS: 10, Bounds: []TopicSeq{{1, 1}}}); !errors.Is(err, barrier.ErrBackwards) {
		t.Errorf("a bound going backwards: %v, want ErrBackwards", err)
	}
	if core.prom.Applied(0) != 9 || before != 8 {
		t.Errorf("group channel promise %d then %d, want 8 then 9", before, core.prom.Applied(0))
	}
	// A topic beacon whose promise on one topic channel breaks the rules
	// changes no channel: message #2 on topic 1, held early, is stamped
	// 20, below the promise 25 made after message #1.
	c2 := newCluster(t, 3, cfg, nil)
	core = c2.cores[1]
	if err := core.Step(10, 0, Record{Kind: KindPublish, Topic: 1, Seq: 2, TS: 20, Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if err := core.Step(10, 0, Record{Kind: KindTopicBeacon, TS: 25, Bounds: []TopicSeq{{1, 1}}}); !errors.Is(err, barrier.ErrBelowPromise) {
		t.Errorf("a promise above a later message held early: %v, want ErrBelowPromise", err)
	}
	if core.prom.Applied(0) != 0 {
		t.Errorf("the rejected record changed the group channel's promise to %d", core.prom.Applied(0))
	}
	// Topics in a group without them.
	plain := newCluster(t, 2, Config{Mode: Atomic, BeaconInterval: 100}, nil)
	for _, r := range []Record{{Kind: KindPublish, Topic: 1, Seq: 1, TS: 5}, {Kind: KindTopicBeacon, TS: 5}} {
		if err := plain.cores[1].Step(10, 0, r); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%v in a group without topics: %v, want ErrBadRecord", r.Kind, err)
		}
	}
	if _, _, err := plain.cores[0].Publish(10, 1, nil); !errors.Is(err, ErrTopic) {
		t.Errorf("Publish in a group without topics: %v, want ErrTopic", err)
	}
}

// TestTopicConfig: NewCore refuses topics it cannot run.
func TestTopicConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"unordered", Config{Mode: Unordered, Topics: []Topic{{Mode: Atomic}}}},
		{"subscriber out of range", Config{Topics: []Topic{{Subscribers: []int{3}}}}},
		{"subscribers out of order", Config{Topics: []Topic{{Subscribers: []int{1, 0}}}}},
		{"subscriber twice", Config{Topics: []Topic{{Subscribers: []int{1, 1}}}}},
		{"unordered topic", Config{Topics: []Topic{{Mode: Unordered}}}},
	} {
		tc.cfg.Self, tc.cfg.Members = 0, 3
		if _, err := NewCore(tc.cfg, 0); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
