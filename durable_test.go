package convoy

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

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
	c.waitDelivered(survivors, survivors...)
	c.waitSameIndex(survivors...)
	c.check()
	sameState(t, survivors...)

	ctx := context.Background()
	var ref []persistence.Entry
	for i, n := range survivors {
		l := n.g.disk
		var got []persistence.Entry
		if err := l.Scan(ctx, l.First(), n.lastIndex(), func(e persistence.Entry) error {
			got = append(got, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if uint64(len(got)) != n.lastIndex() {
			t.Fatalf("member %d's log holds %d entries up to index %d", n.id, len(got), n.lastIndex())
		}
		views, err := l.Views(ctx)
		if err != nil || len(views) < 2 || views[len(views)-1].Epoch < 2 {
			t.Fatalf("member %d's view records: %v, %v", n.id, views, err)
		}
		if i == 0 {
			ref = got
			continue
		}
		for k := range ref {
			a, b := ref[k], got[k]
			if a.Index != b.Index || a.Sender != b.Sender || a.Seq != b.Seq || string(a.Payload) != string(b.Payload) {
				t.Fatalf("logs differ at %d: %+v vs %+v", k, a, b)
			}
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
	nodes := c.openAll(3, durable)
	stop := make(chan struct{})
	wg := c.load(stop, nodes[:2]...)
	c.waitCount(nodes[0], 200)
	c.crash(3)
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

	v, _ := again.lastView()
	l := again.g.disk
	if l.First() != v.Start+1 {
		t.Errorf("the restarted member's log starts at %d, its view at %d", l.First(), v.Start+1)
	}
	if err := l.WaitSynced(context.Background(), again.lastIndex()); err != nil {
		t.Fatal(err)
	}
}
