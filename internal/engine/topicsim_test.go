package engine

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/invariants"
	"github.com/convoy-gcs/convoy/membership"
)

var topicSeeds = flag.Int("topics.seeds", cond(invariants.RaceEnabled, 20, 300), "number of seeds TestTopicsStep runs")

// TestTopicsStep runs groups with fixed membership and topics
// deterministically: every member's production runner driven by one
// goroutine on a virtual clock, their views' traffic on the simulated
// wire (random delays, a FIFO per sender, receiver and group: a topic's
// records travel apart from the sender's others), every draw made from
// the seed. A seed draws the group (3 to 7 members, atomic or total
// order, frontiers announced directly or through a tree), its topics (1
// to 5, each atomic or total order, with random subscribers: none, some
// or all) and a load: every member sends to the group and publishes on
// random topics, subscribed or not, for a while. Then it checks that
// every member delivered every message of the group and of its topics
// (liveness, within a bound of virtual time) and the guarantees of
// pub/sub within a view: nothing at a member that does not subscribe,
// not one record of a topic's on a link to a member that does not
// subscribe, each message once, FIFO per sender and topic, the
// subscribers of a topic in the same order with the same indexes, and
// any two messages two members both delivered in the same relative order
// at both.
//
// A failing seed replays, the same, with
//
//	go test -run 'TestTopicsStep$/seed=N$' ./internal/engine
func TestTopicsStep(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*topicSeeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := newTopicSim(t, seed, topicSimOptions{})
			s.run()
			s.check()
		})
	}
}

// TestTopicsSlowSubscriber: a subscriber slow to receive one topic (the
// wire delays every record of the topic's to it by half a second) holds
// back the atomic delivery of that topic, and of the messages ordered
// after its messages at the members that share it, but not the other
// topics at the members that do not subscribe to it: they deliver as
// fast as without the slow member. (The load publishes on the topics
// only: a message to the whole group waits for every member, the slow
// one too, and so do the messages ordered after it.) Virtual time is
// the simulation's, so the latencies compared are exact, not timed.
func TestTopicsSlowSubscriber(t *testing.T) {
	const slow = 500 * time.Millisecond
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			// Members 1..5; topic "a" to 1 and 2, "b" to 3, 4 and 5.
			// Member 1 receives "a" slowly.
			opts := topicSimOptions{
				n: 5, mode: Atomic,
				topics: []Topic{{Name: "a", Subscribers: []NodeID{1, 2}}, {Name: "b", Subscribers: []NodeID{3, 4, 5}}},
				slow:   func(to NodeID, topic string) bool { return to == 1 && topic == "a" }, slowBy: slow,
				topicsOnly: true,
			}
			s := newTopicSim(t, seed, opts)
			s.run()
			s.check()
			worst := func(topic string, at NodeID) time.Duration {
				var w time.Duration
				for _, d := range s.delivered[at] {
					if d.Topic == topic {
						w = max(w, d.at-s.sentAt[d.key()])
					}
				}
				return w
			}
			if w := worst("a", 2); w < slow {
				t.Errorf("topic a at member 2: worst latency %v, below the slow member's delay %v", w, slow)
			}
			for _, id := range []NodeID{3, 4, 5} {
				if w := worst("b", id); w > slow/10 {
					t.Errorf("topic b at member %d: worst latency %v, held back by the slow subscriber of a (%v)", id, w, slow)
				}
			}
		})
	}
}

// topicSimOptions fix what a seed would draw.
type topicSimOptions struct {
	n      int
	mode   Mode
	topics []Topic
	// slow says which topics' records reach which member late, by slowBy.
	slow   func(to NodeID, topic string) bool
	slowBy time.Duration
	// topicsOnly: the load publishes on topics and sends nothing to the
	// group.
	topicsOnly bool
}

// topicSim is one seed's run.
type topicSim struct {
	t     *testing.T
	rng   *rand.Rand
	cfg   Config // what every member shares
	now   time.Duration
	base  time.Time
	tasks stepTasks
	seq   uint64
	wire  *simWire
	// wireGen and wireAt: the wire's next step is task generation
	// wireGen, due at wireAt (wirePending).
	wireGen     uint64
	wireAt      time.Duration
	wirePending bool
	members     []*topicMember
	// sent lists what the members sent, sentAt when (by message key),
	// delivered what each delivered (by member id).
	sent      []simMsg
	sentAt    map[string]time.Duration
	delivered map[NodeID][]simDelivery
	// topicBytes counts, per receiver and topic, the bytes of the
	// topic's records the wire carried to it.
	topicBytes map[NodeID]map[string]int
	loadUntil  time.Duration
	topicsOnly bool
}

type simMsg struct {
	from    NodeID
	topic   string
	payload string
}

