package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/convoy-gcs/convoy/internal/etcdsim"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/rdma"
)

// simEtcd is a simulated etcd shared by the members of a simulated group
// (groupsim_test.go): an etcdsim.Server whose lease clock follows the
// test's clock (a synctest bubble's), with watches that wake on every
// change, outages of the whole cluster (Down, Up), and members cut off
// from it one by one.
type simEtcd struct {
	srv    *etcdsim.Server
	prefix string
	ttl    int64 // seconds

	mu struct {
		sync.Mutex
		// changed is closed, and replaced, when etcd changes.
		changed chan struct{}
		rev     int64
		// cut holds the members whose calls fail.
		cut map[NodeID]bool
	}
	// checkPut, if set before the members start, is called with every
	// put a member makes, before it is made.
	checkPut func(id NodeID, key, value []byte)
	// refusePut, if set before the members start, is asked of every put
	// a member makes: true fails it as if etcd were out of reach.
	refusePut func(id NodeID, key []byte) bool
}

// newSimCluster returns an empty cluster on a simulated etcd (leases of
// 2 s) and an in-memory fabric, for a test in a synctest bubble; the
// test's cleanup closes the members still open, the fabric and etcd.
func newSimCluster(t *testing.T) *vsCluster {
	ctx, cancel := context.WithCancel(context.Background())
	sim := newSimEtcd("/sim/", 2*time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sim.run(ctx, 10*time.Millisecond)
	}()
	c := &vsCluster{t: t, leaseTTL: 2 * time.Second, log: testLogger(), sim: sim, prefix: "/sim/",
		fabric: rdma.NewMemFabric(rdma.MemOptions{Seed: 1}), nodes: make(map[NodeID]*vsNode)}
	t.Cleanup(func() {
		for _, n := range c.live() {
			n.g.Close()
		}
		c.fabric.Close()
		cancel()
		<-done
	})
	return c
}

func newSimEtcd(prefix string, ttl time.Duration) *simEtcd {
	s := &simEtcd{srv: etcdsim.New(etcdsim.Config{}), prefix: prefix, ttl: int64(ttl / time.Second)}
	// The lease clock starts now: a lease granted before run's first tick
	// would otherwise have expired at it.
	s.srv.Advance(time.Now().UnixNano())
	s.mu.changed = make(chan struct{})
	s.mu.cut = make(map[NodeID]bool)
	return s
}

// run moves etcd's lease clock with the test's, every tick, until ctx
// ends.
func (s *simEtcd) run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.srv.Advance(now.UnixNano())
			s.poke()
		}
	}
}

// poke wakes the watches if etcd changed.
func (s *simEtcd) poke() {
	rev := s.srv.Revision()
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev == s.mu.rev {
		return
	}
	s.mu.rev = rev
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

func (s *simEtcd) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.changed
}

// setCut cuts member id off etcd, or reconnects it.
func (s *simEtcd) setCut(id NodeID, cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.cut[id] = cut
}

func (s *simEtcd) isCut(id NodeID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.cut[id]
}

// member returns member id's view of etcd.
func (s *simEtcd) member(id NodeID) *simEtcdMember {
	return &simEtcdMember{s: s, id: id}
}

// simEtcdMember is one member's etcdBackend on a simEtcd.
type simEtcdMember struct {
	s  *simEtcd
	id NodeID

	mu        sync.Mutex
	abandoned bool
	leases    []*simLease
	wg        sync.WaitGroup
}

var errCutOff = errors.New("simulated etcd: member cut off")

func (b *simEtcdMember) newStore(ctx context.Context) (*membership.Store, error) {
	if b.s.isCut(b.id) {
		return nil, etcdsim.ErrUnavailable
	}
	cl, err := b.s.srv.GrantClientLease(b.s.ttl)
	if err != nil {
		return nil, err
	}
	l := &simLease{ClientLease: cl, b: b, stop: make(chan struct{})}
	store, err := membership.NewStoreOn(clientv3.NewKVFromKVClient(simKV{b}, nil), l, membership.StoreConfig{Prefix: b.s.prefix})
	if err != nil {
		cl.Lose(err)
		return nil, err
	}
	b.mu.Lock()
	b.leases = append(b.leases, l)
	b.mu.Unlock()
	b.wg.Add(1)
	go l.keepAlive()
	return store, nil
}

func (b *simEtcdMember) watch(ctx context.Context, _ *membership.Store) <-chan membership.Change {
	out := make(chan membership.Change, 1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(out)
		for {
			ch := b.s.changed()
			select {
			case out <- membership.Change{Revision: b.s.srv.Revision()}:
			default:
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (b *simEtcdMember) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
}

func (b *simEtcdMember) close() {
	b.mu.Lock()
	for _, l := range b.leases {
		l.halt()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// simLease is a member's hold on its lease: a goroutine renews it a
// third of a TTL apart while the member reaches etcd.
type simLease struct {
	*etcdsim.ClientLease
	b        *simEtcdMember
	stop     chan struct{}
	stopOnce sync.Once
}

func (l *simLease) halt() { l.stopOnce.Do(func() { close(l.stop) }) }

func (l *simLease) keepAlive() {
	defer l.b.wg.Done()
	t := time.NewTicker(time.Duration(l.b.s.ttl) * time.Second / 3)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-l.Done():
			return
		case <-t.C:
		}
		if l.b.s.isCut(l.b.id) {
			// clientv3 gives a lease up a TTL after its last renewal.
			if time.Since(lastOK) >= time.Duration(l.b.s.ttl)*time.Second {
				l.Lose(errCutOff)
				return
			}
			continue
		}
		if err := l.KeepAlive(); err == nil {
			lastOK = time.Now()
		}
	}
}

// Revoke revokes the lease, unless the member was abandoned (killed):
// its lease is then left to expire.
func (l *simLease) Revoke(ctx context.Context) error {
	l.halt()
	l.b.mu.Lock()
	abandoned := l.b.abandoned
	l.b.mu.Unlock()
	if abandoned || l.b.s.isCut(l.b.id) {
		l.Lose(errCutOff)
		return nil
	}
	err := l.ClientLease.Revoke(ctx)
	l.b.s.poke()
	return err
}

// simKV is a member's etcd KV: calls fail while the member is cut off,
// and writes wake the watches.
type simKV struct{ b *simEtcdMember }

var _ pb.KVClient = simKV{}

func (k simKV) check() error {
	if k.b.s.isCut(k.b.id) {
		return etcdsim.ErrUnavailable
	}
	return nil
}

func (k simKV) Range(ctx context.Context, r *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	return k.b.s.srv.Range(ctx, r, opts...)
}

func (k simKV) RangeStream(ctx context.Context, r *pb.RangeRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	return k.b.s.srv.RangeStream(ctx, r, opts...)
}

func (k simKV) Put(ctx context.Context, r *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if k.b.s.refusePut != nil && k.b.s.refusePut(k.b.id, r.Key) {
		return nil, etcdsim.ErrUnavailable
	}
	if k.b.s.checkPut != nil {
		k.b.s.checkPut(k.b.id, r.Key, r.Value)
	}
	defer k.b.s.poke()
	return k.b.s.srv.Put(ctx, r, opts...)
}

func (k simKV) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	defer k.b.s.poke()
	return k.b.s.srv.DeleteRange(ctx, r, opts...)
}

func (k simKV) Txn(ctx context.Context, r *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	defer k.b.s.poke()
	return k.b.s.srv.Txn(ctx, r, opts...)
}

func (k simKV) Compact(ctx context.Context, r *pb.CompactionRequest, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	return k.b.s.srv.Compact(ctx, r, opts...)
}
