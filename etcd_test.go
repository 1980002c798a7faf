package convoy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/membership"
)

// startEtcd starts a development etcd for t, stopped when t ends.
func startEtcd(t *testing.T) *etcddev.Server {
	t.Helper()
	srv, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// openAlone opens a view-managed group of one member over etcd e, sends
// a message through it and waits for its delivery.
func openAlone(ctx context.Context, e *EtcdConfig) (*Group, error) {
	g, err := Open(ctx, Config{Self: 1, Addr: "127.0.0.1:0", Etcd: e}, nil)
	if err != nil {
		return nil, err
	}
	if _, err := g.Send(ctx, []byte("hello"), WaitDelivered()); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// With authentication on in etcd, a member that logs in with the right
// password opens its group; one with a wrong password, or none, is
// refused at Open, with etcd's error.
func TestEtcdLogin(t *testing.T) {
	srv := startEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := srv.EnableAuth(ctx, "secret"); err != nil {
		t.Fatal(err)
	}
	g, err := openAlone(ctx, &EtcdConfig{Endpoints: srv.Endpoints(), Username: etcddev.RootUser, Password: "secret"})
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	g.Close()

	for _, tc := range []struct {
		name               string
		username, password string
		want               error
	}{
		{"wrong password", etcddev.RootUser, "wrong", rpctypes.ErrAuthFailed},
		{"anonymous", "", "", rpctypes.ErrUserEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Open(ctx, Config{Self: 2, Addr: "127.0.0.1:0",
				Etcd: &EtcdConfig{Endpoints: srv.Endpoints(), Username: tc.username, Password: tc.password}}, nil)
			if err == nil {
				g.Close()
				t.Fatal("Open succeeded")
			}
			t.Logf("Open: %v", err)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "etcd") {
				t.Fatalf("Open: %v, want an error about etcd wrapping %v", err, tc.want)
			}
		})
	}
}

// A group given the application's etcd client works through it (it has
// no endpoints of its own) and leaves it open when it closes.
func TestEtcdClientOfTheApplication(t *testing.T) {
	srv := startEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "/app-client/"
	g, err := openAlone(ctx, &EtcdConfig{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := g.View(); !ok || len(v.Members) != 1 {
		t.Fatalf("view %+v (taking part: %v), want one of a single member", v, ok)
	}
	keys, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if keys.Count == 0 {
		t.Fatalf("no keys under %s: the group did not use the client's etcd", prefix)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cli.Ctx().Err(); err != nil {
		t.Fatalf("the client is closed after Close: %v", err)
	}
	if _, err := cli.Put(ctx, "/after-close", "x"); err != nil {
		t.Fatalf("the client after Close: %v", err)
	}
}

// TestEtcdMemberRoles: with etcd's access control on and each member
// logged in as a user of its own whose role holds
// membership.MemberPermissions, a group of three forms, delivers, and
// changes views (a member leaves, and asks to join again); and one
// member's credentials can neither delete nor replace another's
// registration or topic requests, while they can write its own.
func TestEtcdMemberRoles(t *testing.T) {
	srv := startEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := srv.EnableAuth(ctx, "secret"); err != nil {
		t.Fatal(err)
	}
	root, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	const prefix = "/roles/"
	user := func(id uint64) string { return fmt.Sprintf("member-%d", id) }
	for id := uint64(1); id <= 3; id++ {
		role := user(id)
		if _, err := root.RoleAdd(ctx, role); err != nil {
			t.Fatal(err)
		}
		for _, p := range membership.MemberPermissions(prefix, id) {
			perm := clientv3.PermissionType(clientv3.PermRead)
			if p.Write {
				perm = clientv3.PermissionType(clientv3.PermReadWrite)
			}
			if _, err := root.RoleGrantPermission(ctx, role, p.Key, p.RangeEnd, perm); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := root.UserAdd(ctx, user(id), "pw"); err != nil {
			t.Fatal(err)
		}
		if _, err := root.UserGrantRole(ctx, user(id), role); err != nil {
			t.Fatal(err)
		}
	}
	etcdOf := func(id uint64) *EtcdConfig {
		return &EtcdConfig{Endpoints: srv.Endpoints(), Prefix: prefix, Username: user(id), Password: "pw"}
	}
	open := func(id uint64, initial int) (*Group, *observer, error) {
		obs := newObserver(t)
		g, err := Open(ctx, Config{Self: NodeID(id), Addr: "127.0.0.1:0", Etcd: etcdOf(id), InitialMembers: initial,
			MeterProvider: obs.mp, OnView: obs.onView}, obs.deliver)
		return g, obs, err
	}
	groups := make([]*Group, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range groups {
		wg.Go(func() { groups[i], _, errs[i] = open(uint64(i+1), 3) })
	}
	wg.Wait()
	for i, g := range groups {
		if g != nil {
			defer g.Close()
		}
		if errs[i] != nil {
			t.Fatalf("member %d: %v", i+1, errs[i])
		}
	}
	if _, err := groups[0].Send(ctx, []byte("hello"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	// Member 3 leaves (the leader deletes its leave request as the view
	// changes), and joins again.
	if err := groups[2].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	groups[2].Close()
	again, _, err := open(3, 3)
	if err != nil {
		t.Fatalf("member 3 joining again: %v", err)
	}
	defer again.Close()
	if _, err := again.Send(ctx, []byte("back"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	if v, ok := again.View(); !ok || len(v.Members) != 3 {
		t.Fatalf("view %+v after member 3 joined again, want three members", v)
	}

	cli2, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Username: user(2), Password: "pw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	for _, op := range []struct {
		what string
		do   func() error
	}{
		{"delete member 1's registration", func() error { _, err := cli2.Delete(ctx, prefix+"members/1"); return err }},
		{"replace member 1's registration", func() error { _, err := cli2.Put(ctx, prefix+"members/1", "{}"); return err }},
		{"write a topic request of member 1's", func() error { _, err := cli2.Put(ctx, prefix+"topics/1/74", "{}"); return err }},
		{"delete member 1's topic requests", func() error {
			_, err := cli2.Delete(ctx, prefix+"topics/1/", clientv3.WithPrefix())
			return err
		}},
	} {
		if err := op.do(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("member 2's credentials: %s: %v, want %v", op.what, err, rpctypes.ErrPermissionDenied)
		}
	}
	if _, err := cli2.Put(ctx, prefix+"topics/2/74", "{}"); err != nil {
		t.Errorf("member 2's credentials: write its own topic request: %v", err)
	}
	if _, err := cli2.Delete(ctx, prefix+"topics/2/74"); err != nil {
		t.Errorf("member 2's credentials: delete its own topic request: %v", err)
	}
}
