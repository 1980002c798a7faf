package sharedlog

import (
	"bytes"
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/examples/log/client"
	"github.com/convoy-gcs/convoy/rdma"
)

// cluster runs members of the log in this process: a view-managed group
// with durable delivery on the in-memory transport around an embedded
// etcd, each member serving its API on an httptest server.
type cluster struct {
	t      *testing.T
	etcd   *etcddev.Server
	fabric *rdma.MemFabric
	hc     *http.Client
	// failed counts the requests that failed over: 503s and connection
	// errors.
	failed *failCounter
	mu     sync.Mutex
	live   map[convoy.NodeID]*member
	// dirs holds each member's durable log directory, kept across
	// restarts.
	dirs map[convoy.NodeID]string
}

type member struct {
	id   convoy.NodeID
	node *Node
	srv  *httptest.Server
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv, err := etcddev.Start(context.Background(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	failed := &failCounter{base: &http.Transport{MaxIdleConnsPerHost: 16}}
	c := &cluster{t: t, etcd: srv, fabric: rdma.NewMemFabric(rdma.MemOptions{Seed: 1}),
		hc: &http.Client{Transport: failed}, failed: failed, live: make(map[convoy.NodeID]*member), dirs: make(map[convoy.NodeID]string)}
	t.Cleanup(func() {
		c.mu.Lock()
		live := slices.Collect(maps.Values(c.live))
		c.mu.Unlock()
		for _, m := range live {
			m.close()
		}
		c.hc.CloseIdleConnections()
		c.fabric.Close()
		c.etcd.Close()
	})
	return c
}

// failCounter is an http.RoundTripper that counts 503s and connection
// errors.
type failCounter struct {
	base *http.Transport
	n    atomic.Int64
}

func (f *failCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.base.RoundTrip(req)
	if err != nil || resp.StatusCode == http.StatusServiceUnavailable {
		f.n.Add(1)
	}
	return resp, err
}

func (f *failCounter) CloseIdleConnections() { f.base.CloseIdleConnections() }

// open starts member id; initial is Config.InitialMembers.
func (c *cluster) open(id convoy.NodeID, initial int) (*member, error) {
	ep, err := c.fabric.Endpoint(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	dir, ok := c.dirs[id]
	if !ok {
		dir = c.t.TempDir()
		c.dirs[id] = dir
	}
	c.mu.Unlock()
	cfg := convoy.Config{
		Self: id, Endpoint: ep, InitialMembers: initial,
		Etcd:           &convoy.EtcdConfig{Endpoints: c.etcd.Endpoints(), Prefix: "/" + strings.ReplaceAll(c.t.Name(), "/", "_") + "/", LeaseTTL: 2 * time.Second},
		Durable:        &convoy.DurableConfig{Dir: dir},
		BeaconInterval: time.Millisecond, WindowMessages: 1024,
		// Members, etcd and the load share two cores: the timeout leaves
		// room for scheduling delays.
		HeartbeatInterval: 10 * time.Millisecond, SuspectTimeout: 200 * time.Millisecond,
		Logger: testLogger(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg, Options{Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	m := &member{id: id, node: n, srv: httptest.NewServer(n.Handler())}
	c.mu.Lock()
	c.live[id] = m
	c.mu.Unlock()
	return m, nil
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

// crash stops member id: its links break, then it closes (requests in
// flight get 503) and its HTTP server goes away.
func (c *cluster) crash(id convoy.NodeID) {
	c.mu.Lock()
	m := c.live[id]
	delete(c.live, id)
	c.mu.Unlock()
	c.fabric.Crash(id)
	m.close()
}

func (m *member) close() {
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

// The streams an appender's entries name: entry k names streamsOf(k).
var testStreams = []string{"a", "b", "c"}

func streamsOf(k int) []string {
	switch k % 4 {
	case 1:
		return []string{"a"}
	case 2:
		return []string{"b"}
	case 3:
		return []string{"a", "c"}
	}
	return nil
}

// ack is an acknowledged append: its data names its streams after a '|'.
type ack struct {
	pos  uint64
	data string
}

func entryData(worker, k int) string {
	return fmt.Sprintf("w%d-%d|%s", worker, k, strings.Join(streamsOf(k), ","))
}

// load runs appenders against the members at us until stop closes: each
// worker appends through a client that prefers another member, and
// every 8th append is sent twice at once with the same Idempotency-Key,
// through two different members. wait returns the acknowledged appends
// once the workers stopped; acked waits until k more appends than
// before its call are acknowledged, and fails the test if the workers
// stop first or a minute passes.
func (c *cluster) load(stop <-chan struct{}, us []string, workers int) (wait func() []ack, acked func(k int)) {
	var mu sync.Mutex
	var acks []ack
	var wg sync.WaitGroup
	done := make(chan struct{})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks)
	}
	acked = func(k int) {
		c.t.Helper()
		want := count() + k
		deadline := time.After(time.Minute)
		for count() < want {
			select {
			case <-done:
				c.t.Fatalf("the appenders stopped at %d appends acknowledged, want %d", count(), want)
			case <-deadline:
				c.t.Fatalf("%d appends acknowledged in a minute, want %d", count(), want)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for w := range workers {
		wg.Go(func() {
			rotated := append(slices.Clone(us[w%len(us):]), us[:w%len(us)]...)
			cl := client.New(rotated, client.WithHTTPClient(c.hc), client.WithBackoff(5*time.Millisecond))
			other := client.New(append(slices.Clone(rotated[1:]), rotated[0]), client.WithHTTPClient(c.hc), client.WithBackoff(5*time.Millisecond))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				data := entryData(w, k)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var pos uint64
				var err error
				if k%8 == 7 {
					pos, err = c.appendTwice(ctx, rotated, fmt.Sprintf("dup-%d-%d", w, k), data, streamsOf(k))
				} else {
					pos, err = cl.Append(ctx, []byte(data), streamsOf(k)...)
				}
				cancel()
				if err != nil {
					c.t.Errorf("worker %d: append %q: %v", w, data, err)
					return
				}
				if k%4 == 0 {
					// Linearizable reads: another member serves the
					// acknowledged entry, and a tail beyond it.
					if err := c.readBack(other, pos, data); err != nil {
						c.t.Errorf("worker %d: %v", w, err)
						return
					}
				}
				mu.Lock()
				acks = append(acks, ack{pos: pos, data: data})
				mu.Unlock()
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return func() []ack {
		<-done
		return acks
	}, acked
}

// readBack reads an acknowledged append through cl, which prefers
// another member than the one that acknowledged it.
func (c *cluster) readBack(cl *client.Client, pos uint64, data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := cl.Read(ctx, pos)
	if err != nil || string(got) != data {
		return fmt.Errorf("read of acknowledged position %d: %q, %v; want %q", pos, got, err, data)
	}
	tail, err := cl.Tail(ctx)
	if err != nil || tail <= pos {
		return fmt.Errorf("tail %d, %v after an append acknowledged at %d", tail, err, pos)
	}
	return nil
}

// appendTwice sends one append with one Idempotency-Key through two
// members at once (each request failing over on its own); both must
// get the same position.
func (c *cluster) appendTwice(ctx context.Context, us []string, key, data string, streams []string) (uint64, error) {
	var pos [2]uint64
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			order := append(slices.Clone(us[i:]), us[:i]...)
			pos[i], errs[i] = c.postWithKey(ctx, order, key, data, streams)
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return 0, err
	}
	if pos[0] != pos[1] {
		return 0, fmt.Errorf("one request (key %s) got positions %d and %d", key, pos[0], pos[1])
	}
	return pos[0], nil
}

// postWithKey appends with the given Idempotency-Key, trying the members
// in turn on 503 or a connection error.
func (c *cluster) postWithKey(ctx context.Context, us []string, key, data string, streams []string) (uint64, error) {
	for attempt := 0; ; attempt++ {
		u := us[attempt%len(us)] + "/log?streams=" + strings.Join(streams, ",")
		req, err := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader(data))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := c.hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				var out struct{ Position uint64 }
				_, err := fmt.Sscanf(string(body), `{"position":%d}`, &out.Position)
				return out.Position, err
			}
			if resp.StatusCode != 503 {
				return 0, fmt.Errorf("%s: %d %s", u, resp.StatusCode, body)
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readAll reads the whole log from the member at u, in ranges, up to
// tail.
func (c *cluster) readAll(ctx context.Context, u string, from, tail uint64) []client.Entry {
	c.t.Helper()
	cl := client.New([]string{u}, client.WithHTTPClient(c.hc))
	var out []client.Entry
	for from < tail {
		es, err := cl.ReadRange(ctx, from, tail)
		if err != nil {
			c.t.Fatalf("%s: range from %d: %v", u, from, err)
		}
		if len(es) == 0 {
			c.t.Fatalf("%s: range [%d, %d) is empty", u, from, tail)
		}
		out = append(out, es...)
		from = es[len(es)-1].Position + 1
	}
	return out
}

// readStream reads a whole stream from the member at u.
func (c *cluster) readStream(ctx context.Context, u, name string) []client.Entry {
	c.t.Helper()
	cl := client.New([]string{u}, client.WithHTTPClient(c.hc))
	var out []client.Entry
	for from := uint64(0); ; {
		es, err := cl.ReadStream(ctx, name, from)
		if err != nil {
			c.t.Fatalf("%s: stream %s from %d: %v", u, name, from, err)
		}
		if len(es) == 0 {
			return out
		}
		out = append(out, es...)
		from = es[len(es)-1].Position + 1
	}
}

// sameTail waits until every member at us reports the same tail (a
// command still in flight may land meanwhile) and returns it.
func (c *cluster) sameTail(ctx context.Context, us []string) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var tails []uint64
		for _, u := range us {
			tail, err := client.New([]string{u}, client.WithHTTPClient(c.hc)).Tail(ctx)
			if err != nil {
				c.t.Fatalf("%s: tail: %v", u, err)
			}
			tails = append(tails, tail)
		}
		if slices.Min(tails) == slices.Max(tails) {
			return tails[0]
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("members' tails differ: %v", tails)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check verifies the log as the members at us serve it: the same tail
// everywhere; every position from trim to the tail written exactly once,
// with the same bytes on every member; each acknowledged append at its
// position, and no entry twice; and each stream, on every member, equal
// to the log filtered by that stream.
func (c *cluster) check(us []string, trim uint64, acks []ack) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tail := c.sameTail(ctx, us)
	var ref []client.Entry
	for i, u := range us {
		log := c.readAll(ctx, u, 0, tail)
		if uint64(len(log)) != tail-trim {
			c.t.Fatalf("%s holds %d entries in [%d, %d)", u, len(log), trim, tail)
		}
		for k, e := range log {
			if e.Position != trim+uint64(k) {
				c.t.Fatalf("%s: entry %d at position %d, want %d", u, k, e.Position, trim+uint64(k))
			}
		}
		if i == 0 {
			ref = log
			continue
		}
		for k := range log {
			if !bytes.Equal(log[k].Data, ref[k].Data) {
				c.t.Fatalf("position %d: %q on %s, %q on %s", log[k].Position, log[k].Data, u, ref[k].Data, us[0])
			}
		}
	}
	seen := make(map[string]uint64)
	for _, e := range ref {
		if prev, ok := seen[string(e.Data)]; ok {
			c.t.Fatalf("%q is at positions %d and %d", e.Data, prev, e.Position)
		}
		seen[string(e.Data)] = e.Position
	}
	for _, a := range acks {
		if a.pos < trim {
			continue
		}
		if got, ok := seen[a.data]; !ok || got != a.pos {
			c.t.Fatalf("append %q was acknowledged at position %d; the log has it at %d (present: %v)", a.data, a.pos, got, ok)
		}
	}
	for _, name := range testStreams {
		var want []client.Entry
		for _, e := range ref {
			_, streams, _ := strings.Cut(string(e.Data), "|")
			if slices.Contains(strings.Split(streams, ","), name) {
				want = append(want, e)
			}
		}
		for _, u := range us {
			got := c.readStream(ctx, u, name)
			if !slices.EqualFunc(got, want, func(a, b client.Entry) bool { return a.Position == b.Position && bytes.Equal(a.Data, b.Data) }) {
				c.t.Fatalf("%s: stream %s holds %d entries, the log filtered by it %d", u, name, len(got), len(want))
			}
		}
	}
	c.t.Logf("checked %d entries up to tail %d, %d acknowledged appends, on %d members", tail-trim, tail, len(acks), len(us))
}

// TestClusterConcurrentAppends: appenders on all three members until 300
// appends are acknowledged, some naming streams and some sent twice
// with one Idempotency-Key. Positions are dense and unique, every
// acknowledged append is at its position on every member, a retried
// request lands once, streams are the log filtered, and the tails agree.
func TestClusterConcurrentAppends(t *testing.T) {
	c := newCluster(t)
	ms := c.openAll(3)
	stop := make(chan struct{})
	wait, acked := c.load(stop, urls(ms), 6)
	acked(300)
	close(stop)
	c.check(urls(ms), 0, wait())
}

// TestClusterCrash: as above, and a member crashes mid-run while the
// appenders fail over to the others; the survivors pass the same checks.
func TestClusterCrash(t *testing.T) {
	c := newCluster(t)
	ms := c.openAll(3)
	stop := make(chan struct{})
	wait, acked := c.load(stop, urls(ms), 6)
	acked(100)
	before := c.failed.n.Load()
	c.crash(3)
	survivors := ms[:2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.waitMembers(ctx, urls(survivors), 2)
	acked(100)
	close(stop)
	acks := wait()
	// The workers that preferred member 3 failed over.
	failovers := c.failed.n.Load() - before
	if failovers == 0 {
		t.Fatal("no request failed over after the crash")
	}
	t.Logf("%d requests failed over", failovers)
	c.check(urls(survivors), 0, acks)
}

// waitMembers waits until every member at us serves in a view of want
// members.
func (c *cluster) waitMembers(ctx context.Context, us []string, want int) {
	c.t.Helper()
	cl := client.New(nil, client.WithHTTPClient(c.hc))
	for _, u := range us {
		for {
			s, err := cl.Status(ctx, u)
			if err == nil && s.Serving && len(s.Members) == want {
				break
			}
			if ctx.Err() != nil {
				c.t.Fatalf("%s: status %+v, %v; want serving with %d members", u, s, err, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestClusterJoin: a fourth member joins a log that was written and
// trimmed; it receives the state by transfer and serves the same reads
// as the others, trimmed positions included, and takes part in what
// follows.
func TestClusterJoin(t *testing.T) {
	c := newCluster(t)
	ms := c.openAll(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client.New(urls(ms), client.WithHTTPClient(c.hc))
	var acks []ack
	appendN := func(cl *client.Client, worker, n int) {
		for k := range n {
			data := entryData(worker, k)
			pos, err := cl.Append(ctx, []byte(data), streamsOf(k)...)
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, ack{pos: pos, data: data})
		}
	}
	appendN(cl, 0, 50)
	if _, err := cl.Trim(ctx, 20); err != nil {
		t.Fatal(err)
	}
	appendN(cl, 1, 10)

	joiner, err := c.open(4, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing was written since: the joiner holds the log as transferred.
	s, err := cl.Status(ctx, joiner.srv.URL)
	if err != nil || s.Trim != 20 || s.Tail != 60 {
		t.Fatalf("the joiner's status right after Open: %+v, %v; want trim 20, tail 60", s, err)
	}
	all := append(ms, joiner)
	c.waitMembers(ctx, urls(all), 4)
	c.check(urls(all), 20, acks)
	only := client.New([]string{joiner.srv.URL}, client.WithHTTPClient(c.hc))
	if _, err := only.Read(ctx, 19); !errors.Is(err, client.ErrTrimmed) {
		t.Fatalf("the joiner reads trimmed position 19: %v, want ErrTrimmed", err)
	}
	if _, err := only.Read(ctx, 60); !errors.Is(err, client.ErrUnwritten) {
		t.Fatalf("the joiner reads position 60: %v, want ErrUnwritten", err)
	}

	// The joiner takes writes, and trims, like the others.
	appendN(only, 2, 20)
	if _, err := only.Trim(ctx, 40); err != nil {
		t.Fatal(err)
	}
	c.check(urls(all), 40, acks)
	for _, m := range ms {
		got, err := client.New([]string{m.srv.URL}, client.WithHTTPClient(c.hc)).Read(ctx, 39)
		if !errors.Is(err, client.ErrTrimmed) {
			t.Fatalf("member %d reads trimmed position 39: %q, %v", m.id, got, err)
		}
	}
}

// TestClusterRestart: a member crashes and starts again on its durable
// log while the others take appends; it rejoins, gets the state it
// missed, and serves the same log.
func TestClusterRestart(t *testing.T) {
	c := newCluster(t)
	ms := c.openAll(3)
	stop := make(chan struct{})
	wait, acked := c.load(stop, urls(ms), 4)
	acked(50)
	c.crash(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.waitMembers(ctx, urls(ms[:2]), 2)
	acked(30) // appends member 3 misses
	again, err := c.open(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	all := []*member{ms[0], ms[1], again}
	c.waitMembers(ctx, urls(all), 3)
	acked(30)
	close(stop)
	acks := wait()
	c.check(urls(all), 0, acks)
}
