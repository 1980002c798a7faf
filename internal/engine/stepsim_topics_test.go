package engine

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/invariants"
)

var topicStepSeeds = flag.Int("step.topics.seeds", cond(invariants.RaceEnabled, 10, 150), "number of seeds TestGroupStepTopics runs")

// TestGroupStepTopics runs the deterministic whole-group simulation of
// TestGroupStep (view-managed groups, crashes, partitions, broken links,
// etcd outages; the views' traffic over RDMC on the fabric or over the
// simulated wire) with topics: every member declares three atomic
// topics and subscribes to some of them (Config.Topics, asked for again
// by every incarnation), and the load publishes on random topics beside
// its messages to the group. Besides TestGroupStep's checks, it checks
// the guarantees of topics across view changes: a member delivers a
// topic's message only in a view that has it subscribe; no two members
// deliver different messages at one place (epoch, index) of a topic; a
// member that keeps a topic from view e to e+1 delivers its messages at
// consecutive indexes across the change; the subscribers of a topic
// that install view e+1 delivered the same messages of it in view e, in
// the same order (virtual synchrony per topic); FIFO per
// sender incarnation and topic; any two messages two histories both
// delivered come in the same relative order in both; and, once the
// faults are over and the subscriptions in place, a message published on
// a topic by each member reaches every subscriber. In the seeds whose
// plan makes the group durable, a member that restarts on its log
// replays every topic message it handed out before (since its disk was
// last wiped), and whatever it replays agrees with what every member
// delivered at the same topic, view and index.
//
// A failing seed replays, the same, with
//
//	go test -run 'TestGroupStepTopics$/seed=N$' -step.topics.seeds=N ./internal/engine
func TestGroupStepTopics(t *testing.T) {
	ran := 0
	for seed := uint64(1); ran < *topicStepSeeds; seed++ {
		ran++
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runStepWith(t, seed, stepOptions{topics: true})
		})
	}
}

// stepTopicNames are the topics of TestGroupStepTopics.
var stepTopicNames = []string{"x", "y", "z"}

// topicHist records, in the simulation, what the members' incarnations
// delivered of the group and of the topics, and which topics each view
// had them subscribe to.
type topicHist struct {
	s   *stepSim
	rng *rand.Rand
	// subs are the topics each member subscribes to, in every
	// incarnation.
	subs map[NodeID][]string
	// hists are every incarnation's history; cur the current one of a
	// member's process (nil after an exclusion, until its next view).
	hists []*topicHistory
	cur   map[*stepMember]*topicHistory
	// k numbers each sender's publications.
	k map[string]int
	// replays are the topic messages members replayed from their durable
	// logs as they restarted.
	replays []topicReplay
	// kept are the topic messages (by eventKey) each member's
	// application was handed since its disk was last wiped, in a durable
	// group: its log must replay them all. replaying are those the
	// current restart replayed.
	kept, replaying map[NodeID]map[string]bool
}

// eventKey identifies a topic message as delivered.
func eventKey(ev topicEvent) string {
	return fmt.Sprintf("%s/%d/%d/%s", ev.topic, ev.epoch, ev.index, ev.payload)
}

// add adds key to set[id].
func addKey(set map[NodeID]map[string]bool, id NodeID, key string) {
	if set[id] == nil {
		set[id] = make(map[string]bool)
	}
	set[id][key] = true
}

// topicReplay is a topic message a member replayed.
type topicReplay struct {
	id NodeID
	ev topicEvent
}

// topicHistory is what one incarnation saw.
type topicHistory struct {
	name string
	id   NodeID
	// subscribed[e] are the topics view e had it subscribe to; epochs
	// lists the views in the order it installed them.
	subscribed map[uint64]map[string]bool
	epochs     []uint64
	events     []topicEvent
}

type topicEvent struct {
	epoch   uint64
	topic   string // "" for a message to the group
	index   uint64
	sender  NodeID
	seq     uint64
	payload string
}

