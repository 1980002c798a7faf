package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/convoy-gcs/convoy/internal/rdmacount"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/rdma"
)

// TestTopicsMem runs a group with topics over RDMC groups on the
// in-memory fabric, every member publishing on every topic at once: a
// topic's records cross only the links of its publisher and subscribers
// (counted on every endpoint), every subscriber delivers each of its
// topics' messages once, in one order shared by all, and the wait levels
// and handlers of Publish and Subscribe behave as documented.
func TestTopicsMem(t *testing.T) {
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 3})
	defer fab.Close()
	const n = 4
	topics := []Topic{
		{Name: "a", Subscribers: []NodeID{1, 2}},
		{Name: "b", Subscribers: []NodeID{2, 3, 4}, Mode: TotalOrder},
		{Name: "none"},
		{Name: "solo", Subscribers: []NodeID{3}},
		{Name: "a-too", Subscribers: []NodeID{2, 1}}, // the same set as "a"
	}
	// The view's subscriber sets, numbered in the order of the topics:
	// {1,2}, {2,3,4}, {3}.
	setsOf := map[NodeID][]int{1: {0}, 2: {0, 1}, 3: {1, 2}, 4: {1}}
	var members []Member
	var eps []*rdmacount.Endpoint
	for i := 1; i <= n; i++ {
		members = append(members, Member{ID: NodeID(i)})
		ep, err := fab.Endpoint(NodeID(i))
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, rdmacount.Wrap(ep))
	}
	groups := make([]*Group, n)
	recs := make([]*recorder, n)
	bRecs := make([]*recorder, n)
	for i := range n {
		recs[i], bRecs[i] = newRecorder(), newRecorder()
		g, err := Open(context.Background(), Config{Self: members[i].ID, Members: members, Endpoint: eps[i], Topics: topics}, recs[i].handle)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		groups[i] = g
	}
	// Member 2 takes topic b's messages on a handler of their own.
	ctx := context.Background()
	if err := groups[1].Subscribe(ctx, "b", bRecs[1].handle); err != nil {
		t.Fatal(err)
	}
	if err := groups[0].Subscribe(ctx, "b", bRecs[0].handle); !errors.Is(err, ErrNotSubscribed) {
		t.Fatalf("Subscribe to a topic not subscribed to: %v, want ErrNotSubscribed", err)
	}
	if err := groups[0].Subscribe(ctx, "nope", nil); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Subscribe to a topic the group lacks: %v, want ErrUnknownTopic", err)
	}
	if err := groups[0].Unsubscribe(ctx, "a"); !errors.Is(err, ErrFixedTopics) {
		t.Fatalf("Unsubscribe in a group with fixed membership: %v, want ErrFixedTopics", err)
	}
	if _, err := groups[0].Publish(ctx, "nope", []byte("x")); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Publish on a topic the group lacks: %v, want ErrUnknownTopic", err)
	}
	if _, err := groups[0].Publish(ctx, "a", make([]byte, DefaultMaxMessageBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized Publish: %v, want ErrTooLarge", err)
	}
	// Every member publishes on every topic and sends to the group, all
	// at once.
	const each = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				for _, tp := range topics {
					if _, err := g.Publish(ctx, tp.Name, []byte(fmt.Sprintf("%d/%s/%d", i+1, tp.Name, k))); err != nil {
						errs <- err
						return
					}
				}
				if _, err := g.Send(ctx, []byte(fmt.Sprintf("%d//%d", i+1, k))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The wait levels: stable on a topic nobody subscribes to; delivered
	// on one the publisher subscribes to, with its index; delivered on
	// one it does not, once every subscriber holds it.
	r, err := groups[0].Publish(ctx, "none", []byte("1/none/last"), WaitStable())
	if err != nil || r.Topic != "none" || r.Seq != each+1 {
		t.Fatalf("WaitStable on a topic without subscribers: %+v, %v", r, err)
	}
	lastA, err := groups[0].Publish(ctx, "a", []byte("1/a/last"), WaitDelivered())
	if err != nil || lastA.Seq != each+1 || lastA.Epoch != 1 || lastA.Index == 0 {
		t.Fatalf("WaitDelivered on a subscribed topic: %+v, %v; want seq %d, placed", lastA, err, each+1)
	}
	if _, err := groups[0].Publish(ctx, "solo", []byte("1/solo/last"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	want := map[NodeID]int{}
	for i := 1; i <= n; i++ {
		id := NodeID(i)
		want[id] = n * each // the group's
		for _, tp := range topics {
			if slices.Contains(tp.Subscribers, id) {
				want[id] += n * each
			}
		}
	}
	want[1]++ // "1/a/last"
	want[2]++
	want[3]++ // "1/solo/last"
	for i := range n {
		id := NodeID(i + 1)
		got := want[id]
		if id == 2 {
			got -= n * each // topic b goes to its own handler
			bRecs[1].wait(t, n*each)
		}
		recs[i].wait(t, got)
	}
	// What each delivered: its topics' messages only, once each, FIFO
	// per sender and topic, indexes counting each topic's.
	all := make([][]Delivery, n)
	for i := range n {
		recs[i].mu.Lock()
		all[i] = slices.Clone(recs[i].got)
		recs[i].mu.Unlock()
		if i == 1 {
			bRecs[1].mu.Lock()
			all[i] = append(all[i], bRecs[1].got...)
			bRecs[1].mu.Unlock()
			slices.SortFunc(all[i], simOrder)
		}
		next := make(map[string]uint64)
		index := make(map[string]uint64)
		for _, d := range all[i] {
			if string(d.Payload) == "1/a/last" && d.Index != lastA.Index {
				t.Fatalf("member %d delivered %q at index %d, its Publish said %d", i+1, d.Payload, d.Index, lastA.Index)
			}
			if d.Topic != "" && !slices.Contains(topicByName(topics, d.Topic).Subscribers, NodeID(i+1)) {
				t.Fatalf("member %d delivered %q of topic %q", i+1, d.Payload, d.Topic)
			}
			ch := fmt.Sprintf("%d/%s", d.Sender, d.Topic)
			if d.Seq != next[ch]+1 {
				t.Fatalf("member %d: %q is #%d of %s after #%d", i+1, d.Payload, d.Seq, ch, next[ch])
			}
			next[ch] = d.Seq
			if d.Index != index[d.Topic]+1 {
				t.Fatalf("member %d: %q has index %d after %d", i+1, d.Payload, d.Index, index[d.Topic])
			}
			index[d.Topic] = d.Index
		}
		if len(all[i]) != want[NodeID(i+1)] {
			t.Fatalf("member %d delivered %d messages, want %d", i+1, len(all[i]), want[NodeID(i+1)])
		}
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			a, b := make([]simDelivery, len(all[i])), make([]simDelivery, len(all[j]))
			for k, d := range all[i] {
				a[k] = simDelivery{Delivery: d}
			}
			for k, d := range all[j] {
				b[k] = simDelivery{Delivery: d}
			}
			if err := simSameRelativeOrder(a, b); err != nil {
				t.Fatalf("members %d and %d: %v", i+1, j+1, err)
			}
		}
	}
	// The links: a member receives the records of a topic group only for
	// the subscriber sets it is in.
	for i, ep := range eps {
		id := NodeID(i + 1)
		_, foreign := ep.Totals(func(s rdma.StreamID) bool {
			set, _, ok := TopicGroup(multicast.StreamGroup(s))
			return ok && !slices.Contains(setsOf[id], set)
		})
		_, own := ep.Totals(func(s rdma.StreamID) bool {
			_, _, ok := TopicGroup(multicast.StreamGroup(s))
			return ok
		})
		if foreign != 0 || own == 0 {
			t.Errorf("member %d received %d bytes on topic groups of sets it is not in, %d in all", id, foreign, own)
		}
	}
}

func topicByName(topics []Topic, name string) Topic {
	for _, tp := range topics {
		if tp.Name == name {
			return tp
		}
	}
	return Topic{}
}

// TestTopicsConfig: Open refuses topics it cannot serve, naming the
// field.
func TestTopicsConfig(t *testing.T) {
	members := []Member{{ID: 1, Addr: "a:1"}, {ID: 2, Addr: "a:2"}}
	for _, tc := range []struct {
		name   string
		topics []Topic
		mod    func(*Config)
		field  string
	}{
		{"empty name", []Topic{{}}, nil, "Topics[0].Name"},
		{"name twice", []Topic{{Name: "x"}, {Name: "x"}}, nil, "Topics[1].Name"},
		{"long name", []Topic{{Name: string(make([]byte, MaxTopicName+1))}}, nil, "Topics[0].Name"},
		{"unordered topic", []Topic{{Name: "x", Mode: Unordered}}, nil, "Topics[0].Mode"},
		{"subscriber not a member", []Topic{{Name: "x", Subscribers: []NodeID{3}}}, nil, "Topics[0].Subscribers"},
		{"subscriber twice", []Topic{{Name: "x", Subscribers: []NodeID{1, 1}}}, nil, "Topics[0].Subscribers"},
		{"unordered group", []Topic{{Name: "x"}}, func(c *Config) { c.Mode = Unordered }, "Config.Topics"},
		{"durable total order topic", []Topic{{Name: "x", Mode: TotalOrder}}, func(c *Config) { c.Durable = &DurableConfig{Dir: t.TempDir()} }, "Topics[0].Mode"},
	} {
		cfg := Config{Self: 1, Members: members, Topics: tc.topics}
		if tc.mod != nil {
			tc.mod(&cfg)
		}
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.field)
		}
	}
	// Atomic topics in a durable group are valid.
	cfg := Config{Self: 1, Members: members, Topics: []Topic{{Name: "x", Subscribers: []NodeID{1}}}, Durable: &DurableConfig{Dir: t.TempDir()}}
	if err := cfg.Validate(); err != nil {
		t.Errorf("durable atomic topics: %v", err)
	}
}
