package convoy

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/rdma"
)

var (
	simSeeds = flag.Int("sim.seeds", 24, "number of seeds TestGroupSim runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run TestGroupSim on this seed only (0: seeds 1 to -sim.seeds)")
	simFirst = flag.Uint64("sim.first", 1, "the first seed TestGroupSim runs")
)

// TestGroupSim runs whole groups — every member's real runtime, with its
// ordering, view-change and transfer machinery — on simulated I/O inside
// a synctest bubble: the in-memory fabric (random delivery order and
// delays), a simulated etcd (leases on the bubble's clock, outages, members
// cut off), and the bubble's virtual clock, so that seconds of faults take
// milliseconds. A seed draws the group's size and a schedule of faults:
// crashes and restarts, partitions and heals, broken links, etcd outages
// shorter and longer than the leases, members cut off from etcd. Then the
// faults stop and every check runs: the group must come back to all its
// members in one view and deliver again (liveness), every history must
// hold the guarantees (vsCluster.check: one message per index, the same
// views everywhere, virtual synchrony, per-sender order, no duplicates),
// every message a member accepted in its last incarnation is delivered,
// and the states are equal at one index.
//
// The seed fixes the schedule, not the interleaving of the members'
// goroutines: a failing seed prints its schedule and usually fails again
// with
//
//	go test -run 'TestGroupSim' -sim.seed=N .
//
// A long campaign: go test -run TestGroupSim -sim.seeds=5000 -timeout=0 .
func TestGroupSim(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	if *simSeed != 0 {
		first, n = *simSeed, 1
	}
	failed := 0
	for seed := first; seed < first+n; seed++ {
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runSim(t, seed) })
		})
		if !ok {
			failed++
		}
	}
	t.Logf("simulated %d seeds, %d violations", n, failed)
}

// simFault is one fault of a schedule, at a time since the load started.
type simFault struct {
	at   time.Duration
	kind string // crash, partition, break, etcd-down, etcd-cut
	// who is the member crashed or cut off, or the sides of a
	// partition, or the two ends of a broken link.
	who [][]NodeID
	// lasts is how long until the member restarts, the partition heals,
	// or etcd comes back.
	lasts time.Duration
}

func (f simFault) String() string {
	return fmt.Sprintf("%v %s %v for %v", f.at, f.kind, f.who, f.lasts)
}

// simSchedule draws a group size and its faults. A crashed member comes
// back, and at most a minority of the group is crashed at any time (a
// group without durable logs cannot restart after losing a majority).
func simSchedule(rng *rand.Rand) (int, []simFault) {
	n := 3 + rng.IntN(3)
	ids := make([]NodeID, n)
	for i := range ids {
		ids[i] = NodeID(i + 1)
	}
	var out []simFault
	var crashedUntil []time.Duration // per fault, when its member is back
	at := time.Duration(0)
	for range 1 + rng.IntN(4) {
		at += time.Duration(100+rng.IntN(1500)) * time.Millisecond
		lasts := time.Duration(50+rng.IntN(3000)) * time.Millisecond
		f := simFault{at: at, lasts: lasts}
		switch k := rng.IntN(10); {
		case k < 3:
			down := 0
			for _, u := range crashedUntil {
				if u > at {
					down++
				}
			}
			if down+1 > (n-1)/2 {
				continue
			}
			f.kind = "crash"
			f.who = [][]NodeID{{ids[rng.IntN(n)]}}
			crashedUntil = append(crashedUntil, at+lasts+time.Second)
		case k < 5:
			f.kind = "partition"
			perm := slices.Clone(ids)
			rng.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			cut := 1 + rng.IntN(n-1)
			f.who = [][]NodeID{sorted(perm[:cut]), sorted(perm[cut:])}
		case k < 7:
			f.kind = "break"
			a := rng.IntN(n)
			b := (a + 1 + rng.IntN(n-1)) % n
			f.who = [][]NodeID{{ids[a], ids[b]}}
		case k < 9:
			f.kind = "etcd-down"
			if rng.IntN(3) == 0 {
				f.lasts = time.Duration(3000+rng.IntN(4000)) * time.Millisecond // longer than the leases
			}
		default:
			f.kind = "etcd-cut"
			f.who = [][]NodeID{{ids[rng.IntN(n)]}}
		}
		out = append(out, f)
	}
	return n, out
}

