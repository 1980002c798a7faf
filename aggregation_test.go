package convoy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/convoy-gcs/convoy/internal/invariants"
	"github.com/convoy-gcs/convoy/rdma"
)

// controlCounts runs n members on the in-memory transport under a light
// load for a while and returns, per kind, the largest number of control
// messages a member sent per beacon interval.
//
// The group runs in a synctest bubble, on a clock that moves only once
// every member has done all it can: an interval is an interval of the
// protocol's time, whatever else the machine is doing, so the counts do
// not depend on how fast the machine runs the members.
func controlCounts(t *testing.T, n, fanOut int) map[string]float64 {
	t.Helper()
	var out map[string]float64
	synctest.Test(t, func(t *testing.T) {
		out = bubbleControlCounts(t, n, fanOut)
	})
	return out
}

// bubbleControlCounts is controlCounts inside the bubble.
func bubbleControlCounts(t *testing.T, n, fanOut int) map[string]float64 {
	const interval = 5 * time.Millisecond
	const run = 40 * interval
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 1})
	defer fab.Close()
	members := make([]Member, n)
	eps := make([]rdma.Endpoint, n)
	for i := range members {
		members[i] = Member{ID: NodeID(i + 1)}
		ep, err := fab.Endpoint(members[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		eps[i] = ep
	}
	readers := make([]*sdkmetric.ManualReader, n)
	cfgs := make([]Config, n)
	for i := range cfgs {
		readers[i] = sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(readers[i]))
		defer mp.Shutdown(context.Background())
		cfgs[i] = Config{Self: members[i].ID, Members: members, Endpoint: eps[i], BeaconInterval: interval, FanOut: fanOut, MeterProvider: mp}
	}
	groups, closeAll := openAll(t, cfgs, func(int) Handler { return nil })
	defer closeAll()
	// Light load: one member sends a message per interval. A message is
	// delivered within a few beacon gaps; the bound (on the bubble's
	// clock, like every time here) turns a stall into a failure instead
	// of a test that never ends.
	for deadline := time.Now().Add(run); time.Now().Before(deadline); time.Sleep(interval) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := groups[0].Send(ctx, []byte("tick"), WaitDelivered())
		cancel()
		if err != nil {
			t.Fatalf("n=%d fan-out %d: %v", n, fanOut, err)
		}
	}
	out := map[string]float64{}
	for _, r := range readers {
		var rm metricdata.ResourceMetrics
		if err := r.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		per := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || m.Name != "convoy.control.messages" {
					continue
				}
				for _, dp := range sum.DataPoints {
					kind, _ := dp.Attributes.Value(attribute.Key("kind"))
					per[kind.AsString()] += dp.Value
				}
			}
		}
		for k, v := range per {
			out[k] = max(out[k], float64(v)/float64(run/interval))
		}
	}
	return out
}

// With aggregation on, the frontier messages a member sends per interval
// stay bounded by the fan-out as the group grows; announcing frontiers to
// every member directly (on the beacons) grows with the group. Beacons,
// which every member needs from every sender, grow with the group in both
// schemes.
func TestAggregationControlMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs groups of up to 32 members")
	}
	const fanOut = 4
	var b strings.Builder
	fmt.Fprintf(&b, "%8s %22s %22s\n", "members", "direct: beacon msgs", "tree: up+down msgs")
	sizes := []int{4, 16, 32}
	if invariants.RaceEnabled {
		sizes = sizes[:2] // the race detector slows 32 members too much
	}
	for _, n := range sizes {
		direct := controlCounts(t, n, 0)
		tree := controlCounts(t, n, fanOut)
		agg := tree["up"] + tree["down"]
		fmt.Fprintf(&b, "%8d %22.1f %22.1f\n", n, direct["beacon"], agg)
		// A member sends at most one up and one down round per reaction;
		// the light load causes a few reactions per interval whatever n
		// (about three, a little more or fewer from run to run as records
		// fall differently into a member's batches).
		if want := 4 * (fanOut + 1); agg > float64(want) {
			t.Errorf("n=%d: %.1f aggregation messages per member per interval, want at most %d", n, agg, want)
		}
		if direct["beacon"] < float64(n-1)/2 {
			t.Errorf("n=%d: direct scheme sent %.1f frontier-carrying messages per member per interval, want about %d or more", n, direct["beacon"], n-1)
		}
	}
	t.Log("\n" + b.String())
}
