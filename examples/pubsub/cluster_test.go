package pubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/examples/pubsub/client"
	"github.com/convoy-gcs/convoy/rdma"
)

// cluster runs members of the service in this process: a view-managed
// group on the in-memory transport around an embedded etcd, each member
// serving its API on an httptest server.
type cluster struct {
	t      *testing.T
	etcd   *etcddev.Server
	fabric *rdma.MemFabric
	opts   Options
	mu     sync.Mutex
	// dirs, if set, makes the members durable, each on its data
	// directory.
	dirs map[convoy.NodeID]string
	live map[convoy.NodeID]*member
}

type member struct {
	id   convoy.NodeID
	node *Node
	srv  *httptest.Server
}

func newCluster(t *testing.T, opts Options) *cluster {
	t.Helper()
	srv, err := etcddev.Start(context.Background(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, etcd: srv, fabric: rdma.NewMemFabric(rdma.MemOptions{Seed: 1}), opts: opts, live: make(map[convoy.NodeID]*member)}
	t.Cleanup(func() {
		c.mu.Lock()
		live := slices.Collect(maps.Values(c.live))
		c.mu.Unlock()
		for _, m := range live {
			m.close()
		}
		http.DefaultClient.CloseIdleConnections()
		c.fabric.Close()
		c.etcd.Close()
	})
	return c
}

// openAll starts members 1..k as the group's founders.
func (c *cluster) openAll(k int) []*member {
	c.t.Helper()
	ms := make([]*member, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { ms[i], errs[i] = c.open(convoy.NodeID(i+1), k) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	return ms
}

func (c *cluster) open(id convoy.NodeID, initial int) (*member, error) {
	ep, err := c.fabric.Endpoint(id)
	if err != nil {
		return nil, err
	}
	cfg := convoy.Config{
		Self: id, Endpoint: ep, InitialMembers: initial,
		Etcd:           &convoy.EtcdConfig{Endpoints: c.etcd.Endpoints(), Prefix: "/" + strings.ReplaceAll(c.t.Name(), "/", "_") + "/", LeaseTTL: 2 * time.Second},
		BeaconInterval: time.Millisecond, WindowMessages: 1024,
		// Members, etcd and the load share two cores: the timeout leaves
		// room for scheduling delays.
		HeartbeatInterval: 10 * time.Millisecond, SuspectTimeout: 200 * time.Millisecond,
		Logger: testLogger(),
	}
	c.mu.Lock()
	if c.dirs != nil {
		if c.dirs[id] == "" {
			c.dirs[id] = c.t.TempDir()
		}
		cfg.Durable = &convoy.DurableConfig{Dir: c.dirs[id]}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := c.opts
	opts.Logger = testLogger()
	n, err := Open(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	m := &member{id: id, node: n, srv: httptest.NewServer(n.Handler())}
	c.mu.Lock()
	c.live[id] = m
	c.mu.Unlock()
	return m, nil
}

// crash stops member id: its links break, then it closes and its HTTP
// server goes away.
func (c *cluster) crash(id convoy.NodeID) {
	c.mu.Lock()
	m := c.live[id]
	delete(c.live, id)
	c.mu.Unlock()
	c.fabric.Crash(id)
	m.close()
}

func (m *member) close() {
	m.srv.CloseClientConnections()
	m.node.Close()
	m.srv.Close()
}

func urls(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.srv.URL)
	}
	return out
}

// testLogger logs to stderr when CONVOY_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("CONVOY_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestPubSub runs the service on three members: members 1 and 2
// subscribe to "orders", member 3 to "audit". Every member publishes on
// "orders"; a client reads the topic as server-sent events from member
// 1 and, when member 1 crashes in the middle, resumes at member 2 (member
// 3 does not subscribe, and says so) from the next index: it reads every
// message once, in one order, at consecutive indexes. Member 3, which
// does not subscribe to "orders", keeps nothing of it.
func TestPubSub(t *testing.T) {
	c := newCluster(t, Options{})
	ms := c.openAll(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client.New(urls(ms))
	for _, sub := range []struct {
		m     *member
		topic string
		mode  string
	}{{ms[0], "orders", "atomic"}, {ms[1], "orders", ""}, {ms[2], "audit", "total"}} {
		if err := cl.Subscribe(ctx, sub.m.srv.URL, sub.topic, sub.mode); err != nil {
			t.Fatal(err)
		}
	}
	// Member 3's view has every subscription once its own returned
	// (views are installed in order).
	topics, err := client.New([]string{ms[2].srv.URL}).Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 2 || topics[0].Name != "audit" || topics[0].Mode != "total" || !slices.Equal(topics[1].Subscribers, []uint64{1, 2}) {
		t.Fatalf("topics %+v", topics)
	}
	const each = 20
	publish := func(round int, ms []*member) {
		var wg sync.WaitGroup
		errs := make(chan error, len(ms))
		for _, m := range ms {
			wg.Go(func() {
				pc := client.New([]string{m.srv.URL})
				for k := range each {
					if _, err := pc.Publish(ctx, "orders", fmt.Appendf(nil, "m%d-%d-%d", m.id, round, k)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	publish(0, ms)
	s := cl.Events(ctx, "orders", 1)
	defer s.Close()
	seen := make(map[string]bool)
	next := uint64(1)
	read := func(n int) {
		for range n {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Index != next || seen[string(ev.Data)] {
				t.Fatalf("event %d (%q) where %d was due", ev.Index, ev.Data, next)
			}
			seen[string(ev.Data)] = true
			next++
		}
	}
	read(len(ms) * each / 2)
	c.crash(1)
	// What member 1 acknowledged, every subscriber held: member 2
	// delivers it all, after the view change.
	read(len(ms) * each / 2)
	publish(1, ms[1:]) // the members left
	read(2 * each)
	for _, m := range ms[1:] {
		for k := range each {
			if !seen[fmt.Sprintf("m%d-1-%d", m.id, k)] {
				t.Fatalf("m%d-1-%d never read", m.id, k)
			}
		}
	}
	if first, last := ms[2].node.topic("orders").bounds(); first != 0 || last != 0 {
		t.Fatalf("member 3, which does not subscribe to orders, kept %d..%d of it", first, last)
	}
}

// TestPubSubErrors: bad input gets a clear error with its status: an
// unknown topic, an oversized message, a cursor below the kept prefix, a
// member that does not subscribe, a malformed cursor.
func TestPubSubErrors(t *testing.T) {
	c := newCluster(t, Options{MaxMessageBytes: 100, Retain: 5})
	ms := c.openAll(2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client.New(urls(ms))
	if err := cl.Subscribe(ctx, ms[0].srv.URL, "t", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Publish(ctx, "nope", []byte("x")); !errors.Is(err, client.ErrUnknownTopic) {
		t.Errorf("publish on an unknown topic: %v, want ErrUnknownTopic", err)
	}
	if _, err := cl.Publish(ctx, "t", make([]byte, 101)); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("oversized publish: %v, want ErrTooLarge", err)
	}
	for k := range 12 {
		if _, err := cl.Publish(ctx, "t", fmt.Appendf(nil, "%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	// Member 1 keeps the last 5: indexes 8..12 once it delivered them.
	last := cl.Events(ctx, "t", 12)
	if _, err := last.Next(); err != nil {
		t.Fatal(err)
	}
	last.Close()
	s := cl.Events(ctx, "t", 2)
	if _, err := s.Next(); !errors.Is(err, client.ErrTrimmed) || !strings.Contains(err.Error(), "keeps the topic from 8") {
		t.Errorf("a cursor below the kept prefix: %v, want ErrTrimmed from 8", err)
	}
	s.Close()
	if ev, err := cl.Events(ctx, "t", 8).Next(); err != nil || ev.Index != 8 || string(ev.Data) != "7" {
		t.Errorf("from the kept prefix: %+v, %v", ev, err)
	}
	only2 := client.New([]string{ms[1].srv.URL})
	if _, err := only2.Events(ctx, "t", 1).Next(); !errors.Is(err, client.ErrNotSubscribed) {
		t.Errorf("events at a member that does not subscribe: %v, want ErrNotSubscribed", err)
	}
	if _, err := only2.Events(ctx, "nope", 1).Next(); !errors.Is(err, client.ErrUnknownTopic) {
		t.Errorf("events of an unknown topic: %v, want ErrUnknownTopic", err)
	}
	for _, q := range []string{"from=abc", "from=0", "from=-1"} {
		resp, err := http.Get(ms[0].srv.URL + "/topics/t/events?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "from=") {
			t.Errorf("%s: HTTP %d %s, want 400 about from", q, resp.StatusCode, body)
		}
	}
	resp, err := http.Post(ms[0].srv.URL+"/topics/u/subscribe?mode=weird", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("subscribe with a bad mode: HTTP %d, want 400", resp.StatusCode)
	}
}

// TestPubSubDurableRestart: in a durable group, a client reads a topic
// from member 3, which then crashes and restarts on its data directory.
// The restarted member replays the topic from its log and subscribes
// again: the client resumes there from an index before the crash and
// reads every message once, in order, at consecutive indexes, the ones
// published after the restart included.
func TestPubSubDurableRestart(t *testing.T) {
	c := newCluster(t, Options{})
	c.dirs = make(map[convoy.NodeID]string)
	ms := c.openAll(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client.New(urls(ms))
	for _, m := range ms {
		if err := cl.Subscribe(ctx, m.srv.URL, "orders", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Subscribe(ctx, ms[0].srv.URL, "audit", "total"); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a total order topic in a durable group: %v, want ErrBadRequest", err)
	}
	const each = 15
	published := 0
	publish := func(ms []*member) {
		t.Helper()
		for _, m := range ms {
			pc := client.New([]string{m.srv.URL})
			for range each {
				published++
				if _, err := pc.Publish(ctx, "orders", fmt.Appendf(nil, "m%d-%d", m.id, published)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// read reads events from s up to index to, expecting from next on.
	var got []string
	read := func(s *client.Stream, next, to uint64) {
		t.Helper()
		for ; next <= to; next++ {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Index != next {
				t.Fatalf("event %d (%q) where %d was due", ev.Index, ev.Data, next)
			}
			if int(ev.Index) > len(got) {
				got = append(got, string(ev.Data))
			} else if got[ev.Index-1] != string(ev.Data) {
				t.Fatalf("event %d is %q, was %q before the restart", ev.Index, ev.Data, got[ev.Index-1])
			}
		}
	}
	publish(ms)
	at3 := client.New([]string{ms[2].srv.URL})
	s := at3.Events(ctx, "orders", 1)
	read(s, 1, uint64(published))
	s.Close()

	c.crash(3)
	again, err := c.open(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if first, last := again.node.topic("orders").bounds(); first != 1 || last != uint64(published) {
		t.Fatalf("the restarted member keeps %d..%d of the topic, want 1..%d", first, last, published)
	}
	at3 = client.New([]string{again.srv.URL})
	const from = 7
	s = at3.Events(ctx, "orders", from)
	defer s.Close()
	read(s, from, uint64(published))
	before := published
	publish(ms[:2])
	read(s, uint64(before+1), uint64(published))
	seen := make(map[string]bool)
	for _, p := range got {
		if seen[p] {
			t.Fatalf("%q read twice", p)
		}
		seen[p] = true
	}
	if len(got) != published {
		t.Fatalf("read %d messages, %d were published", len(got), published)
	}
}
