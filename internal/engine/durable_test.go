package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
	"github.com/convoy-gcs/convoy/rdma"
)

// TestDurableDelivery: with durable delivery, no member hands a message to
// the application before every member has it on disk; every member still
// delivers the same sequence; and each log holds exactly that sequence,
// also after it is reopened.
func TestDurableDelivery(t *testing.T) {
	f := rdma.NewMemFabric(rdma.MemOptions{Seed: 5})
	defer f.Close()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	c := openCluster(t, 3, clusterOpts{mode: Atomic,
		endpoint: func(i int) rdma.Endpoint {
			ep, err := f.Endpoint(NodeID(i + 1))
			if err != nil {
				t.Fatal(err)
			}
			return ep
		},
		durable: func(i int) string { return dirs[i] },
	})
	for i, r := range c.recs {
		orig := r
		member := i
		c.groups[i].h = func(d Delivery) {
			for j, g := range c.groups {
				if s := g.disk.Synced(); s < d.Index {
					t.Errorf("member %d delivered index %d while member %d has synced only %d", member, d.Index, j, s)
				}
			}
			orig.handle(d)
		}
	}
	c.run(t, Atomic, 200, 5)
	last := c.recs[0].got[len(c.recs[0].got)-1].Index
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, g := range c.groups {
		if err := g.WaitDurable(ctx, last); err != nil {
			t.Fatalf("member %d: WaitDurable(%d): %v", i, last, err)
		}
	}
	c.close()

	want := c.recs[0].got
	for i, dir := range dirs {
		l, err := persistence.Open(context.Background(), persistence.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		err = l.Scan(context.Background(), l.First(), math.MaxUint64, func(e persistence.Entry) error {
			if k < len(want) {
				d := want[k]
				if e.Index != d.Index || e.Sender != uint64(d.Sender) || e.Seq != d.Seq || string(e.Payload) != string(d.Payload) {
					t.Errorf("member %d's log at %d: %+v, delivered %d/%d#%d", i, k, e.Index, d.Index, d.Sender, d.Seq)
				}
			}
			k++
			return nil
		})
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if k < len(want) {
			t.Errorf("member %d's log holds %d entries, %d were delivered", i, k, len(want))
		}
	}
}

// TestViewsDurableCrash: durable delivery in a view-managed group through
// a crash: the survivors' logs hold the same entries at the same indexes,
// and the view record of the new view is on every survivor's disk.
func TestViewsDurableCrash(t *testing.T) {
	c := newVSCluster(t)
	nodes := c.openAll(4, func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: t.TempDir()}
	})
	stop := make(chan struct{})
	wg := c.load(stop, nodes...)
	c.waitCount(nodes[0], 200)
	c.crash(4)
	survivors := nodes[:3]
	c.waitView(2, 3, survivors...)
	c.waitCount(nodes[0], len(nodes[0].payloads())+200)
	close(stop)
	wg.Wait()
	c.converged(t, survivors...)

	// Each log holds every entry from where it starts to the last
	// delivery, and the logs agree wherever they overlap.
	ctx := context.Background()
	ref := make(map[uint64]persistence.Entry)
	for _, n := range survivors {
		checkLogStart(t, n, true)
		l := n.g.disk
		next := l.First()
		if err := l.Scan(ctx, l.First(), n.lastIndex(), func(e persistence.Entry) error {
			if e.Index != next {
				return fmt.Errorf("entry %d after %d", e.Index, next-1)
			}
			next++
			if a, ok := ref[e.Index]; ok && (a.Sender != e.Sender || a.Seq != e.Seq || string(a.Payload) != string(e.Payload)) {
				return fmt.Errorf("logs differ at %d: %+v vs %+v", e.Index, a, e)
			}
			ref[e.Index] = e
			return nil
		}); err != nil {
			t.Fatalf("member %d's log: %v", n.id, err)
		}
		if next != n.lastIndex()+1 {
			t.Fatalf("member %d's log ends at %d, its deliveries at %d", n.id, next-1, n.lastIndex())
		}
		views, err := l.Views(ctx)
		if err != nil || len(views) < 2 || views[len(views)-1].Epoch < 2 {
			t.Fatalf("member %d's view records: %v, %v", n.id, views, err)
		}
	}
}

