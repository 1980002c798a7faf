package convoy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/etcddev"
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