func newTopicHist(s *stepSim, seed uint64) *topicHist {
	h := &topicHist{
		s: s, rng: rand.New(rand.NewPCG(seed, seed^0x70b1c5)),
		subs: make(map[NodeID][]string), cur: make(map[*stepMember]*topicHistory), k: make(map[string]int),
		kept: make(map[NodeID]map[string]bool), replaying: make(map[NodeID]map[string]bool),
	}
	for i := range s.plan.n {
		for _, name := range stepTopicNames {
			if h.rng.IntN(2) == 0 {
				h.subs[NodeID(i+1)] = append(h.subs[NodeID(i+1)], name)
			}
		}
	}
	return h
}

// declare returns member id's Config.Topics.
func (h *topicHist) declare(id NodeID) []Topic {
	var out []Topic
	for _, name := range stepTopicNames {
		t := Topic{Name: name}
		if slices.Contains(h.subs[id], name) {
			t.Subscribers = []NodeID{id}
		}
		out = append(out, t)
	}
	return out
}

// history returns m's current history, starting one if need be.
func (h *topicHist) history(m *stepMember) *topicHistory {
	hs := h.cur[m]
	if hs == nil {
		hs = &topicHistory{name: fmt.Sprintf("%s#%d", m.name, m.node.exclusions()), id: m.id, subscribed: make(map[uint64]map[string]bool)}
		h.cur[m] = hs
		h.hists = append(h.hists, hs)
	}
	return hs
}

// view records a view m's application was shown.
func (h *topicHist) view(m *stepMember, v View) {
	if v.Excluded {
		h.cur[m] = nil
		return
	}
	hs := h.history(m)
	subs := make(map[string]bool)
	for _, t := range v.Topics {
		if slices.Contains(t.Subscribers, m.id) {
			subs[t.Name] = true
		}
	}
	hs.subscribed[v.Epoch] = subs
	hs.epochs = append(hs.epochs, v.Epoch)
}

// deliver records a delivery of m's application.
func (h *topicHist) deliver(m *stepMember, d Delivery) {
	hs := h.history(m)
	ev := topicEvent{epoch: d.Epoch, topic: d.Topic, index: d.Index, sender: d.Sender, seq: d.Seq, payload: string(d.Payload)}
	hs.events = append(hs.events, ev)
	if h.s.plan.durable && d.Topic != "" {
		addKey(h.kept, m.id, eventKey(ev))
	}
}

// replay records a topic message m replayed from its durable log.
func (h *topicHist) replay(m *stepMember, d Delivery) {
	ev := topicEvent{epoch: d.Epoch, topic: d.Topic, index: d.Index, sender: d.Sender, seq: d.Seq, payload: string(d.Payload)}
	h.replays = append(h.replays, topicReplay{m.id, ev})
	addKey(h.replaying, m.id, eventKey(ev))
	addKey(h.kept, m.id, eventKey(ev)) // the log keeps it for the next restart too
}

// restarted checks, once member id replayed its log as it restarted,
// that the replay held every topic message its application was handed
// before: a message is handed out once every subscriber has it on disk.
func (h *topicHist) restarted(id NodeID) {
	for key := range h.kept[id] {
		if !h.replaying[id][key] {
			h.s.fail("member %d restarted on its log without replaying topic message %s, which it handed out before", id, key)
		}
	}
	delete(h.replaying, id)
}

// wiped forgets what member id's log held: its disk was replaced.
func (h *topicHist) wiped(id NodeID) { delete(h.kept, id) }

// load publishes from m on a random topic, one time in two.
func (h *topicHist) load(m *stepMember) {
	if h.rng.IntN(2) == 0 {
		return
	}
	topic := stepTopicNames[h.rng.IntN(len(stepTopicNames))]
	label := fmt.Sprintf("%s#%d", m.name, m.node.exclusions())
	p := fmt.Sprintf("t:%s:%s:%d", topic, label, h.k[label])
	if _, err := m.g.Publish(context.Background(), topic, []byte(p)); err == nil {
		h.k[label]++
	}
}

