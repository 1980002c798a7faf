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
func BenchmarkCoreStep(b *testing.B) {
	for _, members := range []int{3, 8, 32} {
		for _, mode := range []Mode{TotalOrder, Atomic} {
			b.Run(fmt.Sprintf("members=%d/%v", members, mode), func(b *testing.B) {
				benchmarkCoreStep(b, members, mode)
			})
		}
	}
}

func benchmarkCoreStep(b *testing.B, members int, mode Mode) {
	now := int64(time.Second)
	c, err := NewCore(Config{Self: 0, Members: members, Mode: mode, BeaconInterval: time.Millisecond, MaxAhead: time.Second}, now)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	seq := make([]uint64, members)
	delivered := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += 100
		from := 1 + i%(members-1)
		seq[from]++
		// Stamps lag the receiver's clock a little, and every record
		// carries its sender's frontier: what it last saw of everyone.
		ts := Timestamp(now - 50_000)
		r := Record{Kind: KindData, Seq: seq[from], TS: ts, Frontier: ts - 10_000, Payload: payload}
		if err := c.Step(now, from, r); err != nil {
			b.Fatal(err)
		}
		if i%64 == 0 {
			c.Tick(now)
		}
		delivered += len(c.Ready().Deliveries)
	}
	b.StopTimer()
	if b.N > 10_000 && delivered == 0 {
		b.Fatalf("%d records, nothing delivered", b.N)
	}
}
