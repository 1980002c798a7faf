package multicast

import (
	"context"
	"maps"
	"testing"

	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// TestMetrics: the groups that share a Metrics add to its counts, by
// algorithm, and the counts of closed groups stay until the Metrics is
// closed.
func TestMetrics(t *testing.T) {
	f := newMemFabric(t, 3, 1)
	defer f.close()
	meters := metrictest.New(t)
	m, err := NewMetrics(meters.Provider)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{100, 100, 10000} // two batched, one in three blocks
	for id, alg := range []Algorithm{Chain, BinomialPipeline} {
		cfg := GroupConfig{
			ID: uint64(id + 1), Members: f.ids(), Root: f.eps[0].ID(), Algorithm: alg,
			BlockBytes: 4096, SmallThreshold: 1024, Metrics: m,
		}
		groups, members := openGroup(t, f, cfg, []int{0, 1, 2})
		for i, size := range sizes {
			if err := groups[0].Send(context.Background(), payload(uint64(i), size)); err != nil {
				t.Fatal(err)
			}
		}
		for _, mb := range members[1:] {
			mb.waitMessages(t, len(sizes))
		}
		closeAll(groups)
	}
	want := make(map[string]int64)
	for _, alg := range []string{"chain", "pipeline"} {
		want["convoy.multicast.sent.messages{algorithm="+alg+"}"] = 3
		want["convoy.multicast.sent.bytes{algorithm="+alg+"}"] = 10200
		want["convoy.multicast.delivered.messages{algorithm="+alg+"}"] = 2 * 3 // two receivers
		want["convoy.multicast.delivered.bytes{algorithm="+alg+"}"] = 2 * 10200
		want["convoy.multicast.blocks.received{algorithm="+alg+"}"] = 2 * 3
	}
	// A group closed while its peers still run may fail on them first
	// (convoy.multicast.failures): that count is not the subject here.
	counts := func() map[string]int64 {
		got := meters.Sums(t)
		delete(got, "convoy.multicast.failures")
		return got
	}
	if got := counts(); !maps.Equal(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := counts(); len(got) != 0 {
		t.Errorf("after Close: %v, want nothing reported", got)
	}
}

// TestNoMetrics: a group without Metrics (GroupConfig.Metrics nil)
// counts nothing, and closing no Metrics is a no-op.
func TestNoMetrics(t *testing.T) {
	var m *Metrics
	g := m.group(BinomialPipeline)
	g.sent(100)
	g.delivered(100)
	g.blockRecv(4096)
	g.failed()
	if g.algorithmCounts != nil || g.failures != nil {
		t.Errorf("a nil Metrics gave a group counts: %+v", g)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close of a nil Metrics = %v, want nil", err)
	}
}
