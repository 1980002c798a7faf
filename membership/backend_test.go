package membership

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/internal/etcdsim"
)

// testBackend is an etcd that store tests run against: a real one
// (etcddev, in this process) or a simulated one (etcdsim, with its
// clock standing still, so that no lease expires).
type testBackend struct {
	// kv reads and writes the backend directly.
	kv clientv3.KV
	// open returns a new store, closed when t ends, with a lease of ttl
	// (0: DefaultLeaseTTL) under prefix ("": DefaultPrefix); on the real
	// etcd, on a client of its own if ownClient is set.
	open func(t *testing.T, ttl time.Duration, prefix string, ownClient bool) *Store
}

// eachBackend runs f as a subtest on a real etcd, then on a simulated
// one: the store must behave the same on both.
func eachBackend(t *testing.T, f func(t *testing.T, b *testBackend)) {
	t.Run("etcd", func(t *testing.T) { f(t, etcdBackend(t)) })
	t.Run("sim", func(t *testing.T) { f(t, simBackend(t)) })
}

func etcdBackend(t *testing.T) *testBackend {
	srv, cli := testEtcd(t)
	return &testBackend{
		kv: cli,
		open: func(t *testing.T, ttl time.Duration, prefix string, ownClient bool) *Store {
			t.Helper()
			c := cli
			if ownClient {
				var err error
				if c, err = srv.Client(testCtx(t)); err != nil {
					t.Fatal(err)
				}
			}
			s, err := NewStore(testCtx(t), StoreConfig{Client: c, Prefix: prefix, LeaseTTL: ttl, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

func simBackend(t *testing.T) *testBackend {
	sim := etcdsim.New(etcdsim.Config{})
	return &testBackend{
		kv: clientv3.NewKVFromKVClient(sim, nil),
		open: func(t *testing.T, ttl time.Duration, prefix string, _ bool) *Store {
			t.Helper()
			s, _ := newSimStore(t, sim, ttl, prefix)
			return s
		},
	}
}

// newSimStore returns a store on sim, closed when t ends, as a
// simulation makes one: with a lease of ttl (0: DefaultLeaseTTL) that the
// caller keeps alive on sim's clock.
func newSimStore(t *testing.T, sim *etcdsim.Server, ttl time.Duration, prefix string) (*Store, *etcdsim.ClientLease) {
	t.Helper()
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	lease, err := sim.GrantClientLease(int64((ttl + time.Second - 1) / time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStoreOn(clientv3.NewKVFromKVClient(sim, nil), lease, StoreConfig{Prefix: prefix, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lease
}

var prefixes atomic.Int64

// store returns a new store with the default lease and prefix.
func (b *testBackend) store(t *testing.T) *Store {
	t.Helper()
	return b.open(t, 0, "", false)
}

// prefixStore returns a new store under a prefix of its own, so that
// subtests can share one etcd.
func (b *testBackend) prefixStore(t *testing.T) *Store {
	t.Helper()
	return b.open(t, 0, fmt.Sprintf("/test%d/", prefixes.Add(1)), false)
}
