package multicast

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// benchGroup opens one group over every endpoint of f whose receivers
// count completions into done.
func benchGroup(b *testing.B, f *fabric, cfg GroupConfig, done *atomic.Int64) []*Group {
	b.Helper()
	var groups []*Group
	for i, ep := range f.eps {
		cb := Callbacks{}
		if i != 0 {
			cb.Complete = func([]byte) { done.Add(1) }
			buf := make([]byte, 64<<20)
			cb.Alloc = func(size int) []byte {
				if size <= len(buf) {
					return buf[:size]
				}
				return nil
			}
		}
		g, err := NewGroup(context.Background(), ep, cfg, cb)
		if err != nil {
			b.Fatal(err)
		}
		groups = append(groups, g)
	}
	return groups
}

func waitCount(done *atomic.Int64, want int64) {
	for done.Load() < want {
		// Completions arrive on transport goroutines.
		spinYield()
	}
}

// BenchmarkGroupLarge measures large messages through the binomial
// pipeline over loopback TCP (all members in this process, so the figure
// is CPU-bound; the network benchmark is `convoy bench multicast`).
func BenchmarkGroupLarge(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, alg := range []Algorithm{Sequential, BinomialPipeline} {
			b.Run(fmt.Sprintf("%v/n=%d", alg, n), func(b *testing.B) {
				f := newTCPFabricB(b, n)
				defer f.close()
				var done atomic.Int64
				groups := benchGroup(b, f, GroupConfig{ID: 1, Members: f.ids(), Root: f.eps[0].ID(), Algorithm: alg}, &done)
				defer closeAll(groups)
				msg := make([]byte, 16<<20)
				b.SetBytes(int64(len(msg)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := groups[0].Send(context.Background(), msg); err != nil {
						b.Fatal(err)
					}
					waitCount(&done, int64((i+1)*(n-1)))
				}
			})
		}
	}
}

// BenchmarkGroupSmall measures a stream of 64-byte messages through the
// batched path, reporting messages per second delivered to every member.
func BenchmarkGroupSmall(b *testing.B) {
	f := newTCPFabricB(b, 3)
	defer f.close()
	var done atomic.Int64
	groups := benchGroup(b, f, GroupConfig{ID: 1, Members: f.ids(), Root: f.eps[0].ID()}, &done)
	defer closeAll(groups)
	msg := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := groups[0].Send(context.Background(), msg); err != nil {
			b.Fatal(err)
		}
	}
	waitCount(&done, int64(b.N*2))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