func sorted(ids []NodeID) []NodeID { return slices.Sorted(slices.Values(ids)) }

// runSim runs one seed, inside a synctest bubble.
func runSim(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	n, faults := simSchedule(rng)
	var sched strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&sched, "\n  %v", f)
	}
	t.Logf("seed %d: %d members; faults:%s", seed, n, sched.String())

	ctx, cancel := context.WithCancel(context.Background())
	sim := newSimEtcd("/sim/", 2*time.Second)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		sim.run(ctx, 10*time.Millisecond)
	}()
	c := &vsCluster{t: t, leaseTTL: 2 * time.Second, sim: sim, prefix: "/sim/", openTimeout: time.Minute,
		fabric: rdma.NewMemFabric(rdma.MemOptions{Seed: int64(seed), MaxDelay: time.Duration(rng.IntN(3)) * time.Millisecond}),
		nodes:  make(map[NodeID]*vsNode)}
	defer func() {
		c.mu.Lock()
		nodes := mapValues(c.nodes)
		c.mu.Unlock()
		for _, n := range nodes {
			n.g.Close()
		}
		c.fabric.Close()
		cancel()
		bg.Wait()
	}()
	opts := func(cfg *Config) {
		cfg.BeaconInterval = 5 * time.Millisecond
		cfg.WindowMessages = 256
	}
	nodes := c.openAll(n, opts)
	stop := make(chan struct{})
	load := c.simLoad(stop, 5*time.Millisecond, nodes...)
	c.waitCount(nodes[0], 20)

	// The faults, each undone after it lasted.
	start := time.Now()
	var undo sync.WaitGroup
	var restartMu sync.Mutex
	restarted := make(map[NodeID]*vsNode)
	for _, f := range faults {
		time.Sleep(time.Until(start.Add(f.at)))
		switch f.kind {
		case "crash":
			// Without durable logs, a group whose view lost its majority
			// cannot go on: a member crashes only while every member is
			// up and in the latest view (then the others are a majority).
			id := f.who[0][0]
			if !c.whole(n) {
				t.Logf("%v: skipped, the group is not whole", f)
				continue
			}
			c.crash(id)
			undo.Add(1)
			go func() {
				defer undo.Done()
				time.Sleep(f.lasts)
				nd, err := c.openJoin(id, n, opts)
				if err != nil {
					t.Errorf("restart member %d: %v", id, err)
					return
				}
				restartMu.Lock()
				restarted[id] = nd
				restartMu.Unlock()
			}()
		case "partition":
			c.fabric.Partition(f.who...)
			time.Sleep(f.lasts)
			c.fabric.Heal()
		case "break":
			c.fabric.BreakLink(f.who[0][0], f.who[0][1])
		case "etcd-down":
			sim.srv.Down()
			time.Sleep(f.lasts)
			sim.srv.Up()
			sim.poke()
		case "etcd-cut":
			sim.setCut(f.who[0][0], true)
			time.Sleep(f.lasts)
			sim.setCut(f.who[0][0], false)
			sim.poke()
		}
	}
	undo.Wait()
	if t.Failed() {
		close(stop)
		load.Wait()
		return
	}
	// Every member is back: the restarted ones send too.
	live := c.live()
	stopRestarted := make(chan struct{})
	restartMu.Lock()
	more := c.simLoad(stopRestarted, 5*time.Millisecond, mapValues(restarted)...)
	restartMu.Unlock()
	c.waitMembers(n, live...)
	for _, nd := range live {
		c.waitCount(nd, len(nd.payloads())+20)
	}
	close(stop)
	close(stopRestarted)
	load.Wait()
	more.Wait()
	c.waitAccepted(live)
	c.waitSameIndex(live...)
	c.check()
	sameState(t, live...)
}