// settled reports whether every live member's current view has it
// subscribe to exactly its topics.
func (h *topicHist) settled(live []*vsNode) bool {
	for _, nd := range live {
		m := h.s.members[nd.id]
		if m == nil || m.gone() || m.r == nil || m.r.v == nil {
			return false
		}
		var got []string
		for _, t := range m.g.Topics() {
			if t.Subscribed {
				got = append(got, t.Name)
			}
		}
		if !slices.Equal(got, h.subs[nd.id]) {
			return false
		}
	}
	return true
}

// final waits until the subscriptions are in place, publishes a message
// on every topic from every live member and waits until each reaches
// every subscriber: topics stay live through the faults.
func (h *topicHist) final(live []*vsNode, bound time.Duration) {
	s := h.s
	if !s.run(s.now+bound, func() bool { return h.settled(live) }) {
		s.fail("the members' subscriptions were not in place within %v of the end of the faults", bound)
	}
	var finals []string
	for _, nd := range live {
		for _, topic := range stepTopicNames {
			p := fmt.Sprintf("t:%s:final-%d", topic, nd.id)
			if _, err := s.members[nd.id].g.Publish(context.Background(), topic, []byte(p)); err != nil {
				s.fail("member %d: publish on %s: %v", nd.id, topic, err)
			}
			finals = append(finals, p)
		}
	}
	missing := func() string {
		for _, nd := range live {
			got := make(map[string]bool)
			for _, ev := range h.cur[s.members[nd.id]].events {
				got[ev.payload] = true
			}
			for _, p := range finals {
				topic := strings.Split(p, ":")[1]
				if slices.Contains(h.subs[nd.id], topic) && !got[p] {
					return fmt.Sprintf("member %d lacks %q", nd.id, p)
				}
			}
		}
		return ""
	}
	if !s.run(s.now+bound, func() bool { return missing() == "" }) {
		s.fail("a message published on a topic did not reach every subscriber within %v: %s", bound, missing())
	}
}

