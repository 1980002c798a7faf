package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestOpenWaitsForEtcd: a member started while etcd cannot serve it (cut
// off, as when etcd has no leader or is restarting) waits in Open until
// etcd is back, then joins; Open does not fail on it.
func TestOpenWaitsForEtcd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t)
		nodes := c.openAll(2)

		c.sim.setCut(3, true)
		type opened struct {
			n   *vsNode
			err error
		}
		res := make(chan opened, 1)
		go func() {
			n, err := c.open(3, 2)
			res <- opened{n, err}
		}()
		// Etcd stays out of reach for longer than every lease and every
		// pause between two tries.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("Open returned while etcd was out of reach: %v", r.err)
		default:
		}
		c.sim.setCut(3, false)
		r := <-res
		if r.err != nil {
			t.Fatalf("Open after etcd came back: %v", r.err)
		}
		all := append(nodes, r.n)
		c.waitMembers(3, all...)
	})
}

// TestRetryableEtcd: only a refusal of the request itself is final.
func TestRetryableEtcd(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrGRPCNoLeader, true},
		{rpctypes.ErrLeaseNotFound, true},
		{fmt.Errorf("membership: register: %w", rpctypes.ErrTimeout), true},
		{context.DeadlineExceeded, true},
		{errors.New("connection refused"), true},
		{rpctypes.ErrPermissionDenied, false},
		{rpctypes.ErrGRPCInvalidAuthToken, false},
		{fmt.Errorf("membership: register: %w", rpctypes.ErrAuthFailed), false},
		{rpctypes.ErrKeyNotFound, false},
	} {
		if got := retryableEtcd(tc.err); got != tc.want {
			t.Errorf("retryableEtcd(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
