package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLeaseRevoked is what ClientLease.Err reports after Revoke.
var ErrLeaseRevoked = errors.New("etcdsim: lease revoked")

// ClientLease is a client's hold on a lease of a Server, as clientv3's
// keepalive loop sees it, for a simulation to drive: it renews only when
// told (KeepAlive), and gives the lease up, closing Done, when the server
// says it is gone, or when a renewal finds the server down a full TTL
// after the last one that worked (clientv3 gives up then, even though
// etcd will extend the lease when it comes back). It has the methods of
// membership.Lease. Its methods are safe for concurrent use.
type ClientLease struct {
	srv *Server
	id  clientv3.LeaseID
	ttl int64 // seconds

	done chan struct{}
	mu   struct {
		sync.Mutex
		deadline int64 // the client's: a TTL after the last renewal
		err      error
	}
}

// GrantClientLease grants a lease of ttl seconds, as Grant does, and
// returns a client's hold on it.
func (s *Server) GrantClientLease(ttl int64) (*ClientLease, error) {
	id, granted, err := s.Grant(ttl)
	if err != nil {
		return nil, err
	}
	l := &ClientLease{srv: s, id: id, ttl: granted, done: make(chan struct{})}
	l.mu.deadline = s.Now() + granted*int64(time.Second)
	return l, nil
}

// ID returns the lease's ID.
func (l *ClientLease) ID() clientv3.LeaseID { return l.id }

// Done is closed once the client gave the lease up, or Revoke returned.
func (l *ClientLease) Done() <-chan struct{} { return l.done }

// Err returns nil while Done is open, then why it closed.
func (l *ClientLease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// KeepAlive is one renewal at the server's current time. If the server
// no longer knows the lease, or is down a TTL or more after the last
// renewal that worked, the client gives the lease up. A lease given up
// stays so, and KeepAlive then returns its Err.
func (l *ClientLease) KeepAlive() error {
	if err := l.Err(); err != nil {
		return err
	}
	_, err := l.srv.KeepAlive(l.id)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.mu.deadline = l.srv.Now() + l.ttl*int64(time.Second)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.loseLocked(fmt.Errorf("etcdsim: lease %d lost: %w", l.id, err))
	case errors.Is(err, ErrUnavailable) && l.srv.Now() >= l.mu.deadline:
		l.loseLocked(fmt.Errorf("etcdsim: lease %d: no renewal for its TTL: %w", l.id, err))
	}
	return err
}

// Lose gives the lease up, with err as the reason, if it is still held:
// for a simulation whose client cannot reach the server for a TTL.
func (l *ClientLease) Lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseLocked(err)
}

// REQUIRES: l.mu.
func (l *ClientLease) loseLocked(err error) {
	if l.mu.err == nil {
		l.mu.err = err
		close(l.done)
	}
}

// Revoke revokes the lease on the server, unless the client gave it up
// already, and gives it up; Done is closed when it returns. An error
// (ErrUnavailable, or rpctypes.ErrLeaseNotFound if the lease was gone)
// says the server did not revoke it. ctx is not used: the call takes no
// time.
func (l *ClientLease) Revoke(context.Context) error {
	var err error
	if l.Err() == nil {
		err = l.srv.Revoke(l.id)
	}
	l.Lose(ErrLeaseRevoked)
	return err
}
