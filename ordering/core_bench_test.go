package ordering

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCoreStep measures a core's cost per message received: the
// other members' data records arrive interleaved (each sender's in its
// order, stamps close together as under load), each peer's frontier
// announced with its records, and the core orders and delivers them.
//
// In the held cases the frontiers move in steps of 2000 messages' stamps,
// so that the core holds up to a few thousand messages between
// deliveries; in the topics case the messages are spread over 4 topics,
// and every sender's topic beacons carry its frontier.
func BenchmarkCoreStep(b *testing.B) {
	for _, members := range []int{3, 8, 32} {
		for _, mode := range []Mode{TotalOrder, Atomic} {
			b.Run(fmt.Sprintf("members=%d/%v", members, mode), func(b *testing.B) {
				benchmarkCoreStep(b, members, mode, 0)
			})
		}
	}
	for _, members := range []int{8, 32} {
		b.Run(fmt.Sprintf("held/members=%d/%v", members, Atomic), func(b *testing.B) {
			benchmarkCoreStep(b, members, Atomic, 200_000)
		})
	}
	b.Run(fmt.Sprintf("topics/members=8/topics=4/%v", Atomic), func(b *testing.B) {
		benchmarkCoreTopics(b, 8, 4)
	})
}

// benchmarkCoreStep runs the benchmark for a group without topics, the
// frontiers rounded down to multiples of step (0: not rounded).
func benchmarkCoreStep(b *testing.B, members int, mode Mode, step Timestamp) {
	now := int64(time.Second)
	c, err := NewCore(Config{Self: 0, Members: members, Mode: mode, BeaconInterval: time.Millisecond, MaxAhead: time.Second}, now)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	seq := make([]uint64, members)
	delivered, held := 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += 100
		from := 1 + i%(members-1)
		seq[from]++
		// Stamps lag the receiver's clock a little, and every record
		// carries its sender's frontier: what it last saw of everyone.
		ts := Timestamp(now - 50_000)
		f := ts - 10_000
		if step > 0 {
			f -= f % step
		}
		r := Record{Kind: KindData, Seq: seq[from], TS: ts, Frontier: f, Payload: payload}
		if err := c.Step(now, from, r); err != nil {
			b.Fatal(err)
		}
		if i%64 == 0 {
			c.Tick(now)
		}
		delivered += len(c.Ready().Deliveries)
		held = max(held, c.Buffered())
	}
	b.StopTimer()
	if b.N > 10_000 && delivered == 0 {
		b.Fatalf("%d records, nothing delivered", b.N)
	}
	b.ReportMetric(float64(held), "max-held")
}

// benchmarkCoreTopics runs the benchmark for a group with topics, every
// member subscribed to each of them: each sender publishes on the
// topics in turn and sends a topic beacon after every round.
func benchmarkCoreTopics(b *testing.B, members, topics int) {
	now := int64(time.Second)
	cfg := Config{Self: 0, Members: members, Mode: Atomic, BeaconInterval: time.Millisecond, MaxAhead: time.Second}
	all := make([]int, members)
	for r := range all {
		all[r] = r
	}
	for range topics {
		cfg.Topics = append(cfg.Topics, Topic{Subscribers: all, Mode: Atomic})
	}
	c, err := NewCore(cfg, now)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	bounds := make([][]TopicSeq, members)
	for r := range bounds {
		for t := range topics {
			bounds[r] = append(bounds[r], TopicSeq{Topic: uint32(t + 1)})
		}
	}
	delivered, held := 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += 100
		from := 1 + i%(members-1)
		topic := (i / (members - 1)) % topics
		bounds[from][topic].Seq++
		ts := Timestamp(now - 50_000)
		r := Record{Kind: KindPublish, Topic: uint32(topic + 1), Seq: bounds[from][topic].Seq, TS: ts, Payload: payload}
		if err := c.Step(now, from, r); err != nil {
			b.Fatal(err)
		}
		if topic == topics-1 {
			r := Record{Kind: KindTopicBeacon, TS: ts + 1, Frontier: ts - 10_000, Bounds: bounds[from]}
			if err := c.Step(now, from, r); err != nil {
				b.Fatal(err)
			}
		}
		if i%64 == 0 {
			c.Tick(now)
		}
		delivered += len(c.Ready().Deliveries)
		held = max(held, c.Buffered())
	}
	b.StopTimer()
	if b.N > 10_000 && delivered == 0 {
		b.Fatalf("%d records, nothing delivered", b.N)
	}
	b.ReportMetric(float64(held), "max-held")
}
