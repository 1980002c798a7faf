package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

// memMembers returns n endpoints on a fresh in-memory fabric and the
// member list for them.
func memMembers(t *testing.T, n int) ([]rdma.Endpoint, []Member, func()) {
	t.Helper()
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 1})
	var eps []rdma.Endpoint
	var members []Member
	for i := 1; i <= n; i++ {
		ep, err := fab.Endpoint(NodeID(i))
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
		members = append(members, Member{ID: NodeID(i)})
	}
	return eps, members, func() {
		for _, ep := range eps {
			ep.Close()
		}
		fab.Close()
	}
}

// Send waits for window space, or with NoWait reports ErrBackpressure; a
// waiting Send honours its context, and one whose context has ended sends
// nothing. Memory stays bounded however fast the
// application sends. The metrics count the Sends accepted, the one
// refused and the one that waited.
func TestSendBackpressure(t *testing.T) {
	eps, members, done := memMembers(t, 2)
	defer done()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	// Member 2 never opens the group: in atomic mode nothing is delivered,
	// so member 1's window never drains.
	g, err := Open(context.Background(), Config{Self: 1, Members: members, Endpoint: eps[0], WindowMessages: 3, NoWait: true, MeterProvider: mp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// A Send whose context has ended sends nothing, though the window is
	// open.
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if _, err := g.Send(cancelled, []byte("m")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled context = %v, want Canceled", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := g.Send(context.Background(), []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Send(context.Background(), []byte("m")); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("Send on a full window = %v, want ErrBackpressure", err)
	}
	g.cfg.NoWait = false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Send(ctx, []byte("m")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Send = %v, want DeadlineExceeded", err)
	}
	if _, err := g.Send(context.Background(), make([]byte, DefaultMaxMessageBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized Send = %v, want ErrTooLarge", err)
	}
	checkMetrics(t, metricValues(t, reader), map[string]float64{
		"convoy.sent.messages{mode=atomic}":         3,
		"convoy.sent.bytes{mode=atomic}":            3,
		"convoy.send.backpressure{outcome=refused}": 1,
		"convoy.send.backpressure{outcome=waited}":  1,
	}, "convoy.sent.messages", "convoy.sent.bytes", "convoy.send.backpressure")
}

// WaitDelivered and WaitStable return once the message got that far;
// Send after Close fails with ErrClosed. The otel metrics count what was
// sent and delivered, how long it took, and how far the barriers trail.
func TestSendWaitLevelsAndMetrics(t *testing.T) {
	eps, members, done := memMembers(t, 3)
	defer done()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var groups []*Group
	recs := make([]*recorder, 3)
	for i := range eps {
		recs[i] = newRecorder()
		cfg := Config{Self: members[i].ID, Members: members, Endpoint: eps[i]}
		if i == 0 {
			cfg.MeterProvider = mp
		}
		g, err := Open(context.Background(), cfg, recs[i].handle)
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	ctx := context.Background()
	r1, err := groups[0].Send(ctx, []byte("one"), WaitDelivered())
	if err != nil {
		t.Fatal(err)
	}
	recs[0].mu.Lock()
	delivered := len(recs[0].got)
	recs[0].mu.Unlock()
	if r1.Seq != 1 || delivered != 1 {
		t.Fatalf("after WaitDelivered: seq %d, %d delivered locally; want 1, 1", r1.Seq, delivered)
	}
	r2, err := groups[0].Send(ctx, []byte("two"), WaitStable())
	if err != nil || r2.Seq != 2 {
		t.Fatalf("WaitStable: %v, seq %d", err, r2.Seq)
	}
	for _, r := range recs {
		r.wait(t, 2) // stable: every member holds it and delivers it
	}
	got := metricValues(t, reader)
	checkMetrics(t, got, map[string]float64{
		"convoy.sent.messages{mode=atomic}":      2,
		"convoy.sent.bytes{mode=atomic}":         6,
		"convoy.delivered.messages{mode=atomic}": 2,
		"convoy.delivered.bytes{mode=atomic}":    6,
		"convoy.delivery.latency{mode=atomic}":   2,
		"convoy.barrier.lag{barrier=delivery}":   0,
		"convoy.barrier.lag{barrier=commit}":     0,
	}, "convoy.sent.messages", "convoy.delivered.messages", "convoy.delivery.latency", "convoy.barrier.lag")
	for _, s := range []string{"convoy.sent.messages{mode=atomic}", "convoy.delivered.messages{mode=atomic}", "convoy.delivery.latency{mode=atomic}"} {
		if got[s] != 2 {
			t.Errorf("%s = %v, want 2", s, got[s])
		}
	}
	// The barriers trail the clock by a beacon interval or so, not by
	// the clock's whole reading.
	for _, s := range []string{"convoy.barrier.lag{barrier=delivery}", "convoy.barrier.lag{barrier=commit}"} {
		if got[s] > 10 {
			t.Errorf("%s = %vs", s, got[s])
		}
	}
	for _, g := range groups {
		g.Close()
	}
	if _, err := groups[0].Send(ctx, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

// A member that sends records breaking the protocol — a stamp below its own
// promise, a malformed frame — has them rejected and counted; the group
// keeps delivering the good ones in the same order everywhere.
func TestBadRecordsRejected(t *testing.T) {
	eps, members, done := memMembers(t, 3)
	defer done()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	recs := []*recorder{newRecorder(), newRecorder()}
	var groups []*Group
	for i := 0; i < 2; i++ {
		cfg := Config{Self: members[i].ID, Members: members, Endpoint: eps[i], Mode: TotalOrder, MeterProvider: mp}
		g, err := Open(context.Background(), cfg, recs[i].handle)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		groups = append(groups, g)
	}
	// Member 3 is played by hand: its data group, with raw records, and
	// the receiving side of the others' groups so that theirs do not fail.
	ids := []NodeID{1, 2, 3}
	var raw *multicast.Group
	for j := 0; j < 3; j++ {
		mg, err := multicast.NewGroup(context.Background(), eps[2], multicast.GroupConfig{
			ID: 1<<16 | uint64(j), Members: ids, Root: ids[j],
			MaxMessageBytes: DefaultMaxMessageBytes + ordering.RecordHeaderBytes,
		}, multicast.Callbacks{})
		if err != nil {
			t.Fatal(err)
		}
		defer mg.Close()
		if j == 2 {
			raw = mg
		}
	}
	now := uint64(time.Now().UnixNano())
	send := func(r ordering.Record) {
		if err := raw.Send(context.Background(), ordering.AppendRecord(nil, &r)); err != nil {
			t.Error(err)
		}
	}
	send(ordering.Record{Kind: ordering.KindData, Seq: 1, TS: ordering.Timestamp(now), Payload: []byte("good")})
	send(ordering.Record{Kind: ordering.KindBeacon, Seq: 1, TS: ordering.Timestamp(now + 1000)})
	send(ordering.Record{Kind: ordering.KindData, Seq: 2, TS: ordering.Timestamp(now + 10), Payload: []byte("below promise")})
	if err := raw.Send(context.Background(), []byte{9, 9, 9}); err != nil {
		t.Fatal(err)
	}
	// Beacons that keep member 3's promise moving, so the others deliver.
	stop := make(chan struct{})
	beaconsDone := make(chan struct{})
	go func() {
		defer close(beaconsDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			send(ordering.Record{Kind: ordering.KindBeacon, Seq: 1, TS: ordering.Timestamp(time.Now().UnixNano())})
		}
	}()
	defer func() { close(stop); <-beaconsDone }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := groups[0].Send(ctx, []byte("after"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		r.wait(t, 2)
	}
	for i, r := range recs {
		r.mu.Lock()
		if string(r.got[0].Payload) != "good" || string(r.got[1].Payload) != "after" {
			t.Errorf("member %d delivered %q, %q; want good, after", i, r.got[0].Payload, r.got[1].Payload)
		}
		r.mu.Unlock()
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var rejected int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "convoy.rejected.records" {
				for _, dp := range s.DataPoints {
					rejected += dp.Value
				}
			}
		}
	}
	if rejected != 4 { // two bad records at each of two members
		t.Errorf("rejected records = %d, want 4", rejected)
	}
}

// TestSendReceiptPlacesMessage: Send with WaitDelivered returns where
// the message landed — the Epoch and Index its Delivery carries, on
// every member in the ordered modes — while Send that waits for less
// returns no place.
func TestSendReceiptPlacesMessage(t *testing.T) {
	for _, mode := range []Mode{Atomic, TotalOrder, Unordered} {
		t.Run(mode.String(), func(t *testing.T) {
			const n, each = 3, 20
			eps, members, done := memMembers(t, n)
			defer done()
			recs := make([]*recorder, n)
			var cfgs []Config
			for i := range eps {
				recs[i] = newRecorder()
				cfgs = append(cfgs, Config{Self: members[i].ID, Members: members, Endpoint: eps[i], Mode: mode})
			}
			groups, closeAll := openAll(t, cfgs, func(i int) Handler { return recs[i].handle })
			defer closeAll()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			type sent struct {
				from    int
				receipt Receipt
			}
			results := make(chan sent, n*each)
			errs := make(chan error, n)
			for i, g := range groups {
				go func() {
					for k := range each {
						r, err := g.Send(ctx, fmt.Appendf(nil, "m%d-%d", i, k), WaitDelivered())
						if err != nil {
							errs <- err
							return
						}
						results <- sent{i, r}
					}
					errs <- nil
				}()
			}
			for range groups {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			close(results)
			for _, r := range recs {
				r.wait(t, n*each)
			}
			for s := range results {
				if s.receipt.Index == 0 || s.receipt.Epoch == 0 {
					t.Fatalf("member %d: receipt %+v places nothing", s.from+1, s.receipt)
				}
				for j, r := range recs {
					if mode == Unordered && j != s.from {
						continue // an index counts one member's deliveries
					}
					r.mu.Lock()
					var found *Delivery
					for k := range r.got {
						if d := &r.got[k]; d.Sender == members[s.from].ID && d.Seq == s.receipt.Seq {
							found = d
						}
					}
					r.mu.Unlock()
					if found == nil || found.Index != s.receipt.Index || found.Epoch != s.receipt.Epoch {
						t.Errorf("member %d's receipt %+v; member %d delivered it as %+v", s.from+1, s.receipt, j+1, found)
					}
				}
			}
			r, err := groups[0].Send(ctx, []byte("stable"), WaitStable())
			if err != nil || r.Index != 0 || r.Epoch != 0 {
				t.Errorf("WaitStable: receipt %+v, %v; want no place", r, err)
			}
		})
	}
}
