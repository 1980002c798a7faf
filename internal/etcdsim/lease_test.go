package etcdsim

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const sec = int64(time.Second)

// TestLeases runs a script of lease calls, clock moves and puts, and
// checks after each step the revision and the keys left.
func TestLeases(t *testing.T) {
	s, kv := newKV(t)
	ctx := context.Background()
	var l1, l2, l3 clientv3.LeaseID
	grant := func(ttl, want int64, id *clientv3.LeaseID) func() error {
		return func() error {
			got, granted, err := s.Grant(ttl)
			if err == nil && granted != want {
				t.Errorf("Grant(%d) granted %d s, want %d", ttl, granted, want)
			}
			*id = got
			return err
		}
	}
	put := func(key string, id *clientv3.LeaseID) func() error {
		return func() error {
			_, err := kv.Put(ctx, key, "v", clientv3.WithLease(*id))
			return err
		}
	}
	advance := func(now int64) func() error { return func() error { s.Advance(now); return nil } }
	for _, step := range []struct {
		name string
		do   func() error
		err  error  // want
		rev  int64  // want, after
		all  string // want, after
	}{
		{"grant below the minimum", grant(1, 2, &l1), nil, 1, ""},
		{"grant", grant(5, 5, &l2), nil, 1, ""},
		{"grant one without keys", grant(3, 3, &l3), nil, 1, ""},
		{"put on l1", put("a", &l1), nil, 2, "a=v@2/2/1+1"},
		{"put on l1", put("b", &l1), nil, 3, "a=v@2/2/1+1 b=v@3/3/1+1"},
		{"put on l2", put("c", &l2), nil, 4, "a=v@2/2/1+1 b=v@3/3/1+1 c=v@4/4/1+2"},
		{"move b to l2", put("b", &l2), nil, 5, "a=v@2/2/1+1 b=v@3/5/2+2 c=v@4/4/1+2"},
		{"put on an unknown lease", put("x", new(clientv3.LeaseID(99))), rpctypes.ErrLeaseNotFound, 5, "a=v@2/2/1+1 b=v@3/5/2+2 c=v@4/4/1+2"},
		{"just before l1's deadline", advance(2*sec - 1), nil, 5, "a=v@2/2/1+1 b=v@3/5/2+2 c=v@4/4/1+2"},
		{"keep l2 alive", func() error { _, err := s.KeepAlive(l2); return err }, nil, 5, "a=v@2/2/1+1 b=v@3/5/2+2 c=v@4/4/1+2"},
		{"l1 expires with its one key left", advance(2 * sec), nil, 6, "b=v@3/5/2+2 c=v@4/4/1+2"},
		{"put on the expired lease", put("a", &l1), rpctypes.ErrLeaseNotFound, 6, "b=v@3/5/2+2 c=v@4/4/1+2"},
		{"keep the expired lease alive", func() error { _, err := s.KeepAlive(l1); return err }, rpctypes.ErrLeaseNotFound, 6, "b=v@3/5/2+2 c=v@4/4/1+2"},
		{"l3 expires: no key, no revision", advance(3 * sec), nil, 6, "b=v@3/5/2+2 c=v@4/4/1+2"},
		{"l2 renewed at 2s-1 lives until 7s-1", advance(7*sec - 2), nil, 6, "b=v@3/5/2+2 c=v@4/4/1+2"},
		{"l2 expires: its keys go in one revision", advance(100 * sec), nil, 7, ""},
		{"the clock does not go back", advance(0), nil, 7, ""},
	} {
		err := step.do()
		if !errors.Is(err, step.err) {
			t.Fatalf("%s: %v, want %v", step.name, err, step.err)
		}
		if got := s.Revision(); got != step.rev {
			t.Errorf("%s: revision %d, want %d", step.name, got, step.rev)
		}
		if got := all(t, kv); got != step.all {
			t.Errorf("%s: store holds %q, want %q", step.name, got, step.all)
		}
	}
	// etcd answers a keys-only range from its index, without leases.
	id, _, _ := s.Grant(10)
	mustPut(t, kv, "k", "v", clientv3.WithLease(id))
	if got := all(t, kv); got != "k=v@8/8/1+4" {
		t.Errorf("leased key: %q", got)
	}
	if got := all(t, kv, clientv3.WithKeysOnly()); got != "k=@8/8/1" {
		t.Errorf("keys only: %q, want no value and no lease", got)
	}
	if got := s.Now(); got != 100*sec {
		t.Errorf("Now = %d, want %d", got, 100*sec)
	}
}

func TestLeaseRevoke(t *testing.T) {
	s, kv := newKV(t)
	id, _, err := s.Grant(10)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, kv, "a", "v", clientv3.WithLease(id))
	mustPut(t, kv, "b", "v")
	mustPut(t, kv, "c", "v", clientv3.WithLease(id))
	if err := s.Revoke(id); err != nil {
		t.Fatal(err)
	}
	if got := all(t, kv); got != "b=v@3/3/1" || s.Revision() != 5 {
		t.Errorf("after Revoke: %q at revision %d, want b alone at 5", got, s.Revision())
	}
	if err := s.Revoke(id); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("Revoke again: %v", err)
	}
	if _, _, err := s.TimeToLive(id); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("TimeToLive of a revoked lease: %v", err)
	}
	if _, _, err := s.Grant(MaxLeaseTTL + 1); !errors.Is(err, rpctypes.ErrLeaseTTLTooLarge) {
		t.Errorf("Grant of a huge TTL: %v", err)
	}
}