type simDelivery struct {
	Delivery
	at time.Duration
}

func (d simDelivery) key() string { return string(d.Payload) }

// topicMember is one member: its group, hosted (host), and its runner.
type topicMember struct {
	s      *topicSim
	id     NodeID
	g      *Group
	r      *runner
	q      []event
	queued bool
	timer  uint64
	k      int
}

var _ host = (*topicMember)(nil)

func newTopicSim(t *testing.T, seed uint64, opts topicSimOptions) *topicSim {
	rng := rand.New(rand.NewPCG(seed, 0x5eed70b1c))
	s := &topicSim{
		t: t, rng: rng, base: time.Unix(1_700_000_000, 0),
		sentAt: make(map[string]time.Duration), delivered: make(map[NodeID][]simDelivery),
		topicBytes: make(map[NodeID]map[string]int),
	}
	n := opts.n
	if n == 0 {
		n = 3 + rng.IntN(5)
	}
	var members []Member
	for i := 1; i <= n; i++ {
		members = append(members, Member{ID: NodeID(i)})
	}
	mode := opts.mode
	if opts.topics == nil {
		mode = []Mode{Atomic, TotalOrder}[rng.IntN(2)]
	}
	topics := opts.topics
	if topics == nil {
		for i := range 1 + rng.IntN(5) {
			tp := Topic{Name: fmt.Sprintf("t%d", i+1), Mode: []Mode{Atomic, TotalOrder}[rng.IntN(2)]}
			for _, m := range members {
				if rng.IntN(2) == 0 {
					tp.Subscribers = append(tp.Subscribers, m.ID)
				}
			}
			topics = append(topics, tp)
		}
	}
	s.cfg = Config{
		Members: members, Mode: mode, Topics: topics,
		BeaconInterval: 5 * time.Millisecond, FanOut: []int{0, 0, 2}[rng.IntN(3)],
		WindowMessages: 1 << 12, NoWait: true, Logger: testLogger(),
	}
	if opts.topics != nil {
		// Frontiers announced to every member: through the tree, every
		// topic waits for the group's commit barrier.
		s.cfg.FanOut = 0
	}
	maxDelay := time.Duration(50+rng.IntN(3000)) * time.Microsecond
	s.wire = newSteppedWire(seed, maxDelay, func() time.Time { return s.base.Add(s.now) }, s.kickWire)
	if opts.slow != nil {
		s.wire.extra = func(k pipeKey) time.Duration {
			if k.kind >= wireTopic && s.members[0].r != nil {
				v := s.members[0].r.v
				for _, tp := range v.topics {
					if tp.set == k.kind-wireTopic && opts.slow(k.to, tp.name) {
						return opts.slowBy
					}
				}
			}
			return 0
		}
	}
	s.wire.onFrame = s.countFrame
	for _, m := range members {
		s.open(m.ID, time.Duration(rng.IntN(4000)-2000)*time.Microsecond)
	}
	s.loadUntil, s.topicsOnly = 200*time.Millisecond, opts.topicsOnly
	return s
}

// countFrame counts the bytes of a topic's record the wire hands to a
// member.
func (s *topicSim) countFrame(k pipeKey, frame []byte) {
	if k.kind < wireTopic {
		return
	}
	// The topics of the frame's set: the first record byte after the
	// header names it.
	v := s.members[int(k.to)-1].r.v
	for _, tp := range v.topics {
		if tp.set == k.kind-wireTopic {
			if s.topicBytes[k.to] == nil {
				s.topicBytes[k.to] = make(map[string]int)
			}
			s.topicBytes[k.to][tp.name] += len(frame)
			return
		}
	}
}

