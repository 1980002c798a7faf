package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease is the etcd lease a Store puts its registration, join request
// and recovery claims on. NewStore grants one and keeps it alive with the
// etcd client; NewStoreOn takes one from its caller, for instance a
// simulation that grants and renews it on a virtual clock. Its methods
// must be safe for concurrent use.
type Lease interface {
	// ID returns the lease's ID in etcd.
	ID() clientv3.LeaseID
	// Done is closed once the lease is lost (it expired, or someone else
	// revoked it) or Revoke has returned. Store.Done returns it.
	Done() <-chan struct{}
	// Err returns nil while Done is open, then why it closed.
	Err() error
	// Revoke stops keeping the lease alive and revokes it in etcd, within
	// ctx; Done is closed when it returns, whether or not it succeeded.
	// Store.Close calls it once. An error wrapping
	// rpctypes.ErrLeaseNotFound means the lease was gone already.
	Revoke(ctx context.Context) error
}

// errLeaseRevoked is what a keptLease's Err reports after Revoke.
var errLeaseRevoked = errors.New("membership: lease revoked")

// keptLease is the lease NewStore grants: a goroutine drains the
// client's keepalive responses until the lease is lost or revoked.
type keptLease struct {
	cli  *clientv3.Client
	id   clientv3.LeaseID
	log  *slog.Logger
	stop context.CancelFunc // stops the keepalive
	// kaDone is closed when the keepalive goroutine has ended.
	kaDone chan struct{}

	done      chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	err       error // set once, before done closes
}

// keepLease grants a lease of ttl seconds and keeps it alive.
func keepLease(ctx context.Context, cli *clientv3.Client, ttl int64, lg *slog.Logger) (*keptLease, error) {
	grant, err := cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("membership: grant lease: %w", err)
	}
	kaCtx, stop := context.WithCancel(context.Background())
	ch, err := cli.KeepAlive(kaCtx, grant.ID)
	if err != nil {
		stop()
		rctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		cli.Revoke(rctx, grant.ID)
		cancel()
		return nil, fmt.Errorf("membership: keep lease alive: %w", err)
	}
	l := &keptLease{
		cli:    cli,
		id:     grant.ID,
		log:    lg.With("lease", fmt.Sprintf("%x", int64(grant.ID))),
		stop:   stop,
		kaDone: make(chan struct{}),
		done:   make(chan struct{}),
	}
	go l.keepAlive(kaCtx, ch)
	return l, nil
}

// keepAlive drains the keepalive responses; the channel closes when the
// lease is gone, the client is closed, or Revoke stopped it.
func (l *keptLease) keepAlive(ctx context.Context, ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(l.kaDone)
	for range ch {
	}
	if ctx.Err() != nil {
		return // Revoke
	}
	err := fmt.Errorf("membership: store lease %x lost", int64(l.id))
	if cerr := l.cli.Ctx().Err(); cerr != nil {
		err = fmt.Errorf("membership: etcd client closed: %w", cerr)
	}
	l.log.Warn("view store lost its lease", "err", err)
	l.finish(err)
}

// finish records why the lease ended and closes done, once.
func (l *keptLease) finish(err error) {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.done)
	})
}

func (l *keptLease) ID() clientv3.LeaseID  { return l.id }
func (l *keptLease) Done() <-chan struct{} { return l.done }

func (l *keptLease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Revoke stops the keepalive and revokes the lease, unless it is lost
// already or the client is closed.
func (l *keptLease) Revoke(ctx context.Context) error {
	lost := l.Err() != nil
	l.finish(errLeaseRevoked)
	l.stop()
	<-l.kaDone
	if lost || l.cli.Ctx().Err() != nil {
		return nil // the lease is gone or going, or there is no client
	}
	_, err := l.cli.Revoke(ctx, l.id)
	return err
}