func TestWaitDurableWithoutDurable(t *testing.T) {
	f := rdma.NewMemFabric(rdma.MemOptions{Seed: 1})
	defer f.Close()
	c := openCluster(t, 2, clusterOpts{mode: Atomic, endpoint: func(i int) rdma.Endpoint {
		ep, err := f.Endpoint(NodeID(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}})
	defer c.close()
	if err := c.groups[0].WaitDurable(context.Background(), 1); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("WaitDurable: %v, want ErrNotDurable", err)
	}
}

// TestViewsDurableRestart: a member of a durable group is killed and
// started again on the same data directory. It rejoins as a new
// incarnation (its state comes by transfer), its log continues from the
// view that admits it, and the group goes on with every guarantee.
func TestViewsDurableRestart(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{}
	durable := func(cfg *Config) {
		if dirs[cfg.Self] == "" {
			dirs[cfg.Self] = t.TempDir()
		}
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]}
	}
	for id := NodeID(1); id <= 3; id++ {
		dirs[id] = t.TempDir()
	}
	// The metrics of the two that stay, and of the one that restarts.
	stay, back := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	stayMeters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(stay))
	nodes := c.openAll(3, durable, func(cfg *Config) {
		if cfg.Self != 3 {
			cfg.MeterProvider = stayMeters
		}
	})
	stop := make(chan struct{})
	wg := c.load(stop, nodes[:2]...)
	c.waitCount(nodes[0], 200)
	c.crash(3)
	c.waitView(2, 2, nodes[:2]...)
	again, err := c.open(3, 1, durable, func(cfg *Config) {
		cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(back))
	})
	if err != nil {
		t.Fatal(err)
	}
	all := []*vsNode{nodes[0], nodes[1], again}
	c.waitMembers(3, all...)
	c.waitCount(again, 100)
	close(stop)
	wg.Wait()
	c.waitDelivered(nodes[:2], nodes[:2]...)
	c.waitSameIndex(all...)
	c.check()
	sameState(t, all...)

	// It replayed its log and received only the messages after it: its
	// log holds the whole sequence, its view's first message included
	// (unless a false suspicion excluded it since and a state transfer
	// replaced its log: then from that view on).
	v, _ := again.lastView()
	l := again.g.disk
	checkLogStart(t, again, true)
	again.mu.Lock()
	replayed := len(again.replayed)
	again.mu.Unlock()
	if replayed == 0 || uint64(replayed) >= v.Start {
		t.Errorf("the restarted member replayed %d messages of the %d before its view", replayed, v.Start)
	}
	// The messages it missed came as a suffix, which the metrics count on
	// both sides; its log's lag behind the group's disks shows too.
	checkMetrics(t, metricValues(t, back), map[string]float64{
		"convoy.transfer.bytes{kind=suffix,role=joiner}":    1,
		"convoy.transfer.duration{kind=suffix,role=joiner}": 1,
		"convoy.durable.lag":                                0,
	}, "convoy.transfer.bytes")
	checkMetrics(t, metricValues(t, stay), map[string]float64{
		"convoy.transfer.bytes{kind=suffix,role=donor}": 1,
	}, "convoy.transfer.bytes")
	if err := l.WaitSynced(context.Background(), again.lastIndex()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	next := l.First()
	if err := l.Scan(ctx, l.First(), again.lastIndex(), func(e persistence.Entry) error {
		if e.Index != next {
			return fmt.Errorf("entry %d after %d", e.Index, next-1)
		}
		next++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestViewsDurableRestartWiped: a member restarts with its disk wiped. It
// has no log to go on from, so it receives the whole state by transfer.
func TestViewsDurableRestartWiped(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) { cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]} }
	nodes := c.openAll(3, durable)
	stop := make(chan struct{})
	wg := c.load(stop, nodes[:2]...)
	c.waitCount(nodes[0], 200)
	c.crash(3)
	if err := os.RemoveAll(dirs[3]); err != nil {
		t.Fatal(err)
	}
	c.waitView(2, 2, nodes[:2]...)
	again, err := c.open(3, 1, durable)
	if err != nil {
		t.Fatal(err)
	}
	all := []*vsNode{nodes[0], nodes[1], again}
	c.waitMembers(3, all...)
	c.waitCount(again, 100)
	close(stop)
	wg.Wait()
	c.waitDelivered(nodes[:2], nodes[:2]...)
	c.waitSameIndex(all...)
	c.check()
	sameState(t, all...)
	// The log starts where a view the member joined in starts, with the
	// snapshot of the state transferred to it.
	checkLogStart(t, again, false)
	if i, meta, err := again.g.disk.Snapshot(); err != nil || i+1 != again.g.disk.First() || len(meta) == 0 {
		t.Errorf("the wiped member's log, starting at %d, keeps no snapshot of the transferred state: %d %d %v", again.g.disk.First(), i, len(meta), err)
	}
}

