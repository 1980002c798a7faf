package convoy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/engine"
	"github.com/convoy-gcs/convoy/rdma"
)

// The public API end to end on a fixed group of three: every member
// delivers the same messages with the same indexes, each Receipt names
// where its message was delivered, View lists the members, and Send
// after Close fails with ErrClosed.
func TestGroupPublicAPI(t *testing.T) {
	const n, msgs = 3, 20
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 1})
	defer fab.Close()
	members := make([]Member, n)
	cfgs := make([]Config, n)
	for i := range members {
		members[i] = Member{ID: NodeID(i + 1), Addr: fmt.Sprintf("m%d", i+1)}
	}
	var mu sync.Mutex
	got := make([][]Delivery, n)
	all := make([]chan struct{}, n) // closed once the member delivered every message
	for i := range all {
		all[i] = make(chan struct{})
	}
	for i := range cfgs {
		ep, err := fab.Endpoint(members[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		cfgs[i] = Config{Self: members[i].ID, Members: members, Endpoint: ep, BeaconInterval: time.Millisecond}
	}
	groups, closeAll := openAll(t, cfgs, func(i int) Handler {
		return func(d Delivery) {
			mu.Lock()
			got[i] = append(got[i], d)
			if len(got[i]) == msgs+n {
				close(all[i])
			}
			mu.Unlock()
		}
	})
	defer closeAll()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	receipts := make([]Receipt, msgs)
	var wg sync.WaitGroup
	for k := range msgs {
		wg.Go(func() {
			r, err := groups[k%n].Send(ctx, fmt.Appendf(nil, "msg %d", k), WaitDelivered())
			if err != nil {
				t.Errorf("Send %d: %v", k, err)
			}
			receipts[k] = r
		})
	}
	wg.Wait()
	// Each member sends one more message and waits until every member
	// holds it; then every member delivers all msgs+n messages.
	for i := range n {
		if _, err := groups[i].Send(ctx, []byte("last"), WaitStable()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case <-all[i]:
		case <-ctx.Done():
			t.Fatalf("member %d: %v before delivering every message", i+1, ctx.Err())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < n; i++ {
		if !slices.EqualFunc(got[0][:msgs+n], got[i][:msgs+n], func(a, b Delivery) bool {
			return a.Index == b.Index && a.Sender == b.Sender && a.Seq == b.Seq && string(a.Payload) == string(b.Payload)
		}) {
			t.Fatalf("member %d delivered differently from member 1", i+1)
		}
	}
	byIndex := make(map[uint64]Delivery)
	for _, d := range got[0] {
		byIndex[d.Index] = d
	}
	for k, r := range receipts {
		d, ok := byIndex[r.Index]
		if !ok || d.Epoch != r.Epoch || d.Sender != members[k%n].ID || d.Seq != r.Seq || string(d.Payload) != fmt.Sprintf("msg %d", k) {
			t.Errorf("receipt %+v of message %d names delivery %+v", r, k, d)
		}
	}
	v, in := groups[0].View()
	if !in || !slices.Equal(v.Members, members) || v.Epoch != 1 {
		t.Errorf("View = %v (%+v), %v; want epoch 1 with %v", v, v.Members, in, members)
	}
	last := slices.MaxFunc(receipts, func(a, b Receipt) int { return cmp.Compare(a.Index, b.Index) })
	st := groups[0].Status()
	if st.Self != 1 || st.Epoch != 1 || st.Rank != 0 || !slices.Equal(st.Members, members) || st.Phase != "active" ||
		st.Delivered < last.Index || st.InFlight != 0 || st.WindowMessages != DefaultWindowMessages || st.Lease != "" || len(st.Held) != n {
		t.Errorf("Status = %+v", st)
	}
	if err := groups[1].Close(); err != nil {
		t.Fatal(err)
	}
	if st := groups[1].Status(); st.Phase != "closed" {
		t.Errorf("Status after Close: phase %q, want closed", st.Phase)
	}
	if _, err := groups[1].Send(ctx, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
}

// publicStatus copies every field of the engine's Status.
func TestStatusCopiesEveryField(t *testing.T) {
	var es engine.Status
	ev := reflect.ValueOf(&es).Elem()
	for i := range ev.NumField() {
		f := ev.Field(i)
		switch f.Kind() {
		case reflect.Uint64, reflect.Uint:
			f.SetUint(uint64(i + 1))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.String:
			f.SetString("s")
		}
	}
	es.Members = []engine.Member{{ID: 2, Addr: "a:1"}}
	es.Held = []uint64{4, 5}
	es.Updated = time.Unix(7, 0)
	st := publicStatus(es)
	sv := reflect.ValueOf(st)
	if sv.NumField() != ev.NumField() {
		t.Fatalf("Status has %d fields, engine.Status %d", sv.NumField(), ev.NumField())
	}
	for i := range ev.NumField() {
		name := ev.Type().Field(i).Name
		got := sv.FieldByName(name)
		if name == "Members" {
			if len(st.Members) != 1 || st.Members[0] != (Member{ID: 2, Addr: "a:1"}) {
				t.Errorf("Members: %v", st.Members)
			}
			continue
		}
		if !got.IsValid() || !reflect.DeepEqual(got.Interface(), ev.Field(i).Interface()) {
			t.Errorf("%s not copied", name)
		}
	}
}

// After a message is delivered at one member, Sync at another returns
// only once that member has delivered it too.
func TestSync(t *testing.T) {
	const n, rounds = 3, 50
	var mu sync.Mutex
	got := make([]map[string]uint64, n) // payload → index, per member
	for i := range got {
		got[i] = make(map[string]uint64)
	}
	// A long beacon interval: the others learn of a message late unless
	// Sync waits for it.
	cfgs := memConfigs(t, n, 2, func(c *Config) { c.BeaconInterval = 20 * time.Millisecond })
	groups, closeAll := openAll(t, cfgs, func(i int) Handler {
		return func(d Delivery) {
			mu.Lock()
			got[i][string(d.Payload)] = d.Index
			mu.Unlock()
		}
	})
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := range rounds {
		from, at := k%n, (k+1)%n
		p := fmt.Sprintf("w%d", k)
		r, err := groups[from].Send(ctx, []byte(p), WaitDelivered())
		if err != nil {
			t.Fatal(err)
		}
		idx, err := groups[at].Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		have, ok := got[at][p]
		mu.Unlock()
		if !ok || have != r.Index || idx < r.Index {
			t.Fatalf("round %d: Sync at member %d returned %d; it holds %q at %d (%v), delivered at %d by member %d", k, at+1, idx, p, have, ok, r.Index, from+1)
		}
	}
}

// Sync does not wait for idle beacons: it asks the others for prompt
// ones. With a beacon interval of an hour, every Sync here would wait
// for the next idle beacons otherwise.
func TestSyncIdleGroup(t *testing.T) {
	const n, rounds = 3, 20
	cfgs := memConfigs(t, n, 4, func(c *Config) { c.BeaconInterval = time.Hour })
	groups, closeAll := openAll(t, cfgs, func(int) Handler { return nil })
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := range rounds {
		from := k % n
		r, err := groups[from].Send(ctx, []byte(fmt.Sprintf("w%d", k)), WaitDelivered())
		if err != nil {
			t.Fatal(err)
		}
		for at, g := range groups {
			// Twice: the second Sync's frontier is past what the first
			// one's reactions announced.
			for range 2 {
				idx, err := g.Sync(ctx)
				if err != nil {
					t.Fatalf("round %d: Sync at member %d: %v", k, at+1, err)
				}
				if idx < r.Index {
					t.Fatalf("round %d: Sync at member %d returned %d, before message %d", k, at+1, idx, r.Index)
				}
			}
		}
	}
}

// Sync needs atomic delivery.
func TestSyncNeedsAtomic(t *testing.T) {
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 3})
	defer fab.Close()
	ep, err := fab.Endpoint(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	g, err := Open(context.Background(), Config{Self: 1, Members: []Member{{ID: 1}}, Endpoint: ep, Mode: TotalOrder}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Sync(context.Background()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Sync in total-order mode = %v, want ErrUnsupported", err)
	}
}
