package convoy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkGroupThroughput measures 64-byte messages from every member of
// a three-member group over loopback TCP, delivered everywhere, in each
// mode; compare the modes' msgs/s within one run.
func BenchmarkGroupThroughput(b *testing.B) {
	for _, mode := range []Mode{Unordered, TotalOrder, Atomic} {
		b.Run(mode.String(), func(b *testing.B) {
			const n = 3
			addrs := freeAddrsB(b, n)
			members := make([]Member, n)
			for i := range members {
				members[i] = Member{ID: NodeID(i + 1), Addr: addrs[i]}
			}
			var delivered atomic.Int64
			cfgs := make([]Config, n)
			for i := range cfgs {
				cfgs[i] = Config{Self: members[i].ID, Members: members, Mode: mode, BeaconInterval: time.Millisecond}
			}
			groups, closeAll := openAll(b, cfgs, func(int) Handler { return func(Delivery) { delivered.Add(1) } })
			defer closeAll()
			var wg sync.WaitGroup
			per := b.N/n + 1
			b.ResetTimer()
			for _, g := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < per; k++ {
						if _, err := g.Send(context.Background(), make([]byte, 64)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			want := int64(per * n * n)
			for delivered.Load() < want {
				time.Sleep(100 * time.Microsecond)
			}
			b.ReportMetric(float64(per*n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func freeAddrsB(b *testing.B, n int) []string { return freeAddrsTB(b, n) }