// open starts member id with its clock skewed by skew.
func (s *topicSim) open(id NodeID, skew time.Duration) {
	m := &topicMember{s: s, id: id}
	cfg := s.cfg
	cfg.Self = id
	cfg.Members = slices.Clone(s.cfg.Members)
	cfg.test = hooks{host: m, openNet: s.wire.open, batchBytes: 8 << 10}
	cfg.Clock = func() int64 { return s.base.UnixNano() + int64(skew) + int64(s.now) }
	g, err := newGroup(context.Background(), cfg, func(d Delivery) {
		s.delivered[id] = append(s.delivered[id], simDelivery{d, s.now})
	})
	if err != nil {
		s.t.Fatal(err)
	}
	v, err := g.fixedView(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	m.g, m.r = g, &runner{g: g, v: v}
	s.members = append(s.members, m)
	s.after(0, m.settle)
	s.load(m)
}

// load sends or publishes from m every 1 to 4 ms while the load lasts.
func (s *topicSim) load(m *topicMember) {
	s.after(time.Duration(1+s.rng.IntN(4))*time.Millisecond, func() {
		if s.now > s.loadUntil {
			return
		}
		s.load(m)
		topic := ""
		if k := s.rng.IntN(len(s.cfg.Topics) + 1); k > 0 {
			topic = s.cfg.Topics[k-1].Name
		} else if s.topicsOnly {
			topic = s.cfg.Topics[s.rng.IntN(len(s.cfg.Topics))].Name
		}
		p := fmt.Sprintf("m%d-%d/%s", m.id, m.k, topic)
		m.k++
		var err error
		if topic == "" {
			_, err = m.g.Send(context.Background(), []byte(p))
		} else {
			_, err = m.g.Publish(context.Background(), topic, []byte(p))
		}
		if errors.Is(err, ErrBackpressure) {
			return
		}
		if err != nil {
			s.t.Fatalf("member %d: %v", m.id, err)
		}
		s.sent = append(s.sent, simMsg{m.id, topic, p})
		s.sentAt[p] = s.now
	})
}

func (s *topicSim) after(d time.Duration, fn func()) {
	s.seq++
	s.tasks.push(stepTask{at: s.now + d, seq: s.seq, fn: fn})
}

func (s *topicSim) kickWire() {
	if s.wirePending && s.wireAt <= s.now {
		return
	}
	s.scheduleWire(0)
}

func (s *topicSim) scheduleWire(wait time.Duration) {
	s.wireGen++
	gen := s.wireGen
	s.wirePending, s.wireAt = true, s.now+wait
	s.after(wait, func() {
		if gen != s.wireGen {
			return
		}
		s.wireAt = s.now
		for {
			did, wait := s.wire.step()
			if did {
				continue
			}
			s.wirePending = false
			if wait < time.Hour {
				s.scheduleWire(wait)
			}
			return
		}
	})
}

// run runs the load and then until every member delivered everything
// it receives, within a bound of virtual time.
func (s *topicSim) run() {
	const bound = 5 * time.Second
	done := false
	var poll func()
	poll = func() {
		if done = s.complete(); !done {
			s.after(10*time.Millisecond, poll)
		}
	}
	s.after(s.loadUntil+10*time.Millisecond, poll)
	for len(s.tasks) > 0 && !done && s.now <= s.loadUntil+bound {
		task := s.tasks.pop()
		s.now = max(s.now, task.at)
		task.fn()
	}
	if !s.complete() {
		s.t.Fatalf("after %v, not every message reached every receiver: %s", s.now, s.missing())
	}
}

// receives reports whether member id receives topic ("": the group).
func (s *topicSim) receives(id NodeID, topic string) bool {
	if topic == "" {
		return true
	}
	for _, tp := range s.cfg.Topics {
		if tp.Name == topic {
			return slices.Contains(tp.Subscribers, id)
		}
	}
	return false
}

func (s *topicSim) complete() bool { return s.missing() == "" }

// missing describes the first message a receiver lacks.
func (s *topicSim) missing() string {
	for _, m := range s.members {
		got := make(map[string]bool, len(s.delivered[m.id]))
		for _, d := range s.delivered[m.id] {
			got[d.key()] = true
		}
		for _, msg := range s.sent {
			if s.receives(m.id, msg.topic) && !got[msg.payload] {
				return fmt.Sprintf("member %d lacks %q", m.id, msg.payload)
			}
		}
	}
	return ""
}

// check checks the guarantees of pub/sub within a view on what the
// members delivered (see TestTopicsStep).
func (s *topicSim) check() {
	t := s.t
	sender := make(map[string]simMsg, len(s.sent))
	for _, m := range s.sent {
		sender[m.payload] = m
	}
	byTopic := make(map[string][]Delivery) // the longest sequence seen
	for _, m := range s.members {
		ds := s.delivered[m.id]
		next := make(map[string]uint64)
		seen := make(map[string]bool)
		perTopic := make(map[string][]Delivery)
		for k, d := range ds {
			msg, ok := sender[d.key()]
			switch {
			case !ok:
				t.Fatalf("member %d delivered %q, which nobody sent", m.id, d.Payload)
			case msg.from != d.Sender || msg.topic != d.Topic:
				t.Fatalf("member %d delivered %q as from %d on %q", m.id, d.Payload, d.Sender, d.Topic)
			case !s.receives(m.id, d.Topic):
				t.Fatalf("member %d delivered %q of topic %q, to which it does not subscribe", m.id, d.Payload, d.Topic)
			case seen[d.key()]:
				t.Fatalf("member %d delivered %q twice", m.id, d.Payload)
			}
			seen[d.key()] = true
			ch := fmt.Sprintf("%d/%s", d.Sender, d.Topic)
			if d.Seq != next[ch]+1 {
				t.Fatalf("member %d: FIFO broken: %q is #%d of %s after #%d", m.id, d.Payload, d.Seq, ch, next[ch])
			}
			next[ch] = d.Seq
			if k > 0 {
				if c := simOrder(ds[k-1].Delivery, d.Delivery); c >= 0 {
					t.Fatalf("member %d delivered %q after %q", m.id, d.Payload, ds[k-1].Payload)
				}
			}
			perTopic[d.Topic] = append(perTopic[d.Topic], d.Delivery)
		}
		for topic, tds := range perTopic {
			for k, d := range tds {
				if d.Index != uint64(k)+1 {
					t.Fatalf("member %d: %q is delivery %d of topic %q, with index %d", m.id, d.Payload, k+1, topic, d.Index)
				}
			}
			ref := byTopic[topic]
			if len(tds) > len(ref) {
				ref, tds = tds, ref
				byTopic[topic] = ref
			}
			for k := range tds {
				if string(tds[k].Payload) != string(ref[k].Payload) {
					t.Fatalf("topic %q position %d: %q at one subscriber, %q at another", topic, k+1, tds[k].Payload, ref[k].Payload)
				}
			}
		}
		for _, tp := range s.cfg.Topics {
			if b := s.topicBytes[m.id][tp.Name]; !slices.Contains(tp.Subscribers, m.id) && b > 0 {
				t.Fatalf("member %d, which does not subscribe to %q, received %d bytes of its records", m.id, tp.Name, b)
			}
		}
	}
	// Pairwise relative order (implied by the order above; checked
	// directly).
	for i, a := range s.members {
		for _, b := range s.members[i+1:] {
			if err := simSameRelativeOrder(s.delivered[a.id], s.delivered[b.id]); err != nil {
				t.Fatalf("members %d and %d: %v", a.id, b.id, err)
			}
		}
	}
}

// simOrder orders deliveries as the ordering core does: by stamp, then
// sender; a sender never stamps two messages alike.
func simOrder(a, b Delivery) int {
	return cmp.Or(cmp.Compare(a.Timestamp, b.Timestamp), cmp.Compare(a.Sender, b.Sender))
}

func simSameRelativeOrder(a, b []simDelivery) error {
	in := func(ds []simDelivery) map[string]bool {
		m := make(map[string]bool, len(ds))
		for _, d := range ds {
			m[d.key()] = true
		}
		return m
	}
	inA, inB := in(a), in(b)
	var ca, cb []string
	for _, d := range a {
		if inB[d.key()] {
			ca = append(ca, d.key())
		}
	}
	for _, d := range b {
		if inA[d.key()] {
			cb = append(cb, d.key())
		}
	}
	if !slices.Equal(ca, cb) {
		return fmt.Errorf("the messages both delivered come in different orders: %s", strings.Join(firstDiff(ca, cb), " vs "))
	}
	return nil
}

func firstDiff(a, b []string) []string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return []string{a[i], b[i]}
		}
	}
	return nil
}

