package paxos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/rdma"
)

// cluster runs members of the store in this process: one embedded etcd,
// the in-memory transport, a durable log each, and an HTTP server each.
type cluster struct {
	t      *testing.T
	etcd   *etcddev.Server
	fabric *rdma.MemFabric
	prefix string
	// hc is the clients' HTTP client; its idle connections are closed at
	// the end.
	hc *http.Client

	mu      sync.Mutex
	members map[convoy.NodeID]*member
}

// member is one running member.
type member struct {
	id   convoy.NodeID
	dir  string
	node *Node
	srv  *httptest.Server
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv, err := etcddev.Start(context.Background(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		t: t, etcd: srv, fabric: rdma.NewMemFabric(rdma.MemOptions{Seed: 1}),
		prefix: "/" + strings.ReplaceAll(t.Name(), "/", "_") + "/",
		hc:     &http.Client{Transport: &http.Transport{}}, members: make(map[convoy.NodeID]*member),
	}
	t.Cleanup(func() {
		c.mu.Lock()
		members := c.members
		c.members = nil
		c.mu.Unlock()
		for _, m := range members {
			m.node.Close()
			m.srv.Close()
		}
		c.hc.CloseIdleConnections()
		c.fabric.Close()
		c.etcd.Close()
	})
	return c
}

// open starts member id, in a group founded by initial members, on the
// durable directory dir ("": a new one).
func (c *cluster) open(id convoy.NodeID, initial int, dir string) (*member, error) {
	ep, err := c.fabric.Endpoint(id)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		dir = c.t.TempDir()
	}
	n, err := Open(context.Background(), convoy.Config{
		Self: id, Endpoint: ep, InitialMembers: initial,
		Etcd:           &convoy.EtcdConfig{Endpoints: c.etcd.Endpoints(), Prefix: c.prefix, LeaseTTL: 2 * time.Second},
		Durable:        &convoy.DurableConfig{Dir: dir, RestartWait: 200 * time.Millisecond},
		BeaconInterval: time.Millisecond,
		// Members, etcd and the clients share two cores in tests: the
		// timeout leaves room for scheduling delays.
		HeartbeatInterval: 10 * time.Millisecond, SuspectTimeout: 200 * time.Millisecond,
	}, Options{})
	if err != nil {
		ep.Close()
		return nil, err
	}
	m := &member{id: id, dir: dir, node: n, srv: httptest.NewServer(n.Handler())}
	c.mu.Lock()
	c.members[id] = m
	c.mu.Unlock()
	return m, nil
}

// start opens members 1..n as the group's founders.
func (c *cluster) start(n int) {
	c.t.Helper()
	c.startOn(make([]string, n))
}

// startOn opens members 1..len(dirs) at once, member i+1 on dirs[i] (""
// for a new directory).
func (c *cluster) startOn(dirs []string) {
	c.t.Helper()
	n := len(dirs)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.open(convoy.NodeID(i+1), n, dirs[i])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

// crash stops member id at once: its links break, its node closes (the
// requests it holds end with 503), and its server goes away.
func (c *cluster) crash(id convoy.NodeID) *member {
	c.mu.Lock()
	m := c.members[id]
	delete(c.members, id)
	c.mu.Unlock()
	c.fabric.Crash(id)
	m.node.Close()
	m.srv.Close()
	return m
}

func (c *cluster) member(id convoy.NodeID) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id]
}

// urls returns the base URLs of the given members, in the order given.
func (c *cluster) urls(ids ...convoy.NodeID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, c.member(id).srv.URL)
	}
	return out
}

// client returns a client of the given members, trying them in order.
func (c *cluster) client(urls []string) *client.Client {
	return client.New(urls, client.WithHTTPClient(c.hc), client.WithAttemptTimeout(5*time.Second))
}

// streamClient is client with streams (client.WithStreams), closed when
// the test ends.
func (c *cluster) streamClient(urls []string) *client.Client {
	cl := client.New(urls, client.WithHTTPClient(c.hc), client.WithAttemptTimeout(5*time.Second), client.WithStreams())
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// waitSameState waits until the given members hold the same state — the
// same data, applied index and kept results — and returns it.
func (c *cluster) waitSameState(ids ...convoy.NodeID) string {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		dumps := make([]string, len(ids))
		same := true
		for i, id := range ids {
			dumps[i] = c.member(id).node.state.dump()
			same = same && dumps[i] == dumps[0]
		}
		if same {
			return dumps[0]
		}
		if time.Now().After(deadline) {
			for i := range dumps {
				if dumps[i] != dumps[0] {
					c.t.Fatalf("members %d and %d hold different states: %s", ids[0], ids[i], firstDiff(dumps[0], dumps[i]))
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitServing waits until every given member takes part in a view with
// want members.
func (c *cluster) waitServing(want int, ids ...convoy.NodeID) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			s := c.member(id).node.Status()
			if s.Serving && len(s.Members) == want {
				// The library's account comes along, read after the view
				// (a view change may have gone further since).
				if g := s.Group; g == nil || g.Self != id || g.Epoch != 0 && g.Epoch < s.Epoch || g.Phase == "" {
					c.t.Fatalf("member %d: status %+v: the group's part is %+v", id, s, g)
				}
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("member %d: status %+v, want serving in a view of %d", id, s, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func idsUpTo(n int) []convoy.NodeID {
	out := make([]convoy.NodeID, n)
	for i := range out {
		out[i] = convoy.NodeID(i + 1)
	}
	return out
}