// TestViewsDurableTotalFailure: every member of a durable group crashes at
// once in the middle of traffic — each disk keeping what it synced and a
// random part of the rest — three times in a row, and every member starts
// again on its disk. The group restarts from the members' logs: every
// message a sender saw reported durable survives on every member, at the
// index it had, no index ever holds two messages, and the group goes on.
func TestViewsDurableTotalFailure(t *testing.T) {
	c := newVSCluster(t)
	rng := rand.New(rand.NewPCG(7, 11))
	disks := map[NodeID]*vfs.MemFS{1: vfs.NewCrashableMem(), 2: vfs.NewCrashableMem(), 3: vfs.NewCrashableMem()}
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: "db", FS: disks[cfg.Self], RestartWait: 200 * time.Millisecond}
	}
	nodes := c.openAll(3, durable)
	// acked maps each message reported durable (Send returned with
	// WaitDelivered before the crash) to nothing yet; at maps every
	// message ever delivered or replayed to its index.
	acked := map[string]bool{}
	at := map[string]uint64{}
	byIndex := map[uint64]string{}
	record := func(n *vsNode) {
		n.mu.Lock()
		defer n.mu.Unlock()
		ds := slices.Clone(n.replayed)
		for _, e := range n.events {
			if e.view == nil {
				ds = append(ds, e.d)
			}
		}
		for _, d := range ds {
			p := string(d.Payload)
			var m, k, k2 int
			if _, err := fmt.Sscanf(p, "set m%d-%d %d", &m, &k, &k2); err != nil && !strings.HasPrefix(p, "set after") || err == nil && k != k2 {
				t.Errorf("member %d: index %d holds %q (replayed %v)", n.id, d.Index, p, d.Replayed)
			}
			if q, ok := byIndex[d.Index]; ok && q != p {
				t.Fatalf("index %d holds %q on one member and %q on member %d", d.Index, q, p, n.id)
			}
			if i, ok := at[p]; ok && i != d.Index {
				t.Fatalf("%q moved from index %d to %d on member %d", p, i, d.Index, n.id)
			}
			byIndex[d.Index], at[p] = p, d.Index
		}
	}
	for round := range 6 {
		var crashing atomic.Bool
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					k := round*1_000_000 + k
					p := fmt.Sprintf("set m%d-%d %d", n.id, k, k)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := n.g.Send(ctx, []byte(p), WaitDelivered())
					cancel()
					if err != nil {
						return
					}
					if crashing.Load() {
						return // durable perhaps only after the disks were taken
					}
					mu.Lock()
					acked[p] = true
					mu.Unlock()
				}
			}()
		}
		c.waitCount(nodes[0], 150)
		if round%2 == 1 {
			// Some members keep a snapshot and trim their logs: they
			// restart from snapshot and suffix.
			for _, n := range nodes[:2] {
				if _, err := n.g.Snapshot(context.Background()); err != nil {
					t.Fatalf("Snapshot: %v", err)
				}
			}
		}
		c.waitCount(nodes[0], len(nodes[0].payloads())+150)
		// A member crashes when its links are cut; its disk then keeps
		// what it synced and a random part of the rest. (It can deliver
		// nothing durable after its links are cut: that needs the others'
		// persisted indexes.)
		crashMember := func(id NodeID) {
			c.crashLinks(id)
			disks[id] = disks[id].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		}
		first := nodes[round%len(nodes)]
		var rest []*vsNode
		for _, n := range nodes {
			if n != first {
				rest = append(rest, n)
			}
		}
		switch round % 3 {
		case 0:
			// Every member at once, as in a power failure.
			crashing.Store(true)
			for _, n := range nodes {
				crashMember(n.id)
			}
		case 1:
			// One member stops a little earlier than the others, so the
			// logs end at different places in the same view.
			crashing.Store(true)
			crashMember(first.id)
			time.Sleep(30 * time.Millisecond)
			for _, n := range rest {
				crashMember(n.id)
			}
		case 2:
			// One member crashes and the others go on without it in a
			// new view before they crash too: it is not a member of the
			// view the group restarts from.
			crashMember(first.id)
			c.crash(first.id)
			v, _ := rest[0].lastView()
			c.waitView(v.Epoch+1, 2, rest...)
			c.waitCount(rest[0], len(rest[0].payloads())+100)
			crashing.Store(true)
			for _, n := range rest {
				crashMember(n.id)
			}
		}
		for _, n := range nodes {
			if n != first || round%3 != 2 {
				c.crash(n.id)
			}
		}
		wg.Wait()
		for _, n := range nodes {
			record(n)
		}
		t.Logf("round %d: %d messages reported durable so far, highest index %d", round, len(acked), slices.Max(slices.Collect(maps.Keys(byIndex))))

		// All start again on their disks.
		nodes = c.reopen([]NodeID{1, 2, 3}, durable)
		c.waitMembers(3, nodes...)
		v, _ := nodes[0].lastView()
		// Some traffic in the restarted group, so that every member holds
		// the same state. The members enter the restarted view one by
		// one, and on a loaded machine the others may suspect one that
		// comes late and exclude it: it rejoins as a new incarnation and
		// sends again, with a new payload (the first may have been
		// delivered).
		for _, n := range nodes {
			for k := 0; ; k++ {
				_, err := n.g.Send(context.Background(), []byte(fmt.Sprintf("set after%d.m%d-%d x", round, n.id, k)), WaitDelivered())
				if err == nil {
					break
				}
				if !errors.Is(err, ErrExcluded) && !errors.Is(err, ErrNotMember) {
					t.Fatal(err)
				}
				c.waitMembers(3, n)
			}
		}
		c.waitSameIndex(nodes...)
		for _, n := range nodes {
			record(n)
		}
		sameState(t, nodes...)
		st := nodes[0].state
		for p := range acked {
			f := strings.Fields(p)
			if got, _ := st.Get(f[1]); got != f[2] {
				i, ok := at[p]
				t.Fatalf("round %d: %q was reported durable (delivered at %d: %v) and is lost (view %d starts at %d)", round, p, i, ok, v.Epoch, v.Start)
			}
			if i, ok := at[p]; !ok || i > v.Start {
				t.Fatalf("round %d: %q was reported durable at index %d, beyond the restart at %d", round, p, i, v.Start)
			}
		}
		// The log of every member goes on from the restart: it replays
		// its own snapshot and entries at the next one.
		for _, n := range nodes {
			if n.g.disk.Last() < v.Start {
				t.Fatalf("member %d's log ends at %d, before the restart at %d", n.id, n.g.disk.Last(), v.Start)
			}
		}
	}
	c.check()
}