// The host: the member's loop, run by the simulation.

func (m *topicMember) post(_ *Group, ev event) {
	m.q = append(m.q, ev)
	if !m.queued {
		m.queued = true
		m.s.after(0, m.runLoop)
	}
}

func (m *topicMember) runLoop() {
	m.queued = false
	for len(m.q) > 0 {
		q := m.q
		m.q = nil
		for _, ev := range q {
			if !m.r.handle(ev) {
				m.s.t.Fatalf("member %d's loop stopped: %v", m.id, m.g.Err())
			}
		}
	}
	m.settle()
}

func (m *topicMember) settle() {
	if !m.r.settle() {
		m.s.t.Fatalf("member %d's loop stopped: %v", m.id, m.g.Err())
	}
	m.timer++
	gen := m.timer
	wait := max(m.r.deadline()-time.Duration(m.g.cfg.Clock()), 0)
	m.s.after(wait, func() {
		if gen == m.timer {
			m.settle()
		}
	})
}

func (m *topicMember) etcdWrite(*Group, time.Duration, string, func(context.Context, *membership.Store) error, func(error)) {
	m.s.t.Fatal("a group with fixed membership writes nothing to etcd")
}

func (m *topicMember) spawn(*Group, func()) func() {
	m.s.t.Fatal("a group with fixed membership spawns no work")
	return func() {}
}

func (m *topicMember) fetch(*Group, membership.FetchConfig, func([][]byte, error)) func() {
	m.s.t.Fatal("a group with fixed membership transfers no state")
	return func() {}
}

func (m *topicMember) afterFunc(d time.Duration, f func()) membership.Timer {
	t := &stepTimer{}
	m.s.after(d, func() {
		if !t.stopped {
			t.ran = true
			f()
		}
	})
	return t
}

func (m *topicMember) rand() *rand.Rand { return m.s.rng }
