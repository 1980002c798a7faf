package etcdsim

import (
	"context"
	"math"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnavailable is what every call returns while the server is down
// (see Server.Down). Through a clientv3.KV it comes back as is: a gRPC
// status error with code Unavailable, as when the client finds no
// endpoint to talk to.
var ErrUnavailable = status.Error(codes.Unavailable, "etcdsim: etcd is unavailable")

// Defaults of Config, those of an etcd server started with no flags.
const (
	// DefaultElectionTimeout is etcd's --election-timeout (1000 ms).
	DefaultElectionTimeout = time.Second
	// DefaultMinLeaseTTL is the shortest TTL etcd grants with its default
	// timing: 1.5 election timeouts, rounded up to whole seconds.
	DefaultMinLeaseTTL = 2
	// DefaultMaxTxnOps is etcd's --max-txn-ops.
	DefaultMaxTxnOps = 128
)

// Config configures a Server. The zero Config is etcd's defaults.
type Config struct {
	// ElectionTimeout is how far leases are extended past a restart (see
	// Server.Up). Zero means DefaultElectionTimeout.
	ElectionTimeout time.Duration
	// MinLeaseTTL, in seconds, is the shortest TTL granted: shorter
	// requests get it. Zero means DefaultMinLeaseTTL.
	MinLeaseTTL int64
	// MaxTxnOps bounds the compares and the operations of each branch of
	// a transaction. Zero means DefaultMaxTxnOps.
	MaxTxnOps int
}

func (c Config) withDefaults() Config {
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.MinLeaseTTL == 0 {
		c.MinLeaseTTL = DefaultMinLeaseTTL
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	return c
}

// Server is a simulated single etcd server (or cluster: nothing tells
// them apart here). It implements etcdserverpb.KVClient; its methods are
// safe for concurrent use, and deterministic when called from one
// goroutine.
type Server struct {
	cfg Config

	mu struct {
		sync.Mutex
		kv   *mvcc
		now  int64 // the virtual clock, in nanoseconds; see Advance
		down bool
		// term counts restarts, like the raft term of a single node that
		// elects itself after each one.
		term   uint64
		leases map[int64]*lease
		// nextExpiry is no later than the earliest deadline of a lease
		// (math.MaxInt64: none), so Advance looks at the leases only
		// once one may be due.
		nextExpiry int64
		// lastLease is the ID of the latest lease granted.
		lastLease int64
	}
}

var _ pb.KVClient = (*Server)(nil)

// New returns a server that is up, empty (at revision 1, like a fresh
// etcd) and at time 0.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg.withDefaults()}
	s.mu.kv = newMVCC()
	s.mu.term = 2 // a fresh single-node etcd is at term 2 once it serves
	s.mu.leases = make(map[int64]*lease)
	s.mu.nextExpiry = math.MaxInt64
	return s
}

// Advance moves the virtual clock to now (in nanoseconds; it never goes
// back) and, unless the server is down, revokes every lease whose
// deadline is now or earlier, in deadline order (ties by ID): each
// revocation deletes the lease's keys in one revision, as etcd's lessor
// does.
func (s *Server) Advance(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.now = max(s.mu.now, now)
	if s.mu.down {
		return // no server, nobody to revoke anything
	}
	s.expireLocked()
}

// Now returns the virtual clock.
func (s *Server) Now() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.now
}

// Down takes the server down: from now until Up every call fails with
// ErrUnavailable, and no lease expires. The data is kept, as etcd keeps
// it on disk.
func (s *Server) Down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.down = true
}

// Up brings the server back at the current time, as etcd restarting on
// its data: every lease, whatever its deadline was, gets a new one of its
// full TTL plus the election timeout from now (etcd's lessor.Promote,
// which a new leader runs; with lease checkpoints disabled, etcd's
// default, remaining TTLs are forgotten). Up on a server that is up does
// nothing.
func (s *Server) Up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.down {
		return
	}
	s.mu.down = false
	s.mu.term++
	for _, l := range s.mu.leases {
		l.deadline = s.mu.now + int64(s.cfg.ElectionTimeout) + l.ttl*int64(time.Second)
	}
}

// IsDown reports whether the server is down.
func (s *Server) IsDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.down
}

// Revision returns the current revision, even while the server is down.
func (s *Server) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.kv.rev
}

// ChangedSince reports whether a key under prefix was put or deleted
// after revision rev: what a watch on prefix from rev+1 would report, so
// that a simulation wakes exactly the members whose watch would fire. It
// answers even while the server is down (a simulation asks it only about
// changes it let happen). For a revision below the last compaction, whose
// history is gone, it reports true, as a watch from there would fail and
// make its owner read afresh.
func (s *Server) ChangedSince(prefix string, rev int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.kv.changedSince(prefix, rev)
}

// ctxError returns, as the gRPC status a client gets, why ctx is done;
// nil while it is live.
func ctxError(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// enterLocked checks that a call may go on: its context is live and
// the server up. REQUIRES: s.mu.
func (s *Server) enterLocked(ctx context.Context) error {
	if err := ctxError(ctx); err != nil {
		return err
	}
	if s.mu.down {
		return ErrUnavailable
	}
	return nil
}

// headerLocked returns a response header at revision rev. REQUIRES:
// s.mu.
func (s *Server) headerLocked(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{Revision: rev, RaftTerm: s.mu.term}
}