// TestDurableSnapshot: a member keeps a snapshot of its state in its
// log, which is trimmed before it; started again, it restores the
// snapshot and replays only the entries after it, and ends in the same
// state as the others.
func TestDurableSnapshot(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) { cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]} }
	nodes := c.openAll(3, durable)
	if _, err := (&Group{}).Snapshot(context.Background()); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("Snapshot without a durable log: %v", err)
	}
	stop := make(chan struct{})
	wg := c.load(stop, nodes...)
	c.waitCount(nodes[0], 200)
	idx, err := nodes[0].g.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if idx < 200 {
		t.Fatalf("snapshot at %d, after 200 deliveries", idx)
	}
	if first := nodes[0].g.disk.First(); first != idx+1 {
		t.Fatalf("log starts at %d after a snapshot at %d", first, idx)
	}
	c.waitCount(nodes[0], len(nodes[0].payloads())+100)
	close(stop)
	wg.Wait()
	c.waitDelivered(nodes, nodes...)
	c.waitSameIndex(nodes...)

	// Member 1 leaves and comes back on its disk.
	if err := nodes[0].g.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.waitView(2, 2, nodes[1:]...)
	c.crash(1)
	again, err := c.open(1, 1, durable)
	if err != nil {
		t.Fatal(err)
	}
	again.mu.Lock()
	replayed := slices.Clone(again.replayed)
	again.mu.Unlock()
	if len(replayed) == 0 || replayed[0].Index != idx+1 {
		t.Fatalf("replayed %d entries, first %+v; want them from %d", len(replayed), replayed, idx+1)
	}
	all := []*vsNode{again, nodes[1], nodes[2]}
	c.waitMembers(3, all...)
	if _, err := again.g.Send(context.Background(), []byte("set after x"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	c.waitSameIndex(all...)
	sameState(t, all...)
	c.check()
}

// TestViewsDurableMajorityCrash: two of three members crash; the one left
// cannot go on without a majority. When the two come back on their disks,
// the survivor gives up its incarnation and the three restart the group
// from their logs together.
func TestViewsDurableMajorityCrash(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self], RestartWait: 200 * time.Millisecond}
		// A member suspected only because a loaded machine delayed its
		// heartbeats could be left out of a view decided just before the
		// crash, with the majority of the view before: the check below
		// would take it for a view without one.
		cfg.SuspectTimeout = time.Second
	}
	nodes := c.openAll(3, durable)
	acked := sendDurable(t, nodes, 300)
	survivor := nodes[2]
	// A false suspicion may have changed views already: what matters is
	// that none follows the crash.
	c.waitMembers(3, nodes...)
	before, _ := survivor.lastView()
	incarnation := survivor.incarnation()
	// Both lose their links at once: crashed one after the other, 2 and
	// 3 could install a view without 1 before 2 goes.
	c.crashLinks(1)
	c.crashLinks(2)
	c.crash(1)
	c.crash(2)
	// The survivor is on its own: no view follows without a majority,
	// however long it suspects the others.
	time.Sleep(3 * time.Second)
	if v, _ := survivor.lastView(); v.Epoch != before.Epoch {
		t.Fatalf("the survivor went on from view %d to view %+v without a majority", before.Epoch, v)
	}
	all := append(c.reopen([]NodeID{1, 2}, durable), survivor)
	c.waitMembers(3, all...)
	if survivor.incarnation() == incarnation {
		t.Fatal("the survivor kept its incarnation through the restart")
	}
	for _, n := range all {
		if _, err := n.g.Send(context.Background(), []byte(fmt.Sprintf("set after.m%d-0 x", n.id)), WaitDelivered()); err != nil {
			t.Fatal(err)
		}
	}
	c.waitSameIndex(all...)
	sameState(t, all...)
	st := survivor.state
	checkAcked(t, st, acked)
	c.check()
}