// TestExpiryOrder: leases that expire at one Advance go earliest first,
// one revision each.
func TestExpiryOrder(t *testing.T) {
	s, kv := newKV(t)
	late, _, _ := s.Grant(4)
	early, _, _ := s.Grant(3)
	mustPut(t, kv, "late", "v", clientv3.WithLease(late))
	mustPut(t, kv, "early", "v", clientv3.WithLease(early))
	s.Advance(10 * sec)
	resp, err := kv.Get(context.Background(), "\x00", clientv3.WithFromKey(), clientv3.WithRev(4))
	if err != nil {
		t.Fatal(err)
	}
	if got := kvsString(resp.Kvs); got != "late=v@2/2/1+1" || s.Revision() != 5 {
		t.Errorf("at revision 4: %q, store at %d; want only late left, then its deletion at 5", got, s.Revision())
	}
}

func TestDownUp(t *testing.T) {
	cfg := Config{ElectionTimeout: 100 * time.Millisecond, MinLeaseTTL: 1}
	s := New(cfg)
	kv := clientv3.NewKVFromKVClient(s, nil)
	ctx := context.Background()
	short, _, _ := s.Grant(1)
	long, _, _ := s.Grant(10)
	mustPut(t, kv, "short", "v", clientv3.WithLease(short))
	mustPut(t, kv, "long", "v", clientv3.WithLease(long))
	mustPut(t, kv, "plain", "v")

	s.Advance(sec / 2)
	s.Down()
	if !s.IsDown() {
		t.Fatal("IsDown = false after Down")
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"get", func() error { _, err := kv.Get(ctx, "plain"); return err }},
		{"put", func() error { _, err := kv.Put(ctx, "plain", "w"); return err }},
		{"delete", func() error { _, err := kv.Delete(ctx, "plain"); return err }},
		{"txn", func() error { _, err := kv.Txn(ctx).Then(clientv3.OpGet("plain")).Commit(); return err }},
		{"compact", func() error { _, err := kv.Compact(ctx, 1); return err }},
		{"grant", func() error { _, _, err := s.Grant(5); return err }},
		{"keepalive", func() error { _, err := s.KeepAlive(long); return err }},
		{"revoke", func() error { return s.Revoke(long) }},
	} {
		if err := tc.call(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s while down: %v, want ErrUnavailable", tc.name, err)
		}
	}

	// Far past every deadline: nothing expires while down.
	s.Advance(60 * sec)
	if rem, _, err := s.TimeToLive(long); err != nil || rem != -50*time.Second {
		t.Errorf("TimeToLive(long) while down = %v, %v; want -50s", rem, err)
	}
	s.Up()
	s.Up() // no effect
	if s.IsDown() {
		t.Fatal("IsDown = true after Up")
	}
	// Every lease gets its TTL plus the election timeout from now.
	for _, tc := range []struct {
		id   clientv3.LeaseID
		want time.Duration
	}{
		{short, time.Second + 100*time.Millisecond},
		{long, 10*time.Second + 100*time.Millisecond},
	} {
		if rem, _, err := s.TimeToLive(tc.id); err != nil || rem != tc.want {
			t.Errorf("TimeToLive(%d) after Up = %v, %v; want %v", tc.id, rem, err, tc.want)
		}
	}
	resp, err := kv.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	if got := kvsString(resp.Kvs); got != "long=v@3/3/1+2 plain=v@4/4/1 short=v@2/2/1+1" {
		t.Errorf("after Up: %q", got)
	}
	if resp.Header.RaftTerm != 3 {
		t.Errorf("raft term %d after a restart, want 3", resp.Header.RaftTerm)
	}
	s.Advance(61*sec + 100*int64(time.Millisecond) - 1)
	if got := all(t, kv); got != "long=v@3/3/1+2 plain=v@4/4/1 short=v@2/2/1+1" {
		t.Errorf("just before the extended deadline: %q", got)
	}
	s.Advance(61*sec + 100*int64(time.Millisecond))
	if got := all(t, kv); got != "long=v@3/3/1+2 plain=v@4/4/1" {
		t.Errorf("at the extended deadline: %q", got)
	}
	if _, err := s.KeepAlive(long); err != nil {
		t.Errorf("KeepAlive after Up: %v", err)
	}
}

// TestKeepAliveAfterUp: a lease renewed after a restart expires a TTL
// after the renewal, though Up gave it a later deadline before.
func TestKeepAliveAfterUp(t *testing.T) {
	s := New(Config{ElectionTimeout: 3 * time.Second, MinLeaseTTL: 1})
	kv := clientv3.NewKVFromKVClient(s, nil)
	id, _, _ := s.Grant(2)
	mustPut(t, kv, "k", "v", clientv3.WithLease(id))
	s.Down()
	s.Advance(1 * sec)
	s.Up()             // the deadline: 1s + 3s + 2s
	s.Advance(2 * sec) // looks at the leases: none is due before 6s
	if _, err := s.KeepAlive(id); err != nil {
		t.Fatal(err)
	}
	// Renewed at 2s: due at 4s, before the deadline Up gave it.
	s.Advance(4*sec - 1)
	if got := all(t, kv); got == "" {
		t.Fatal("the lease expired before its deadline")
	}
	s.Advance(4 * sec)
	if got := all(t, kv); got != "" {
		t.Errorf("at its deadline after the renewal: %q, want nothing", got)
	}
}
