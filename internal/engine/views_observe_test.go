package engine

import (
	"sync/atomic"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestViewsObservability: a join and then a crash show up as view
// change spans (wedge to install, with the new epoch) and in the
// metrics: the state transferred, on a donor's side and the joiner's;
// the suspicions of the crashed member raised and confirmed, the views
// installed, the current epoch, the neighbours' lag.
func TestViewsObservability(t *testing.T) {
	c := newVSCluster(t)
	spans := tracetest.NewSpanRecorder()
	reader, joinerReader := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	nodes := c.openAll(3, func(cfg *Config) {
		if cfg.Self == 1 {
			cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		}
	})
	stop := make(chan struct{})
	wg := c.load(stop, nodes...)
	c.waitCount(nodes[0], 100)
	joiner, err := c.open(4, 1, func(cfg *Config) {
		cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(joinerReader))
	})
	if err != nil {
		t.Fatal(err)
	}
	c.waitView(2, 4, append(nodes, joiner)...)
	// Member 1 serves its share of the state until etcd shows the joiner
	// caught up.
	waitMetric(t, reader, "convoy.transfer.duration{kind=snapshot,role=donor}", 1)
	c.crash(3)
	survivors := []*vsNode{nodes[0], nodes[1], joiner}
	c.waitView(3, 3, survivors...)
	close(stop)
	wg.Wait()

	var change bool
	for _, s := range spans.Ended() {
		if s.Name() != "convoy.view.change" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "convoy.next_epoch" && kv.Value.AsInt64() == 3 {
				change = true
			}
		}
	}
	if !change {
		t.Errorf("no convoy.view.change span ending in epoch 3 among %d spans", len(spans.Ended()))
	}

	got := metricValues(t, reader)
	checkMetrics(t, got, map[string]float64{
		"convoy.membership.views":                            3,
		"convoy.membership.epoch":                            3,
		"convoy.membership.suspicions{state=raised}":         1,
		"convoy.membership.suspicions{state=confirmed}":      1,
		"convoy.membership.neighbour.lag":                    0,
		"convoy.transfer.bytes{kind=snapshot,role=donor}":    1,
		"convoy.transfer.duration{kind=snapshot,role=donor}": 1,
	}, "convoy.transfer.bytes", "convoy.transfer.duration")
	joined := metricValues(t, joinerReader)
	checkMetrics(t, joined, map[string]float64{
		"convoy.membership.views":                             2,
		"convoy.membership.epoch":                             3,
		"convoy.transfer.bytes{kind=snapshot,role=joiner}":    1,
		"convoy.transfer.duration{kind=snapshot,role=joiner}": 1,
	}, "convoy.transfer.bytes", "convoy.transfer.duration")
	// The barriers trail by moments, even just after a view opened.
	for _, m := range []map[string]float64{got, joined} {
		for _, s := range []string{"convoy.barrier.lag{barrier=delivery}", "convoy.barrier.lag{barrier=commit}"} {
			if m[s] > 60 {
				t.Errorf("%s = %vs", s, m[s])
			}
		}
	}
}

// TestViewsStatusFollowsOnView: once the application hears of a view,
// Status shows that view's epoch or a later one, for a view the member
// enters and for one it installs. (Status once lagged behind OnView at
// an install: an application that read it there saw the epoch before.)
func TestViewsStatusFollowsOnView(t *testing.T) {
	c := newVSCluster(t)
	groups := make([]atomic.Pointer[Group], 3)
	type seen struct {
		member      int
		view, shown uint64
	}
	seenCh := make(chan seen, 16)
	nodes := c.openEach(len(groups), func(i int, cfg *Config) {
		record := cfg.OnView
		cfg.OnView = func(v View) {
			// On the loop; the first view comes before the group is
			// stored. Recorded after the check, so that a view waited
			// for was checked.
			if g := groups[i].Load(); g != nil && !v.Excluded {
				seenCh <- seen{i + 1, v.Epoch, g.Status().Epoch}
			}
			record(v)
		}
	})
	for i, n := range nodes {
		groups[i].Store(n.g)
	}
	before, _ := nodes[0].lastView()
	c.crash(3)
	c.waitView(before.Epoch+1, 2, nodes[:2]...)
	installed := 0
	for len(seenCh) > 0 {
		s := <-seenCh
		if s.shown < s.view {
			t.Errorf("member %d: Status showed epoch %d in OnView of view %d", s.member, s.shown, s.view)
		}
		if s.member != 3 && s.view > before.Epoch {
			installed++
		}
	}
	if installed < 2 {
		t.Errorf("%d survivors heard of a view after %d while their groups were open, want 2", installed, before.Epoch)
	}
}