// check checks the histories against the guarantees of topics (see
// TestGroupStepTopics).
func (h *topicHist) check() {
	s := h.s
	atIndex := make(map[string]string) // topic/epoch/index → payload
	// inView[topic][epoch][history] is what the history delivered of the
	// topic in the view, in order.
	inView := make(map[string]map[uint64]map[*topicHistory][]string)
	for _, hs := range h.hists {
		next := make(map[string]uint64) // by topic and sender label
		lastIndex := make(map[string]topicEvent)
		for _, ev := range hs.events {
			if ev.topic == "" {
				continue
			}
			if !hs.subscribed[ev.epoch][ev.topic] {
				s.fail("%s delivered %q of topic %s in view %d, which does not have it subscribe", hs.name, ev.payload, ev.topic, ev.epoch)
			}
			key := fmt.Sprintf("%s/%d/%d", ev.topic, ev.epoch, ev.index)
			if p, ok := atIndex[key]; ok && p != ev.payload {
				s.fail("topic %s view %d index %d: %q at one member, %q at another (%s)", ev.topic, ev.epoch, ev.index, p, ev.payload, hs.name)
			}
			atIndex[key] = ev.payload
			if prev, ok := lastIndex[ev.topic]; ok && hs.kept(ev.topic, prev.epoch, ev.epoch) && ev.index != prev.index+1 {
				s.fail("%s: topic %s index %d (view %d) after %d (view %d)", hs.name, ev.topic, ev.index, ev.epoch, prev.index, prev.epoch)
			}
			lastIndex[ev.topic] = ev
			if parts := strings.Split(ev.payload, ":"); len(parts) == 4 {
				ch := parts[1] + "/" + parts[2]
				if n, ok := next[ch]; ok && ev.seq != n+1 {
					s.fail("%s: FIFO broken on %s: #%d after #%d", hs.name, ch, ev.seq, n)
				}
				next[ch] = ev.seq
			}
			if inView[ev.topic] == nil {
				inView[ev.topic] = make(map[uint64]map[*topicHistory][]string)
			}
			if inView[ev.topic][ev.epoch] == nil {
				inView[ev.topic][ev.epoch] = make(map[*topicHistory][]string)
			}
			inView[ev.topic][ev.epoch][hs] = append(inView[ev.topic][ev.epoch][hs], ev.payload)
		}
	}
	// A replayed topic message agrees with every delivery at its topic,
	// view and index, and was published.
	for _, r := range h.replays {
		key := fmt.Sprintf("%s/%d/%d", r.ev.topic, r.ev.epoch, r.ev.index)
		if p, ok := atIndex[key]; ok && p != r.ev.payload {
			s.fail("member %d replayed %q of topic %s at view %d index %d, where a member delivered %q", r.id, r.ev.payload, r.ev.topic, r.ev.epoch, r.ev.index, p)
		}
		if parts := strings.Split(r.ev.payload, ":"); len(parts) != 4 || parts[1] != r.ev.topic {
			s.fail("member %d replayed %q of topic %s, which was not published on it", r.id, r.ev.payload, r.ev.topic)
		}
	}
	// Virtual synchrony per topic: the histories that had a topic in view
	// e and installed e+1 delivered the same messages of it in e.
	for _, topic := range stepTopicNames {
		epochs := make(map[uint64]bool)
		for _, hs := range h.hists {
			for _, e := range hs.epochs {
				epochs[e] = true
			}
		}
		for e := range epochs {
			var ref []string
			var refName string
			for _, hs := range h.hists {
				if !hs.subscribed[e][topic] || !slices.Contains(hs.epochs, e+1) {
					continue
				}
				got := inView[topic][e][hs]
				if refName == "" {
					ref, refName = got, hs.name
					continue
				}
				if !slices.Equal(got, ref) {
					s.fail("topic %s, view %d: %s delivered %d messages (%v), %s %d (%v), and both installed view %d",
						topic, e, hs.name, len(got), firstN(got), refName, len(ref), firstN(ref), e+1)
				}
			}
		}
	}
	var topicMsgs, views int
	for _, hs := range h.hists {
		views += len(hs.epochs)
		for _, ev := range hs.events {
			if ev.topic != "" {
				topicMsgs++
			}
		}
	}
	s.t.Logf("topics: %d histories, %d views installed, %d deliveries of topic messages, %d replayed", len(h.hists), views, topicMsgs, len(h.replays))
	// Pairwise relative order of what two histories both delivered.
	for i, a := range h.hists {
		for _, b := range h.hists[i+1:] {
			if err := sameOrder(a.events, b.events); err != nil {
				s.fail("%s and %s: %v", a.name, b.name, err)
			}
		}
	}
}

func firstN(ps []string) []string { return ps[:min(len(ps), 3)] }

// kept reports whether the history installed every view from a to b and
// was subscribed to topic in each: then its deliveries of the topic in
// them follow each other without a gap.
func (hs *topicHistory) kept(topic string, a, b uint64) bool {
	for e := a; e <= b; e++ {
		if !slices.Contains(hs.epochs, e) || !hs.subscribed[e][topic] {
			return false
		}
	}
	return true
}

// sameOrder checks that the messages both a and b hold come in the same
// order in both.
func sameOrder(a, b []topicEvent) error {
	in := func(evs []topicEvent) map[string]bool {
		m := make(map[string]bool, len(evs))
		for _, ev := range evs {
			m[ev.payload] = true
		}
		return m
	}
	inA, inB := in(a), in(b)
	var ca, cb []string
	for _, ev := range a {
		if inB[ev.payload] {
			ca = append(ca, ev.payload)
		}
	}
	for _, ev := range b {
		if inA[ev.payload] {
			cb = append(cb, ev.payload)
		}
	}
	if d := firstDiff(ca, cb); d != nil {
		return fmt.Errorf("the messages both delivered come in different orders: %q at one, %q at the other", d[0], d[1])
	}
	return nil
}