// TestViewsDurableUninstalledView: the group commits a view that a member
// carried over into it never installs, and then every member crashes:
// member 3 fails, the leader proposes the view without it, the other
// member stops before the view is committed and the leader right after
// committing it. The last view in etcd is then one that at most one of
// its members has on disk. A member that never installed it acknowledged
// nothing in it, and its log took part in the view before: the group
// restarts from the logs all the same, and every message reported durable
// survives.
func TestViewsDurableUninstalledView(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	var armed atomic.Bool
	var proposed, committed sync.Once
	stopped := make(chan NodeID, 1)
	crashed := make(chan NodeID, 1)
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self], RestartWait: 200 * time.Millisecond}
		// Only member 3's crash may change the view once armed: a view
		// change after a false suspicion on a loaded machine would be
		// taken for it.
		cfg.SuspectTimeout = time.Second
		self := cfg.Self
		cfg.test.onPropose = func(uint64) {
			if !armed.Load() || self == 3 {
				return
			}
			// Called on the leader's loop, before the view is committed:
			// the other member of the next view cannot install it.
			proposed.Do(func() {
				other := 3 - self
				c.crash(other)
				stopped <- other
			})
		}
		cfg.test.onCommitted = func(uint64) {
			if armed.Load() {
				// On the goroutine that committed, which Close waits for.
				committed.Do(func() { go func() { c.crash(self); crashed <- self }() })
			}
		}
	}
	nodes := c.openAll(3, durable)
	acked := sendDurable(t, nodes, 100)
	// A false suspicion before may have changed views already.
	c.waitMembers(3, nodes...)
	before, _ := nodes[0].lastView()
	armed.Store(true)
	c.crash(3)
	select {
	case <-crashed:
	case <-time.After(time.Minute):
		t.Fatal("no member committed a view without member 3")
	}
	other := <-stopped
	ctx := context.Background()
	l, err := persistence.Open(ctx, persistence.Options{Dir: dirs[other]})
	if err != nil {
		t.Fatal(err)
	}
	views, err := l.Views(ctx)
	l.Close()
	if err != nil || len(views) == 0 || views[len(views)-1].Epoch != before.Epoch {
		t.Fatalf("member %d stopped before view %d was committed, and its log holds the views %+v (%v)", other, before.Epoch+1, views, err)
	}

	type opened struct {
		n   *vsNode
		err error
	}
	back := make(chan opened, 3)
	for id := NodeID(1); id <= 3; id++ {
		go func() {
			n, err := c.open(id, 1, durable)
			back <- opened{n, err}
		}()
	}
	var all []*vsNode
	for range 3 {
		select {
		case o := <-back:
			if o.err != nil {
				t.Fatal(o.err)
			}
			all = append(all, o.n)
		case <-time.After(time.Minute):
			t.Fatalf("%d of 3 members restarted: the group does not restart from logs that end before its last view", len(all))
		}
	}
	c.waitMembers(3, all...)
	for _, n := range all {
		if _, err := n.g.Send(ctx, []byte(fmt.Sprintf("set after.m%d-0 x", n.id)), WaitDelivered()); err != nil {
			t.Fatal(err)
		}
	}
	c.waitSameIndex(all...)
	sameState(t, all...)
	checkAcked(t, all[0].state, acked)
}

