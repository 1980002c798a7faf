package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/memlog"
	"github.com/convoy-gcs/convoy/persistence"
	"github.com/convoy-gcs/convoy/rdma"
)

// stallLog is a durable log whose syncs a test can hide: while stalled,
// Synced and TopicSynced stay where they were and the OnSynced function
// hears of nothing, as if the disk had stopped syncing (what is written
// meanwhile is synced underneath, and shows on release). It records the
// position of each topic entry.
type stallLog struct {
	*persistence.Log
	mu                  sync.Mutex
	stalled             bool
	synced, topicSynced uint64
	fn                  func(uint64)
	pos                 map[string]map[uint64]uint64 // topic, index → position
}

func newStallLog(l *persistence.Log) *stallLog {
	return &stallLog{Log: l, pos: make(map[string]map[uint64]uint64)}
}

func (s *stallLog) Synced() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalled {
		return s.synced
	}
	return s.Log.Synced()
}

func (s *stallLog) TopicSynced() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalled {
		return s.topicSynced
	}
	return s.Log.TopicSynced()
}

func (s *stallLog) OnSynced(fn func(uint64)) {
	s.mu.Lock()
	s.fn = fn
	s.mu.Unlock()
	s.Log.OnSynced(func(idx uint64) {
		s.mu.Lock()
		stalled := s.stalled
		s.mu.Unlock()
		if !stalled {
			fn(idx)
		}
	})
}

func (s *stallLog) AppendTopic(es ...persistence.TopicEntry) error {
	s.mu.Lock()
	for _, e := range es {
		if s.pos[e.Topic] == nil {
			s.pos[e.Topic] = make(map[uint64]uint64)
		}
		s.pos[e.Topic][e.Index] = e.Pos
	}
	s.mu.Unlock()
	return s.Log.AppendTopic(es...)
}

// stall hides the syncs from now on.
func (s *stallLog) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = true
	s.synced, s.topicSynced = s.Log.Synced(), s.Log.TopicSynced()
}

// release shows the syncs again.
func (s *stallLog) release() {
	s.mu.Lock()
	s.stalled = false
	fn := s.fn
	s.mu.Unlock()
	if fn != nil {
		fn(s.Log.Synced())
	}
}

// holds reports whether the log shows message index of topic synced.
func (s *stallLog) holds(topic string, index uint64) bool {
	s.mu.Lock()
	pos, ok := s.pos[topic][index]
	s.mu.Unlock()
	return ok && pos <= s.TopicSynced()
}

