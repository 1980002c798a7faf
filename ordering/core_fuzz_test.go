package ordering

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

// FuzzCoreInput drives a core of a three-member group with what its two
// peers could send it: records (as decoded from the network, so any that
// DecodeRecord accepts: data, beacons and the aggregation tree's), in any
// order, between ticks and sends of its own; barriers announced directly
// and aggregated by a tree; and the same with topics (a core subscribed
// to topics 1 and 3 of three, whose sends publish on them too, and whose
// peers' records include publish records and topic beacons).
// The input is a sequence of operations:
//
//	op byte: op%4 == 0 a Tick, 1 a Send, else a record from member op%2+1,
//	then a uint16 little-endian time step (ticks of 1µs),
//	then for a record a uint16 length and that many bytes of the record.
//
// Whatever the records, the core must neither panic nor deliver a
// channel's messages out of its sequence order, twice, or out of stamp
// order, nor a topic it does not subscribe to.
func FuzzCoreInput(f *testing.F) {
	rec := func(from byte, r Record) []byte {
		b := AppendRecord(nil, &r)
		out := []byte{2 + from%2, 10, 0}
		out = binary.LittleEndian.AppendUint16(out, uint16(len(b)))
		return append(out, b...)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tick := []byte{0, 100, 0}
	send := []byte{1, 5, 0}
	f.Add(cat(send, tick))
	// Two peers' messages in order, then beacons that let them through.
	f.Add(cat(
		rec(0, Record{Kind: KindData, Seq: 1, TS: 5000, Payload: []byte("a")}),
		rec(1, Record{Kind: KindData, Seq: 1, TS: 6000, Payload: []byte("b")}),
		send,
		rec(0, Record{Kind: KindBeacon, Seq: 1, TS: 90000, Frontier: 90000}),
		rec(1, Record{Kind: KindBeacon, Seq: 1, TS: 90000, Frontier: 90000}),
		tick,
	))
	// A sender's message 2 held out of order, then its message 1 stamped
	// above it: rejected (it once made the core deliver message 2 first
	// and panic).
	f.Add(cat(
		rec(0, Record{Kind: KindData, Seq: 2, TS: 500, Payload: []byte("b")}),
		rec(1, Record{Kind: KindBeacon, Seq: 0, TS: 2000, Frontier: 2000}),
		rec(0, Record{Kind: KindData, Seq: 1, TS: 900, Payload: []byte("a")}),
		rec(0, Record{Kind: KindBeacon, Seq: 2, TS: 990, Frontier: 990}),
		send,
		rec(0, Record{Kind: KindBeacon, Seq: 2, TS: 90000, Frontier: 90000}),
		rec(1, Record{Kind: KindBeacon, Seq: 0, TS: 90000, Frontier: 90000}),
		tick,
	))
	// A peer asks for prompt beacons (a want), before and after its
	// message.
	f.Add(cat(
		rec(1, Record{Kind: KindWant, Seq: 0, TS: 3000, Frontier: 2000}),
		rec(0, Record{Kind: KindData, Seq: 1, TS: 5000, Payload: []byte("a")}),
		tick,
		rec(1, Record{Kind: KindWant, Seq: 0, TS: 6000, Frontier: 5000}),
		rec(0, Record{Kind: KindWant, Seq: 1, TS: 2000, Frontier: 1000}),
		tick,
	))
	// Topics: a publish on topic 1, a topic beacon bound to it, one on a
	// topic this core does not subscribe to, and one bound to a message
	// not held yet.
	f.Add(cat(
		rec(0, Record{Kind: KindPublish, Topic: 1, Seq: 1, TS: 5000, Payload: []byte("a")}),
		rec(0, Record{Kind: KindTopicBeacon, Seq: 0, TS: 7000, Frontier: 7000, Bounds: []TopicSeq{{1, 1}}}),
		rec(1, Record{Kind: KindPublish, Topic: 2, Seq: 1, TS: 6000, Payload: []byte("b")}),
		rec(1, Record{Kind: KindTopicBeacon, Seq: 0, TS: 8000, Frontier: 7000, Bounds: []TopicSeq{{2, 1}, {3, 2}}}),
		send, send,
		rec(1, Record{Kind: KindPublish, Topic: 3, Seq: 2, TS: 7500, Payload: []byte("c")}),
		rec(1, Record{Kind: KindPublish, Topic: 3, Seq: 1, TS: 7400, Payload: []byte("d")}),
		rec(0, Record{Kind: KindTopicBeacon, Seq: 0, TS: 90000, Frontier: 90000}),
		rec(1, Record{Kind: KindTopicBeacon, Seq: 0, TS: 90000, Frontier: 90000}),
		tick,
	))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, mode := range []Mode{TotalOrder, Atomic} {
			for _, fanOut := range []int{0, 2} {
				runCoreInput(t, mode, fanOut, nil, in)
				runCoreInput(t, mode, fanOut, fuzzTopics, in)
			}
		}
	})
}

// fuzzTopics are the topics of FuzzCoreInput's cores with topics: the
// core (rank 0) subscribes to topics 1 and 3.
var fuzzTopics = []Topic{
	{Subscribers: []int{0, 1}, Mode: Atomic},
	{Subscribers: []int{1, 2}, Mode: Atomic},
	{Subscribers: []int{0, 1, 2}, Mode: TotalOrder},
}

// runCoreInput runs in against a core in mode whose barriers are
// aggregated by a tree of fanOut (0: announced directly).
func runCoreInput(t *testing.T, mode Mode, fanOut int, topics []Topic, in []byte) {
	now := int64(1000)
	c, err := NewCore(Config{Self: 0, Members: 3, Mode: mode, FanOut: fanOut, BeaconInterval: 50 * time.Microsecond, MaxAhead: time.Millisecond, Topics: topics}, now)
	if err != nil {
		t.Fatal(err)
	}
	next := make(map[[2]int]uint64) // by sender and topic
	var last Delivery
	check := func() {
		for _, d := range c.Ready().Deliveries {
			ch := [2]int{d.Sender, d.Topic}
			if d.Seq != next[ch]+1 {
				t.Fatalf("%v: member %d's message %d on topic %d delivered after its message %d", mode, d.Sender, d.Seq, d.Topic, next[ch])
			}
			next[ch] = d.Seq
			if d.Topic > 0 && !slices.Contains(topics[d.Topic-1].Subscribers, 0) {
				t.Fatalf("%v: delivered a message of topic %d, not subscribed to", mode, d.Topic)
			}
			if last.Index > 0 && (d.TS < last.TS || d.TS == last.TS && d.Sender < last.Sender) {
				t.Fatalf("%v: message stamped %d (member %d) delivered after one stamped %d (member %d)", mode, d.TS, d.Sender, last.TS, last.Sender)
			}
			last = d
		}
	}
	for len(in) >= 3 {
		op := in[0]
		now += int64(binary.LittleEndian.Uint16(in[1:3])) * int64(time.Microsecond)
		in = in[3:]
		switch op % 4 {
		case 0:
			c.Tick(now)
		case 1:
			if topic := int(op/4) % 4; topic > 0 && topics != nil {
				_, _, _ = c.Publish(now, topic, []byte{op})
			} else {
				c.Send(now, []byte{op})
			}
		default:
			if len(in) < 2 {
				return
			}
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			if n > len(in) {
				return
			}
			r, err := DecodeRecord(in[:n], 1<<10)
			in = in[n:]
			if err != nil {
				continue
			}
			_ = c.Step(now, int(op%2)+1, r)
		}
		check()
	}
}
