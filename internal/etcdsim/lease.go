package etcdsim

import (
	"cmp"
	"math"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxLeaseTTL is the longest TTL etcd grants, in seconds.
const MaxLeaseTTL = 9_000_000_000

// The lease calls are plain methods, not a gRPC client: their errors
// are those a clientv3.Lease returns (rpctypes.ErrLeaseNotFound, not the
// gRPC status error etcd sends).

// lease is a granted lease. Its keys are found by their Lease field.
type lease struct {
	id  int64
	ttl int64 // seconds, as granted
	// deadline is when the lease expires, on the virtual clock.
	deadline int64
}

// Grant grants a lease of ttl seconds (at least Config.MinLeaseTTL) that
// expires unless kept alive, and returns its ID and the TTL granted. IDs
// are 1, 2, 3… in the order of the grants. A ttl above MaxLeaseTTL fails
// with rpctypes.ErrLeaseTTLTooLarge.
func (s *Server) Grant(ttl int64) (clientv3.LeaseID, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.down {
		return 0, 0, ErrUnavailable
	}
	if ttl > MaxLeaseTTL {
		return 0, 0, rpctypes.ErrLeaseTTLTooLarge
	}
	ttl = max(ttl, s.cfg.MinLeaseTTL)
	s.mu.lastLease++
	l := &lease{id: s.mu.lastLease, ttl: ttl, deadline: s.mu.now + ttl*int64(time.Second)}
	s.mu.leases[l.id] = l
	s.mu.nextExpiry = min(s.mu.nextExpiry, l.deadline)
	return clientv3.LeaseID(l.id), ttl, nil
}

// KeepAlive renews lease id, which then expires a full TTL from now, and
// returns the TTL. An unknown (never granted, expired or revoked) lease
// fails with rpctypes.ErrLeaseNotFound.
func (s *Server) KeepAlive(id clientv3.LeaseID) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.down {
		return 0, ErrUnavailable
	}
	l, ok := s.mu.leases[int64(id)]
	if !ok {
		return 0, rpctypes.ErrLeaseNotFound
	}
	l.deadline = s.mu.now + l.ttl*int64(time.Second)
	// Earlier than the deadline Up gave it, perhaps.
	s.mu.nextExpiry = min(s.mu.nextExpiry, l.deadline)
	return l.ttl, nil
}

// Revoke revokes lease id at once, deleting its keys in one revision. An
// unknown lease fails with rpctypes.ErrLeaseNotFound.
func (s *Server) Revoke(id clientv3.LeaseID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.down {
		return ErrUnavailable
	}
	if _, ok := s.mu.leases[int64(id)]; !ok {
		return rpctypes.ErrLeaseNotFound
	}
	s.revokeLocked(int64(id))
	return nil
}

// TimeToLive returns the remaining time of lease id on the virtual clock
// and its granted TTL in seconds. An unknown lease fails with
// rpctypes.ErrLeaseNotFound. Unlike the other calls it answers while
// the server is down, with the deadline Up will replace.
func (s *Server) TimeToLive(id clientv3.LeaseID) (remaining time.Duration, ttl int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.mu.leases[int64(id)]
	if !ok {
		return 0, 0, rpctypes.ErrLeaseNotFound
	}
	return time.Duration(l.deadline - s.mu.now), l.ttl, nil
}

// expireLocked revokes every lease whose deadline has come, earliest
// first. REQUIRES: s.mu.
func (s *Server) expireLocked() {
	if s.mu.now < s.mu.nextExpiry {
		return
	}
	// Grant and KeepAlive lower nextExpiry to the deadlines they set, and
	// Up only moves deadlines later, so the earliest deadline of the
	// leases not due is the next expiry.
	var due []*lease
	s.mu.nextExpiry = math.MaxInt64
	for _, l := range s.mu.leases {
		if l.deadline <= s.mu.now {
			due = append(due, l)
		} else {
			s.mu.nextExpiry = min(s.mu.nextExpiry, l.deadline)
		}
	}
	slices.SortFunc(due, func(a, b *lease) int {
		return cmp.Or(cmp.Compare(a.deadline, b.deadline), cmp.Compare(a.id, b.id))
	})
	for _, l := range due {
		s.revokeLocked(l.id)
	}
}

// revokeLocked forgets lease id and deletes its keys in key order, in
// one write (no revision if it had none). REQUIRES: s.mu.
func (s *Server) revokeLocked(id int64) {
	delete(s.mu.leases, id)
	kv := s.mu.kv
	for _, k := range kv.leased(id) {
		kv.deleteRange([]byte(k), nil)
	}
	kv.endWrite()
}
