package membership

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/internal/etcdsim"
)

// Tests of a store on a simulated etcd whose clock and outages the test
// drives, as a whole-group simulation does.

const sec = int64(time.Second)

func TestNewStoreOn(t *testing.T) {
	sim := etcdsim.New(etcdsim.Config{})
	kv := clientv3.NewKVFromKVClient(sim, nil)
	lease, err := sim.GrantClientLease(5)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		kv    clientv3.KV
		lease Lease
		cfg   StoreConfig
		ok    bool
	}{
		{"defaults", kv, lease, StoreConfig{}, true},
		{"no kv", nil, lease, StoreConfig{}, false},
		{"no lease", kv, nil, StoreConfig{}, false},
		{"a client", kv, lease, StoreConfig{Client: new(clientv3.Client)}, false},
		{"a lease TTL", kv, lease, StoreConfig{LeaseTTL: time.Second}, false},
		{"prefix without slash", kv, lease, StoreConfig{Prefix: "/x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewStoreOn(tc.kv, tc.lease, tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewStoreOn: %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				return
			}
			if _, ok := <-s.Watch(testCtx(t)); ok {
				t.Error("Watch sent a change")
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			if !errors.Is(s.Err(), ErrStoreClosed) {
				t.Errorf("Err after Close = %v", s.Err())
			}
			select {
			case <-s.Done():
			default:
				t.Error("Done open after Close")
			}
		})
	}
}

// TestSimLease keeps a store's lease alive on the virtual clock, then
// lets it expire.
func TestSimLease(t *testing.T) {
	sim := etcdsim.New(etcdsim.Config{})
	s, lease := newSimStore(t, sim, 5*time.Second, "")
	watcher, _ := newSimStore(t, sim, time.Hour, "")
	ctx := testCtx(t)
	registered := func() bool {
		t.Helper()
		st, err := watcher.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := st.Registered[1]
		return ok
	}
	if err := s.Register(ctx, member(1)); err != nil {
		t.Fatal(err)
	}
	sim.Advance(4 * sec)
	if err := lease.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	sim.Advance(9*sec - 1)
	if !registered() {
		t.Fatal("registration gone before its renewed lease expired")
	}
	sim.Advance(9 * sec)
	if registered() {
		t.Fatal("registration outlived its lease")
	}
	// The store learns it at its client's next renewal.
	if s.Err() != nil {
		t.Fatalf("Err = %v before the client learned anything", s.Err())
	}
	if err := lease.KeepAlive(); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("KeepAlive of an expired lease: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done open after the lease was lost")
	}
	if err := s.Err(); err == nil || errors.Is(err, ErrStoreClosed) {
		t.Errorf("Err = %v, want a lost lease", err)
	}
	if err := s.RequestJoin(ctx, member(1)); err == nil {
		t.Error("RequestJoin without a lease succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after the lease was lost: %v", err)
	}
	if err := s.Err(); errors.Is(err, ErrStoreClosed) {
		t.Errorf("Err after Close = %v, want still the lost lease", err)
	}
}

// TestSimOutage takes etcd down under a store: a short outage costs
// nothing; after one longer than the lease the client gives its lease
// up, etcd brings it back extended, and the stale registration stays
// until that runs out, while a new store registers again.
func TestSimOutage(t *testing.T) {
	sim := etcdsim.New(etcdsim.Config{})
	s, lease := newSimStore(t, sim, 5*time.Second, "")
	ctx := testCtx(t)
	v1 := firstView(1, 2)
	for _, err := range []error{s.Bootstrap(ctx, v1), s.Register(ctx, member(1))} {
		if err != nil {
			t.Fatal(err)
		}
	}

	// Down for 3 s: calls fail, the lease outlives it.
	sim.Down()
	sim.Advance(3 * sec)
	if _, err := s.Current(ctx); !errors.Is(err, etcdsim.ErrUnavailable) {
		t.Fatalf("Current with etcd down: %v, want ErrUnavailable", err)
	}
	if err := lease.KeepAlive(); !errors.Is(err, etcdsim.ErrUnavailable) {
		t.Fatalf("KeepAlive with etcd down: %v", err)
	}
	sim.Up()
	if err := lease.KeepAlive(); err != nil || s.Err() != nil {
		t.Fatalf("after a short outage: KeepAlive %v, Err %v", err, s.Err())
	}

	// Down for 60 s: a renewal a TTL after the last one gives up.
	sim.Down()
	sim.Advance(8 * sec)
	lease.KeepAlive()
	select {
	case <-s.Done():
	default:
		t.Fatal("store kept its lease through an outage longer than it")
	}
	sim.Advance(63 * sec)
	sim.Up()
	// etcd extended the lease to 63 + 1 (election timeout) + 5 s.
	s2, _ := newSimStore(t, sim, time.Hour, "")
	st, err := s2.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current.Epoch != 1 || st.Registered[1] != member(1) {
		t.Fatalf("after the outage: view %d, registered %v; want view 1 and the stale registration", st.Current.Epoch, st.Registered)
	}
	if err := s2.Register(ctx, member(1)); err != nil { // now on s2's lease
		t.Fatal(err)
	}
	sim.Advance(69 * sec)
	if st, err = s2.State(ctx); err != nil || st.Registered[1] != member(1) {
		t.Fatalf("after the old lease expired: %v, %v; want the new registration", st.Registered, err)
	}
}