// TestDurableTopics: durable topics in a group with fixed membership on
// the in-memory fabric. Every subscriber delivers each of its topics'
// messages in one order with the same indexes, a non-subscriber none, and
// a member delivers a topic's message only once every subscriber of the
// topic shows it synced in its log. While one member's log stops
// syncing, the topics it subscribes to wait at every subscriber, and so
// does the group (every member logs its messages), but the topics it does
// not subscribe to go on; once it syncs again, everything is delivered.
// Each member's log then holds its topics' messages as it delivered them.
func TestDurableTopics(t *testing.T) {
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 11})
	defer fab.Close()
	const n = 4
	topics := []Topic{
		{Name: "a", Subscribers: []NodeID{1, 2}},
		{Name: "c", Subscribers: []NodeID{3, 4}},
		{Name: "d", Subscribers: []NodeID{1, 4}},
		{Name: "all", Subscribers: []NodeID{1, 2, 3, 4}},
	}
	subs := func(topic string) []NodeID {
		for _, tp := range topics {
			if tp.Name == topic {
				return tp.Subscribers
			}
		}
		return nil
	}
	var members []Member
	for i := 1; i <= n; i++ {
		members = append(members, Member{ID: NodeID(i)})
	}
	dirs := make([]string, n)
	logs := make([]*stallLog, n)
	groups := make([]*Group, n)
	recs := make([]*recorder, n)
	ctx := context.Background()
	eps := make([]rdma.Endpoint, n)
	for i := range n {
		ep, err := fab.Endpoint(NodeID(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		eps[i] = ep
	}
	for i := range n {
		dirs[i] = t.TempDir()
		recs[i] = newRecorder()
		cfg := Config{Self: NodeID(i + 1), Members: members, Endpoint: eps[i], Topics: topics, Durable: &DurableConfig{Dir: dirs[i]}}
		cfg.test.openDisk = func(ctx context.Context) (durableLog, error) {
			l, err := persistence.Open(ctx, persistence.Options{Dir: dirs[i]})
			if err != nil {
				return nil, err
			}
			logs[i] = newStallLog(l)
			return logs[i], nil
		}
		self := i
		h := func(d Delivery) {
			if d.Topic != "" {
				if !slices.Contains(subs(d.Topic), NodeID(self+1)) {
					t.Errorf("member %d delivered %s#%d of a topic it does not subscribe to", self+1, d.Topic, d.Index)
				}
				for _, s := range subs(d.Topic) {
					if !logs[s-1].holds(d.Topic, d.Index) {
						t.Errorf("member %d delivered %s#%d before subscriber %d synced it", self+1, d.Topic, d.Index, s)
					}
				}
			}
			recs[self].handle(d)
		}
		g, err := Open(ctx, cfg, h)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		groups[i] = g
	}
	publish := func(from int, topic, payload string, opts ...SendOption) {
		t.Helper()
		if _, err := groups[from-1].Publish(ctx, topic, []byte(payload), opts...); err != nil {
			t.Fatalf("member %d publishing on %s: %v", from, topic, err)
		}
	}
	// A first round, every member on every topic and to the group.
	const each = 20
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				for _, tp := range topics {
					if _, err := g.Publish(ctx, tp.Name, []byte(fmt.Sprintf("%d/%s/%d", i+1, tp.Name, k))); err != nil {
						t.Error(err)
						return
					}
				}
				if _, err := g.Send(ctx, []byte(fmt.Sprintf("%d//%d", i+1, k))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range n {
		want := n * each
		for _, tp := range topics {
			if slices.Contains(tp.Subscribers, NodeID(i+1)) {
				want += n * each
			}
		}
		recs[i].wait(t, want)
	}
	count := func(i int) int {
		recs[i].mu.Lock()
		defer recs[i].mu.Unlock()
		return len(recs[i].got)
	}
	delivered := func(i int, topic, payload string) bool {
		recs[i].mu.Lock()
		defer recs[i].mu.Unlock()
		return slices.ContainsFunc(recs[i].got, func(d Delivery) bool { return d.Topic == topic && string(d.Payload) == payload })
	}

	// Member 3's disk stops syncing. Member 4 publishes on c (3 and 4),
	// then on d (1 and 4): member 1 delivers d's message, member 4
	// neither (c's comes first at it); a's go on at 1 and 2.
	before4 := count(3)
	logs[2].stall()
	publish(4, "c", "held", WaitStable())
	publish(4, "d", "behind", WaitStable())
	publish(1, "a", "free", WaitDelivered())
	for !delivered(0, "d", "behind") || !delivered(1, "a", "free") {
		select {
		case <-recs[0].ch:
		case <-recs[1].ch:
		}
	}
	if count(3) != before4 {
		t.Fatalf("member 4 delivered %d messages while member 3's log held back topic c", count(3)-before4)
	}
	if delivered(2, "c", "held") {
		t.Fatal("member 3 delivered topic c's message its own log has not synced")
	}
	// Released, member 3 announces what it synced meanwhile.
	logs[2].release()
	publish(2, "all", "last", WaitDelivered())
	for i := range n {
		for !delivered(i, "all", "last") {
			<-recs[i].ch
		}
	}
	if !delivered(3, "c", "held") || !delivered(3, "d", "behind") || !delivered(2, "c", "held") {
		t.Fatal("topic c's message was not delivered once member 3's log synced")
	}
	for _, g := range groups {
		g.Close()
	}

	// Per topic, every subscriber delivered the same messages at the same
	// indexes, from 1; the relative order of any two messages is the same
	// at every member.
	perTopic := make(map[string][]string)
	pos := make([]map[string]int, n)
	for i := range n {
		pos[i] = make(map[string]int)
		byTopic := make(map[string][]string)
		for k, d := range recs[i].got {
			key := fmt.Sprintf("%s/%d/%d", d.Topic, d.Sender, d.Seq)
			pos[i][key] = k
			if d.Topic == "" {
				continue
			}
			if want := uint64(len(byTopic[d.Topic]) + 1); d.Index != want {
				t.Errorf("member %d: %s index %d, want %d", i+1, d.Topic, d.Index, want)
			}
			byTopic[d.Topic] = append(byTopic[d.Topic], string(d.Payload))
		}
		for tp, got := range byTopic {
			if want, ok := perTopic[tp]; ok && !slices.Equal(got, want) {
				t.Errorf("member %d delivered topic %s as %q, another subscriber as %q", i+1, tp, got, want)
			}
			perTopic[tp] = got
		}
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			var common []string
			for key := range pos[i] {
				if _, ok := pos[j][key]; ok {
					common = append(common, key)
				}
			}
			slices.SortFunc(common, func(a, b string) int { return pos[i][a] - pos[i][b] })
			for k := 1; k < len(common); k++ {
				if pos[j][common[k-1]] > pos[j][common[k]] {
					t.Fatalf("members %d and %d deliver %s and %s in different orders", i+1, j+1, common[k-1], common[k])
				}
			}
		}
	}
	// Each log holds its member's topic messages, in its delivery order,
	// each after the group message it followed.
	for i, dir := range dirs {
		l, err := persistence.Open(ctx, persistence.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var want []Delivery
		var after []uint64
		var last uint64
		for _, d := range recs[i].got {
			if d.Topic == "" {
				last = d.Index
				continue
			}
			want = append(want, d)
			after = append(after, last)
		}
		k := 0
		err = l.ScanTopics(ctx, 1, func(e persistence.TopicEntry) error {
			if k < len(want) {
				d := want[k]
				if e.Topic != d.Topic || e.Index != d.Index || e.Sender != uint64(d.Sender) || e.Seq != d.Seq || string(e.Payload) != string(d.Payload) || e.After != after[k] {
					t.Errorf("member %d's topic entry %d: %s#%d after %d, delivered %s#%d after %d", i+1, e.Pos, e.Topic, e.Index, e.After, d.Topic, d.Index, after[k])
				}
			}
			k++
			return nil
		})
		// It may hold more: messages ordered and not yet handed out as
		// the member closed.
		if k < len(want) {
			t.Errorf("member %d's log holds %d topic entries, it delivered %d", i+1, k, len(want))
		}
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// topicDeliveries returns the deliveries of topic that n's history holds,
// or its replay at Open if replayed is set.
func topicDeliveries(n *vsNode, topic string, replayed bool) []Delivery {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Delivery
	if replayed {
		for _, d := range n.replayed {
			if d.Topic == topic {
				out = append(out, d)
			}
		}
		return out
	}
	for _, e := range n.events {
		if e.view == nil && e.d.Topic == topic {
			out = append(out, e.d)
		}
	}
	return out
}

// waitTopic waits until n delivered k messages of topic.
func (c *vsCluster) waitTopic(n *vsNode, topic string, k int) {
	c.t.Helper()
	deadline := time.Now().Add(vsWait)
	for len(topicDeliveries(n, topic, false)) < k {
		if time.Now().After(deadline) {
			c.t.Fatalf("member %d delivered %d messages of topic %s, want %d", n.id, len(topicDeliveries(n, topic, false)), topic, k)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameTopicDeliveries fails unless got and want hold the same messages at
// the same indexes, in the same order.
func sameTopicDeliveries(t *testing.T, what string, got, want []Delivery) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Index != w.Index || g.Epoch != w.Epoch || g.Sender != w.Sender || g.Seq != w.Seq || string(g.Payload) != string(w.Payload) {
			t.Fatalf("%s: message %d is %d/%d %d#%d %q, want %d/%d %d#%d %q", what, i,
				g.Epoch, g.Index, g.Sender, g.Seq, g.Payload, w.Epoch, w.Index, w.Sender, w.Seq, w.Payload)
		}
	}
}

// TestViewsDurableTopicsRestart: a subscriber of a durable topic in a
// view-managed group crashes and starts again on its data directory. At
// Open it replays the topic's messages it delivered before, at the same
// indexes and in the same order; it subscribes again and goes on with the
// topic's later messages at the indexes every subscriber gives them.
func TestViewsDurableTopicsRestart(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) {
		cfg.State = nil
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]}
	}
	ctx := context.Background()
	nodes := c.openAll(3, durable)
	for _, n := range nodes {
		if err := n.g.Subscribe(ctx, "t", nil); err != nil {
			t.Fatal(err)
		}
	}
	c.waitMembers(3, nodes...)
	published := 0
	publish := func(n *vsNode, k int) {
		t.Helper()
		for range k {
			published++
			if _, err := n.g.Publish(ctx, "t", []byte(fmt.Sprintf("set t.m%d-%d x", n.id, published)), WaitStable()); err != nil {
				t.Fatalf("member %d publishing: %v", n.id, err)
			}
		}
	}
	publish(nodes[0], 20)
	publish(nodes[1], 20)
	for _, n := range nodes {
		c.waitTopic(n, "t", published)
	}
	before := topicDeliveries(nodes[2], "t", false)
	sameTopicDeliveries(t, "member 3 against member 1", before, topicDeliveries(nodes[0], "t", false))
	// Its group messages go on beside the topic's.
	if _, err := nodes[2].g.Send(ctx, []byte("set g.m3 x"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}

	c.crash(3)
	c.waitMembers(2, nodes[:2]...)
	publish(nodes[0], 10)
	again, err := c.open(3, 1, durable)
	if err != nil {
		t.Fatal(err)
	}
	sameTopicDeliveries(t, "member 3's replay", topicDeliveries(again, "t", true), before)
	if err := again.g.Subscribe(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	nodes = []*vsNode{nodes[0], nodes[1], again}
	c.waitMembers(3, nodes...)
	publish(nodes[1], 10)
	c.waitTopic(nodes[0], "t", published)
	// After its subscription, member 3 delivers what member 1 does, at
	// the same indexes.
	ref := topicDeliveries(nodes[0], "t", false)
	got := topicDeliveries(again, "t", false)
	deadline := time.Now().Add(vsWait)
	for len(got) == 0 || got[len(got)-1].Index != ref[len(ref)-1].Index {
		if time.Now().After(deadline) {
			t.Fatalf("member 3 delivered %d messages of the topic since its restart, not up to index %d", len(got), ref[len(ref)-1].Index)
		}
		time.Sleep(5 * time.Millisecond)
		got = topicDeliveries(again, "t", false)
	}
	k := slices.IndexFunc(ref, func(d Delivery) bool { return d.Index == got[0].Index })
	if k < 0 || got[0].Index <= before[len(before)-1].Index {
		t.Fatalf("member 3 resumed the topic at index %d, after replaying up to %d", got[0].Index, before[len(before)-1].Index)
	}
	sameTopicDeliveries(t, "member 3 after its restart against member 1", got, ref[k:])

	// And again, a restart replays all it delivered of the topic, in both
	// incarnations.
	c.crash(3)
	c.waitMembers(2, nodes[:2]...)
	third, err := c.open(3, 1, durable)
	if err != nil {
		t.Fatal(err)
	}
	sameTopicDeliveries(t, "member 3's second replay", topicDeliveries(third, "t", true), append(slices.Clone(before), got...))
}

// TestDurableTopicsRetain: a member's log keeps its last
// DurableConfig.TopicRetain topic messages (an eighth more at most): after
// 100 messages with TopicRetain 16, each subscriber's log holds between
// 16 and 18 of them, the last ones it delivered, in order.
func TestDurableTopicsRetain(t *testing.T) {
	const n, retain, total = 2, 16, 100
	members := []Member{{ID: 1}, {ID: 2}}
	topics := []Topic{{Name: "t", Subscribers: []NodeID{1, 2}}}
	dirs := []string{t.TempDir(), t.TempDir()}
	ctx := context.Background()
	open := func(h func(i int) Handler) []*Group {
		fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 3})
		t.Cleanup(func() { fab.Close() })
		groups := make([]*Group, n)
		eps := make([]rdma.Endpoint, n)
		for i := range n {
			var err error
			if eps[i], err = fab.Endpoint(NodeID(i + 1)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			var err error
			cfg := Config{Self: NodeID(i + 1), Members: members, Endpoint: eps[i], Topics: topics, Durable: &DurableConfig{Dir: dirs[i], TopicRetain: retain}}
			if groups[i], err = Open(ctx, cfg, h(i)); err != nil {
				t.Fatal(err)
			}
		}
		return groups
	}
	recs := []*recorder{newRecorder(), newRecorder()}
	groups := open(func(i int) Handler { return recs[i].handle })
	for k := range total {
		if _, err := groups[k%n].Publish(ctx, "t", []byte(fmt.Sprintf("m%d", k)), WaitStable()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		recs[i].wait(t, total)
	}
	for _, g := range groups {
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		l, err := persistence.Open(ctx, persistence.Options{Dir: dirs[i]})
		if err != nil {
			t.Fatal(err)
		}
		first, last := l.FirstTopic(), l.LastTopic()
		var got []Delivery
		err = l.ScanTopics(ctx, 1, func(e persistence.TopicEntry) error {
			got = append(got, Delivery{Epoch: e.Epoch, Index: e.Index, Topic: e.Topic, Sender: NodeID(e.Sender), Seq: e.Seq, Payload: e.Payload})
			return nil
		})
		if cerr := l.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		if k := last - first + 1; last != total || k < retain || k > retain+retain/8 || len(got) != int(k) {
			t.Fatalf("member %d's log keeps topic entries %d to %d (%d read), want the last %d to %d of %d", i+1, first, last, len(got), retain, retain+retain/8, total)
		}
		recs[i].mu.Lock()
		want := slices.Clone(recs[i].got[total-len(got):])
		recs[i].mu.Unlock()
		sameTopicDeliveries(t, fmt.Sprintf("member %d's log", i+1), got, want)
	}
}

// trimCountLog counts a durable log's TrimTopics calls, each also sent
// on trimmed, and closes full once it holds want topic entries.
type trimCountLog struct {
	*memlog.Log
	want    uint64
	full    chan struct{}
	trimmed chan struct{}
	trims   atomic.Int64
}

func (l *trimCountLog) AppendTopic(es ...persistence.TopicEntry) error {
	err := l.Log.AppendTopic(es...)
	if l.Log.LastTopic() == l.want {
		close(l.full)
	}
	return err
}

func (l *trimCountLog) TrimTopics(through uint64) error {
	l.trims.Add(1)
	err := l.Log.TrimTopics(through)
	l.trimmed <- struct{}{}
	return err
}

// TestTopicTrimWaitsForSync: a trim of the topic entries beyond
// TopicRetain stops short at the entries not yet synced; the member asks
// again at the next sync, not at every delivery meanwhile, and that
// trim reaches TopicRetain.
func TestTopicTrimWaitsForSync(t *testing.T) {
	const retain, total = 16, 200
	ctx := context.Background()
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 5})
	defer fab.Close()
	ep, err := fab.Endpoint(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	disk := &trimCountLog{Log: memlog.New(), want: total, full: make(chan struct{}), trimmed: make(chan struct{}, total)}
	cfg := Config{Self: 1, Members: []Member{{ID: 1}}, Endpoint: ep, Topics: []Topic{{Name: "t", Subscribers: []NodeID{1}}},
		Durable: &DurableConfig{Dir: t.TempDir(), TopicRetain: retain}}
	cfg.test.openDisk = func(context.Context) (durableLog, error) { return disk, nil }
	g, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("no %s after a minute", what)
		}
	}
	// Nothing syncs meanwhile: every entry appended stays unsynced.
	for k := range total {
		if _, err := g.Publish(ctx, "t", []byte(fmt.Sprintf("m%d", k))); err != nil {
			t.Fatal(err)
		}
	}
	wait("log of every publish", disk.full)
	if n := disk.trims.Load(); n != 1 {
		t.Errorf("%d trims asked for while nothing synced, want 1", n)
	}
	wait("first trim", disk.trimmed)
	if err := disk.Sync(); err != nil {
		t.Fatal(err)
	}
	wait("trim after the sync", disk.trimmed)
	if n, first := disk.trims.Load(), disk.FirstTopic(); n != 2 || first != total-retain+1 {
		t.Errorf("after one sync: %d trims asked for, the log keeps topic entries from %d; want 2, from %d", n, first, total-retain+1)
	}
}