// syncFault fails every fsync of a log's write-ahead file once armed.
type syncFault struct{ armed atomic.Bool }

func (f *syncFault) String() string { return "syncFault" }

func (f *syncFault) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !strings.HasSuffix(op.Path, ".log") || inWALRotation() {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return errorfs.ErrInjected
	}
	return nil
}

// inWALRotation reports whether its caller runs within Pebble's rotation
// of its write-ahead log. Pebble does not survive an error there: it
// panics after releasing a mutex that its caller then unlocks again, a
// fatal error that ends the process, where an error on a commit's fsync
// fails the log and leaves the process up. A member whose disk fails
// there dies as in a crash, which the others handle as such; the members
// of a test share one process, so the fault spares the fsync that closes
// the rotated log, and the next commit meets it.
func inWALRotation() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*DB).rotateWAL") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestViewsDurableDiskError: a member's disk starts failing under load.
// It cannot persist, so it stops acknowledging, and its log's failure
// ends it (its group fails). Durable delivery waits for its disk until
// the others exclude it as silent and go on. Nothing it acknowledged is
// lost.
//
// DurableConfig.MaxLag keeps its default: a bound of a few dozen
// messages is below what a healthy member trails by at the start of a
// view under load, and a healthy member suspected of lagging is excluded
// whenever its final report comes after the others'; the view of two
// left then has no majority once the failing disk is gone.
func TestViewsDurableDiskError(t *testing.T) {
	c := newVSCluster(t)
	fault := &syncFault{}
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: t.TempDir()}
		if cfg.Self == 3 {
			cfg.Durable.Dir, cfg.Durable.FS = "db", errorfs.Wrap(vfs.NewMem(), fault)
		}
	}
	nodes := c.openAll(3, durable)
	stop := make(chan struct{})
	wg := c.load(stop, nodes[:2]...)
	c.waitCount(nodes[0], 200)
	synced := nodes[2].g.disk.Synced()
	fault.armed.Store(true)
	c.waitView(2, 2, nodes[:2]...)
	c.waitCount(nodes[0], len(nodes[0].payloads())+200)
	close(stop)
	wg.Wait()
	if err := nodes[2].g.disk.Err(); !errors.Is(err, persistence.ErrFailed) {
		t.Fatalf("the failing member's log: %v, want ErrFailed", err)
	}
	// It acknowledged nothing its disk had not synced, and it failed
	// rather than come back.
	persisted := nodes[2].g.disk.Synced()
	if persisted < synced {
		t.Fatalf("the failing log's synced index went back from %d to %d", synced, persisted)
	}
	if got := nodes[2].lastDelivered(); got > persisted {
		t.Fatalf("the failing member delivered up to %d, beyond its synced %d", got, persisted)
	}
	if err := nodes[2].g.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, persistence.ErrFailed) {
		t.Fatalf("the failing member's group: %v, want ErrFailed wrapping the log's failure", err)
	}
	c.waitDelivered(nodes[:2], nodes[:2]...)
	c.waitSameIndex(nodes[:2]...)
	c.check()
}

// TestViewsDurableDiskFailsIdle: a member's disk fails on the last write
// it has to make, a message sent to an idle group. Nothing more comes for
// it to append, yet it stops at once (its log's failure ends it) and its
// registration in etcd goes, though the application has not closed it;
// the others exclude it, and the message, which waited for its disk, is
// delivered.
func TestViewsDurableDiskFailsIdle(t *testing.T) {
	c := newVSCluster(t)
	fault := &syncFault{}
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: t.TempDir()}
		if cfg.Self == 3 {
			cfg.Durable.Dir, cfg.Durable.FS = "db", errorfs.Wrap(vfs.NewMem(), fault)
		}
	}
	nodes := c.openAll(3, durable)
	sendDurable(t, nodes, 30)
	fault.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := nodes[0].g.Send(ctx, []byte("set last 1"), WaitDelivered()); err != nil {
		t.Fatalf("the message that the failed disk could not take: %v", err)
	}
	c.waitView(2, 2, nodes[:2]...)
	if err := nodes[2].g.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, persistence.ErrFailed) {
		t.Fatalf("the failing member's group: %v, want ErrFailed wrapping the log's failure", err)
	}
	for {
		st, err := nodes[0].g.mem.current().State(ctx)
		if err != nil {
			t.Fatalf("the failed member is still registered in etcd: %v", err)
		}
		if _, ok := st.Registered[3]; !ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.waitSameIndex(nodes[:2]...)
	c.check()
}

