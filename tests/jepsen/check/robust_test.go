package check

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMalformedInput: the checkers never panic, whatever they are given,
// and report what they find within the bounds.
func TestMalformedInput(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	num := func() uint64 {
		switch r.IntN(6) {
		case 0:
			return math.MaxUint64
		case 1:
			return 0
		}
		return uint64(r.IntN(8))
	}
	when := func() int64 {
		if r.IntN(8) == 0 {
			return math.MinInt64 + int64(r.IntN(2))*math.MaxInt64
		}
		return int64(r.IntN(20)) - 2
	}
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	data := func() []byte {
		if r.IntN(5) == 0 {
			return nil
		}
		return []byte(pick("a", "b", "c", ""))
	}
	entries := func() []Entry {
		var es []Entry
		for range r.IntN(4) {
			es = append(es, Entry{Position: num(), Data: data()})
		}
		return es
	}
	for round := range 300 {
		var kv []KVOp
		var log []LogOp
		var dumps []LogDump
		var g GroupHistory
		g.Durable = r.IntN(2) == 0
		for range r.IntN(12) {
			op := KVOp{
				Client: r.IntN(4) - 1, RequestID: pick("", "r1", "r2"), Kind: KVKind(pick("get", "put", "cas", "delete", "x")),
				Key: pick("x", "y"), Value: pick("a", "b"), Invoke: when(), Complete: when(),
				Outcome: Outcome(pick("ok", "fail", "unknown", "")), Found: r.IntN(2) == 0, Read: pick("", "a", "b"), Swapped: r.IntN(2) == 0,
			}
			if r.IntN(2) == 0 {
				v := pick("a", "b")
				op.Expect = &v
			}
			kv = append(kv, op)
			log = append(log, LogOp{
				Client: r.IntN(4) - 1, RequestID: pick("", "r1", "r2"), Kind: LogKind(pick("append", "read", "range", "tail", "trim", "stream", "x")),
				Invoke: when(), Complete: when(), Outcome: op.Outcome, Data: data(), Streams: []string{pick("s", "t")},
				Position: num(), Status: ReadStatus(pick("found", "unwritten", "trimmed", "")), From: num(), To: num(),
				Stream: pick("", "s", "t"), Entries: entries(), Tail: num(), Before: num(), TrimPoint: num(),
			})
			g.Sends = append(g.Sends, Send{Sender: num(), Incarnation: num(), Payload: pick("a", "b", "c"), Invoke: when(), Complete: when(),
				Status: SendStatus(pick("accepted", "delivered", "stable", "durable", "excluded", "rejected", "unanswered", "x"))})
		}
		for range r.IntN(4) {
			dumps = append(dumps, LogDump{Member: pick("m1", "m2"), Trim: num(), Tail: num(), Entries: entries()})
			inc := Incarnation{Member: num(), Incarnation: num(), Final: r.IntN(2) == 0, Excluded: num()}
			for range r.IntN(10) {
				var ev GroupEvent
				if r.IntN(3) > 0 {
					ev.View = &GroupView{Epoch: num(), Start: num(), Members: []uint64{num(), num()}}
				}
				if r.IntN(3) > 0 {
					ev.Delivery = &GroupDelivery{Epoch: num(), Index: num(), Sender: num(), Incarnation: num(), Seq: num(),
						Payload: pick("a", "b", "c"), Replayed: r.IntN(3) == 0}
				}
				inc.Events = append(inc.Events, ev)
			}
			g.Incarnations = append(g.Incarnations, inc)
		}
		for _, res := range []Result{CheckKV(kv, KVOptions{}), CheckLog(log, dumps), CheckGroup(g)} {
			if res.OK != (len(res.Violations) == 0) || len(res.Violations) > MaxViolations || res.Omitted < 0 {
				t.Fatalf("round %d: inconsistent result %+v", round, res)
			}
		}
	}
}