// openJoin starts member id again (a new process after a crash): it
// joins the running group and gets its state by transfer.
// Like a process supervisor, it tries again while Open fails (etcd is
// out of reach, or the member was not admitted within a minute), for up
// to two minutes.
func (c *vsCluster) openJoin(id NodeID, initial int, opts ...func(*Config)) (*vsNode, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := c.open(id, initial, opts...)
		if err == nil || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// whole reports whether n members run and each takes part in the same
// view, of n members.
func (c *vsCluster) whole(n int) bool {
	live := c.live()
	if len(live) != n {
		return false
	}
	var epoch uint64
	for _, nd := range live {
		v, ok := nd.lastView()
		if !ok || v.Excluded || len(v.Members) != n || (epoch != 0 && v.Epoch != epoch) {
			return false
		}
		epoch = v.Epoch
	}
	return true
}

// live returns the members running now, by ID.
func (c *vsCluster) live() []*vsNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := mapValues(c.nodes)
	slices.SortFunc(out, func(a, b *vsNode) int { return int(a.id) - int(b.id) })
	return out
}

// simLoad sends from every given member, one message every pause, until
// stop is closed. A send that fails (the member is excluded, or waits
// out a view change) is not retried.
func (c *vsCluster) simLoad(stop <-chan struct{}, pause time.Duration, nodes ...*vsNode) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, n := range nodes {
		// A restarted member sends under a name of its own: the checks
		// want each sender's numbers to grow.
		c.mu.Lock()
		name := fmt.Sprintf("m%d", n.id)
		for _, old := range c.gone {
			if old.id == n.id {
				name += "r"
			}
		}
		c.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
				p := fmt.Sprintf("set %s-%d %d", name, k, k)
				before := n.exclusions()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := n.g.Send(ctx, []byte(p))
				cancel()
				if err != nil {
					continue
				}
				n.mu.Lock()
				if n.exclusionsLocked() == before {
					n.accepted = append(n.accepted, p)
					n.acceptedInc = append(n.acceptedInc, before)
				}
				n.mu.Unlock()
			}
		}()
	}
	return &wg
}

// exclusions returns how many times the member was excluded so far: its
// incarnation, counting from 0.
func (n *vsNode) exclusions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exclusionsLocked()
}

func (n *vsNode) exclusionsLocked() int {
	k := 0
	for _, e := range n.events {
		if e.view != nil && e.view.Excluded {
			k++
		}
	}
	return k
}

// waitAccepted waits until every given member holds every message that
// one of them accepted in its last incarnation (a message accepted in an
// incarnation that was excluded afterwards may be lost beyond its last
// view's cut): it delivered it, or, for one that joined later, its state
// holds it.
func (c *vsCluster) waitAccepted(nodes []*vsNode) {
	c.t.Helper()
	var want []string
	for _, n := range nodes {
		n.mu.Lock()
		last := n.exclusionsLocked()
		for i, p := range n.accepted {
			if n.acceptedInc[i] == last {
				want = append(want, p)
			}
		}
		n.mu.Unlock()
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range nodes {
		for {
			var missing []string
			got := n.payloads()
			n.mu.Lock()
			for _, p := range want {
				if got[p] {
					continue
				}
				if k, v, ok := kvtest.ParseSet(p); ok {
					if have, ok := n.state.Get(k); ok && have == v {
						continue
					}
				}
				missing = append(missing, p)
			}
			n.mu.Unlock()
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("member %d misses %d of %d accepted messages, first %q, last %q", n.id, len(missing), len(want), missing[0], missing[len(missing)-1])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