// TestViewsDurableWipedDisks: every member crashes; one comes back with
// its disk wiped, another with its log. A wiped disk lost what it
// acknowledged: it does not count towards the majority of the view's
// members that a restart needs, so the two wait. Once a second member
// with its log is back, the group restarts from the logs, the wiped
// member receives the state, and every message reported durable
// survives.
func TestViewsDurableWipedDisks(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self], RestartWait: 100 * time.Millisecond}
	}
	nodes := c.openAll(3, durable)
	acked := sendDurable(t, nodes, 100)
	// Every member loses its links at once before any closes: crashed
	// one after the other, the survivors of the first crash could install
	// a view without it before the next, and the restart would start
	// from that view, whose members' logs it needs (with one of them
	// wiped, rightly none).
	for _, n := range nodes {
		c.crashLinks(n.id)
	}
	for _, n := range nodes {
		c.crash(n.id)
	}
	if cur := c.current(t); len(cur.Members) != 3 {
		t.Fatalf("view %d of %d members is the last, want the view of all three", cur.Epoch, len(cur.Members))
	}
	if err := os.RemoveAll(dirs[3]); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		n   *vsNode
		err error
	}
	back := make(chan opened, 3)
	start := func(id NodeID) {
		go func() {
			n, err := c.open(id, 1, durable)
			back <- opened{n, err}
		}()
	}
	start(2)
	start(3)
	select {
	case o := <-back:
		t.Fatalf("a member with its log and a wiped one restarted the group (err %v)", o.err)
	case <-time.After(time.Second):
	}
	start(1)
	var all []*vsNode
	for range 3 {
		o := <-back
		if o.err != nil {
			t.Fatal(o.err)
		}
		all = append(all, o.n)
	}
	c.waitMembers(3, all...)
	c.waitSameIndex(all...)
	sameState(t, all...)
	st := all[0].state
	checkAcked(t, st, acked)
}

// sendDurable sends n messages "set key value" round-robin from nodes,
// each waiting until it is durable, and returns them.
func sendDurable(t *testing.T, nodes []*vsNode, n int) []string {
	t.Helper()
	var acked []string
	for k := range n {
		p := fmt.Sprintf("set m%d-%d %d", nodes[k%len(nodes)].id, k, k)
		if _, err := nodes[k%len(nodes)].g.Send(context.Background(), []byte(p), WaitDelivered()); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, p)
	}
	return acked
}

// checkAcked fails unless state holds every message reported durable.
func checkAcked(t *testing.T, state *kvtest.Map, acked []string) {
	t.Helper()
	for _, p := range acked {
		k, v, _ := kvtest.ParseSet(p)
		if got, _ := state.Get(k); got != v {
			t.Fatalf("%q was reported durable and is lost", p)
		}
	}
}

// TestFixedGroupDetectorEvents: a group with fixed membership runs no
// failure detector, though its control streams carry durable delivery's
// signals: a broken control stream is only reopened later, and a
// detector signal from a peer is rejected, instead of reaching a
// detector that does not exist.
func TestFixedGroupDetectorEvents(t *testing.T) {
	m, err := newMetrics(metricnoop.NewMeterProvider(), Atomic)
	if err != nil {
		t.Fatal(err)
	}
	g := &Group{cfg: Config{SuspectTimeout: time.Second}, m: m, log: slog.New(slog.DiscardHandler), ctx: context.Background()}
	v := &view{g: g, ids: []NodeID{1, 2, 3}, ctrlRetry: make([]int64, 3)}
	r := &runner{g: g, v: v}
	v.linkDown(5, 1)
	if got, want := v.ctrlRetry[1], int64(5)+int64(time.Second); got != want {
		t.Errorf("control stream to rank 1 reopened at %d, want %d", got, want)
	}
	r.signal(5, 2, membership.EncodeSignal(membership.Message{Kind: membership.MsgHeartbeat, From: 2, To: 0}))
}

// TestDurableBarrierJoiners: in a view's durable barrier, a joiner
// counts as persisted up to the view's start (its state comes by
// transfer), every other member from 0 until it announces.
func TestDurableBarrierJoiners(t *testing.T) {
	members := func(ids ...uint64) []membership.Member {
		var out []membership.Member
		for _, id := range ids {
			out = append(out, membership.Member{ID: id, Incarnation: 1})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rec  membership.View
		want []uint64 // persisted, by rank
	}{
		{"no joiner", membership.View{Epoch: 2, Start: 40, Members: members(1, 2, 3)}, []uint64{0, 0, 0}},
		{"one joiner", membership.View{Epoch: 3, Start: 40, Members: members(1, 2, 3, 4), Joining: []membership.ID{4}}, []uint64{0, 0, 0, 40}},
		{"two joiners", membership.View{Epoch: 3, Start: 77, Members: members(1, 2, 3, 4, 5), Joining: []membership.ID{2, 5}}, []uint64{0, 77, 0, 0, 77}},
		{"joiner not a member", membership.View{Epoch: 3, Start: 9, Members: members(1, 2), Joining: []membership.ID{7}}, []uint64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := durableBarrier(&tc.rec)
			for r, want := range tc.want {
				if got := d.Persisted(r); got != want {
					t.Errorf("rank %d persisted %d, want %d", r, got, want)
				}
			}
			// The donors' announcements alone make the view's start durable.
			for r := range tc.want {
				if !slices.Contains(tc.rec.Joining, tc.rec.Members[r].ID) {
					_ = d.Announce(r, tc.rec.Start)
				}
			}
			if got := d.Barrier(); got != tc.rec.Start {
				t.Errorf("barrier %d once every donor announced the start, want %d", got, tc.rec.Start)
			}
		})
	}
}

// TestViewsDurableRestartStatelessJoiner: in a durable group without a
// StateMachine, a member whose disk was wiped joins without a transfer:
// its log starts at its view's start. When the whole group then crashes
// and starts again on its disks, that member's log takes part in the
// restart like the others': it replays from where its log starts, and the
// group serves again. (It used to count as holding no state, could not
// replay the entries before its log, and every restarted view excluded
// it again.)
func TestViewsDurableRestartStatelessJoiner(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) {
		cfg.State = nil
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self], RestartWait: 200 * time.Millisecond}
	}
	nodes := c.openAll(3, durable)
	stop := make(chan struct{})
	wg := c.load(stop, nodes[:2]...)
	c.waitCount(nodes[0], 200)
	c.crash(3)
	if err := os.RemoveAll(dirs[3]); err != nil {
		t.Fatal(err)
	}
	c.waitView(2, 2, nodes[:2]...)
	again, err := c.open(3, 1, durable)
	if err != nil {
		t.Fatal(err)
	}
	nodes = []*vsNode{nodes[0], nodes[1], again}
	c.waitMembers(3, nodes...)
	c.waitCount(again, 100)
	close(stop)
	wg.Wait()
	c.waitSameIndex(nodes...)
	checkLogStart(t, again, false)
	logStart := again.g.disk.First()
	for _, n := range nodes {
		if err := n.g.disk.WaitSynced(context.Background(), n.lastIndex()); err != nil {
			t.Fatal(err)
		}
	}
	last := nodes[0].lastIndex()

	for _, n := range nodes {
		c.crash(n.id)
	}
	nodes = c.reopen([]NodeID{1, 2, 3}, durable)
	c.waitMembers(3, nodes...)
	v, _ := nodes[2].lastView()
	if v.Start < last {
		t.Errorf("the group went on at %d (view %d), its logs end at %d", v.Start, v.Epoch, last)
	}
	// The joiner replayed its log from where it started.
	again = nodes[2]
	again.mu.Lock()
	replayed := slices.Clone(again.replayed)
	again.mu.Unlock()
	if len(replayed) == 0 || replayed[0].Index != logStart {
		t.Errorf("the joiner replayed %d messages, from %v; its log starts at %d", len(replayed), replayed[:min(1, len(replayed))], logStart)
	}
	for _, n := range nodes {
		if _, err := n.g.Send(context.Background(), []byte(fmt.Sprintf("set after.m%d-0 x", n.id)), WaitDelivered()); err != nil {
			t.Fatalf("member %d after the restart: %v", n.id, err)
		}
	}
	c.waitSameIndex(nodes...)
	for _, n := range nodes {
		n.mu.Lock()
		for _, e := range n.events {
			if e.view != nil && e.view.Excluded {
				t.Errorf("member %d was excluded after the restart (view %d)", n.id, e.view.Epoch)
			}
		}
		n.mu.Unlock()
	}
	c.check()
}
