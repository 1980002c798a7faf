package engine

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/convoy-gcs/convoy/internal/etcdsim"
	"github.com/convoy-gcs/convoy/internal/invariants"
	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/internal/plant"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
	"github.com/convoy-gcs/convoy/rdma"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The seeds the simulations run by default. Under the race detector, a
// seed costs several times as much, and a few seeds exercise the same
// code for races: they run fewer.
var defaultSimSeeds = cond(invariants.RaceEnabled, 8, 40)

func cond[T any](c bool, yes, no T) T {
	if c {
		return yes
	}
	return no
}

var (
	simSeeds = flag.Int("sim.seeds", defaultSimSeeds, "number of seeds TestGroupSim runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run TestGroupSim on this seed only (0: seeds 1 to -sim.seeds)")
	simFirst = flag.Uint64("sim.first", 1, "the first seed TestGroupSim runs")
	simNet   = flag.String("sim.net", "", "carry the views' traffic over `net` in every seed: wire (simulated) or rdmc (RDMC over the in-memory fabric); empty: as each seed draws")
)

// TestGroupSim runs whole groups — every member's real runtime, with its
// ordering, view-change, transfer and durable-log machinery — on
// simulated I/O inside a synctest bubble: the in-memory fabric (random
// delivery order and delays), a simulated etcd (leases on the bubble's
// clock, outages, members cut off), crashable in-memory disks, and the
// bubble's virtual clock, so that seconds of faults take milliseconds. A
// seed draws the group's size (3 to 7), durable delivery or not, each
// member's clock offset and drift, and a schedule of faults: crashes and
// restarts (of one member, of the whole durable group, with a wiped
// disk; the whole group also by a power cut in the middle of a member's
// fsync, see powercut_test.go), partitions and heals, broken links, etcd outages shorter and
// longer than the leases, members cut off from etcd. Then the faults stop
// and every check runs: the group must come back to all its members in
// one view and deliver again (liveness), every history must hold the
// guarantees (vsCluster.check: one message per index, the same views
// everywhere, virtual synchrony, per-sender order, no duplicates), every
// message a member accepted in its last incarnation is delivered, every
// message reported durable survived, and the states are equal at one
// index.
//
// The seed fixes the schedule, not the interleaving of the members'
// goroutines: a failing seed prints its schedule and usually fails again
// with
//
//	go test -run 'TestGroupSim$' -sim.seed=N ./internal/engine
//
// A long campaign: go test -run 'TestGroupSim$' -sim.seeds=5000 -timeout=0 ./internal/engine
func TestGroupSim(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	if *simSeed != 0 {
		first, n = *simSeed, 1
	}
	failed := 0
	for seed := first; seed < first+n; seed++ {
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { simulate(t, seed) })
		if !ok {
			failed++
		}
	}
	t.Logf("simulated %d seeds, %d violations", n, failed)
}

// simFaultKinds are the kinds of fault a schedule draws (simFault.kind),
// an etcd outage longer than the leases (2 s) counted apart.
var simFaultKinds = []string{"crash", "crash-all", "power-cut", "wipe", "partition", "break", "etcd-down", "etcd-down past the leases", "etcd-cut"}

// TestGroupSimFound replays the seeds that found bugs, each with what it
// found, whatever -sim.seeds says.
func TestGroupSimFound(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		found string
	}{
		{23, "a wedged ordering core's deadline fell behind the clock after an hour, and the loop spun"},
		{525, "a neighbour seen stalled, whose other watchers refuted the suspicion at once, was suspected again at once: probes went back and forth without pause"},
		{40, "after a partition healed, the final reports written during it stood for good: a joiner tipped one side to a majority of reporters without a majority of caught-up members, and the view waited forever"},
	} {
		t.Run(fmt.Sprintf("seed=%d", tc.seed), func(t *testing.T) {
			t.Log(tc.found)
			simulate(t, tc.seed)
		})
	}
}

// simulate runs seed in a synctest bubble of its own.
func simulate(t *testing.T, seed uint64) {
	synctest.Test(t, func(t *testing.T) { runSim(t, seed, simOptions{}) })
	emptyPools()
}

// emptyPools follows a bubble. Pebble keeps objects holding channels in
// sync.Pools; one made in a bubble and used in the next would fail the
// run (a channel belongs to the bubble that made it). Two collections
// empty every pool.
func emptyPools() {
	runtime.GC()
	runtime.GC()
}

// simulateRecorded runs seed as simulate does, with opts, and returns the
// violations its checks found instead of failing t.
func simulateRecorded(t *testing.T, seed uint64, opts simOptions) []string {
	rec := &simRecorder{}
	synctest.Test(t, func(t *testing.T) {
		rec.TB = t
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(simStop); !ok {
					panic(p)
				}
			}
		}()
		runSim(rec, seed, opts)
	})
	emptyPools()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.mu.found
}

// simRecorder stands for the test in a run whose violations are
// collected rather than fail the test (simulateRecorded). A fatal one
// ends the run: Fatal, Fatalf and FailNow panic with simStop, which
// simulateRecorded recovers, so that, as with testing.T, they must be
// called from the run's own goroutine. Error and Errorf may be called
// from any.
type simRecorder struct {
	testing.TB
	mu struct {
		sync.Mutex
		found []string
	}
}

// simStop ends a recorded run at its first fatal violation.
type simStop struct{}

func (r *simRecorder) add(v string) {
	r.TB.Log("violation: " + v)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.found = append(r.mu.found, v)
}

func (r *simRecorder) Error(args ...any)                 { r.add(fmt.Sprint(args...)) }
func (r *simRecorder) Errorf(format string, args ...any) { r.add(fmt.Sprintf(format, args...)) }
func (r *simRecorder) Fail()                             { r.add("Fail") }
func (r *simRecorder) Fatal(args ...any)                 { r.Error(args...); panic(simStop{}) }
func (r *simRecorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); panic(simStop{}) }

func (r *simRecorder) FailNow() {
	if !r.Failed() {
		r.add("FailNow")
	}
	panic(simStop{})
}

func (r *simRecorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.found) > 0
}

// simOptions changes what a seed draws, for the tests that want a kind
// of run (TestPlantedFaults); the zero value changes nothing.
type simOptions struct {
	// plant plants faults in every member.
	plant plant.Faults
	// durable makes delivery durable.
	durable bool
	// faults, if set, replace the schedule of faults drawn.
	faults []simFault
}

// simFault is one fault of a schedule, at a time since the load started.
type simFault struct {
	at   time.Duration
	kind string // crash, crash-all, power-cut, wipe, partition, break, etcd-down, etcd-cut
	// who is the member crashed or cut off, or the sides of a
	// partition, or the two ends of a broken link.
	who [][]NodeID
	// lasts is how long until the members restart, the partition heals,
	// or etcd comes back.
	lasts time.Duration
}

func (f simFault) String() string {
	return fmt.Sprintf("%v %s %v for %v", f.at, f.kind, f.who, f.lasts)
}

// simPlan is what a seed draws: the group, its settings and its faults.
type simPlan struct {
	n       int
	durable bool
	// stateless: the members have no StateMachine, so a joiner starts
	// without a transfer (the group workload of tests/jepsen).
	stateless bool
	// wire: the views' traffic goes over the simulated wire, not RDMC
	// over the fabric (simwire_test.go).
	wire bool
	// skew and drift are each member's clock offset and rate error.
	skew  []time.Duration
	drift []float64
	// maxDelay bounds the fabric's random delays.
	maxDelay time.Duration
	// memDisk: durable logs in memory (simDisk), each syncing fsync after
	// a write.
	memDisk bool
	fsync   time.Duration
	// checkpoints: the members' states are Checkpointers, whose
	// snapshots do not hold deliveries back (the stepped simulation).
	checkpoints bool
	faults      []simFault
}

func (p *simPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d members, durable %v, stateless %v, wire %v, delays up to %v", p.n, p.durable, p.stateless, p.wire, p.maxDelay)
	if p.durable && p.memDisk {
		fmt.Fprintf(&b, ", logs in memory syncing in %v", p.fsync)
	}
	if p.checkpoints {
		b.WriteString(", checkpoints")
	}
	for i := range p.n {
		if p.skew[i] != 0 || p.drift[i] != 0 {
			fmt.Fprintf(&b, "\n  member %d's clock: %+v, drift %+.4f", i+1, p.skew[i], p.drift[i])
		}
	}
	for _, f := range p.faults {
		fmt.Fprintf(&b, "\n  %v", f)
	}
	return b.String()
}

// simSchedule draws a plan. Crashed members come back. Without durable
// logs, crashes are drawn among the kinds, but the run skips one unless
// the group is whole (see runSim); with them, the whole group may crash
// at once and restart from its logs. A short plan has one or two faults,
// sooner and shorter.
func simSchedule(rng *rand.Rand, short bool) *simPlan {
	p := &simPlan{n: 3 + rng.IntN(5), durable: rng.IntN(2) == 0, maxDelay: time.Duration(rng.IntN(3)) * time.Millisecond}
	n := p.n
	p.skew, p.drift = make([]time.Duration, n), make([]float64, n)
	// Clocks up to 1.5 s apart (each side of true time): a member holds
	// the records stamped over a second (ordering.DefaultMaxAhead) ahead of
	// its clock until its clock catches up, which costs latency. Short
	// plans keep within it.
	skew := 1500
	if short {
		skew = 400
	}
	for i := range n {
		if rng.IntN(2) == 0 {
			p.skew[i] = time.Duration(rng.IntN(2*skew+1)-skew) * time.Millisecond
			p.drift[i] = float64(rng.IntN(2001)-1000) / 1e6
		}
	}
	ids := make([]NodeID, n)
	for i := range ids {
		ids[i] = NodeID(i + 1)
	}
	// An etcd outage lasts longer than the leases (2 s) one time in
	// three: from longer to longer+spread.
	faults, gap, lasts, longer, spread := 4, 1500, 3000, 3000, 4000
	if short {
		faults, gap, lasts, longer, spread = 2, 700, 1000, 2200, 800
	}
	at := time.Duration(0)
	for range 1 + rng.IntN(faults) {
		at += time.Duration(100+rng.IntN(gap)) * time.Millisecond
		f := simFault{at: at, lasts: time.Duration(50+rng.IntN(lasts)) * time.Millisecond}
		switch k := rng.IntN(12); {
		case k < 3:
			f.kind = "crash"
			f.who = [][]NodeID{{ids[rng.IntN(n)]}}
		case k < 4 && p.durable:
			f.kind = "crash-all"
		case k < 4:
			f.kind = "wipe"
			f.who = [][]NodeID{{ids[rng.IntN(n)]}}
		case k < 6:
			f.kind = "partition"
			perm := slices.Clone(ids)
			rng.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			cut := 1 + rng.IntN(n-1)
			f.who = [][]NodeID{sorted(perm[:cut]), sorted(perm[cut:])}
		case k < 8:
			f.kind = "break"
			a := rng.IntN(n)
			b := (a + 1 + rng.IntN(n-1)) % n
			f.who = [][]NodeID{{ids[a], ids[b]}}
		case k < 10:
			f.kind = "etcd-down"
			if rng.IntN(3) == 0 {
				f.lasts = time.Duration(longer+rng.IntN(spread)) * time.Millisecond
			}
		default:
			f.kind = "etcd-cut"
			f.who = [][]NodeID{{ids[rng.IntN(n)]}}
		}
		p.faults = append(p.faults, f)
	}
	return p
}

func sorted(ids []NodeID) []NodeID { return slices.Sorted(slices.Values(ids)) }

// simRun is one seed's run.
type simRun struct {
	t     testing.TB
	c     *vsCluster
	plan  *simPlan
	plant plant.Faults
	rng   *rand.Rand
	stop  chan struct{} // ends the load
	// ended is closed when the run ends: restarts still waiting give up.
	ended chan struct{}

	mu sync.Mutex
	// disks holds each member's disk, in durable runs.
	disks map[NodeID]*vfs.MemFS
	// loads are the senders' goroutines.
	loads []*sync.WaitGroup
	// acked holds the messages reported durable (WaitDelivered) to a
	// member that was not crashing.
	acked []string
	// dead holds the incarnations crashed (or being crashed).
	dead map[*vsNode]bool
	// cut is the power cut under way, if any (powercut_test.go).
	cut *powerCut
	// shown holds, for each member, the views its application has been
	// shown as a member (in any incarnation).
	shown map[NodeID]map[uint64]bool
}

// seedPlan returns the plan seed draws, and the random source the run
// goes on drawing from.
func seedPlan(seed uint64, short bool) (*simPlan, *rand.Rand) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	plan := simSchedule(rng, short)
	// A second stream turns half the whole-group crashes into power cuts,
	// leaving every other draw of the seed as it was.
	cuts := rand.New(rand.NewPCG(seed, seed^0xc075))
	for i, f := range plan.faults {
		if f.kind == "crash-all" && cuts.IntN(2) == 0 {
			plan.faults[i].kind = "power-cut"
			plan.faults[i].who = [][]NodeID{{NodeID(1 + cuts.IntN(plan.n))}}
		}
	}
	// A third makes one group in four stateless, and a durable group's
	// crash one in three times a wipe of the member's disk.
	more := rand.New(rand.NewPCG(seed, seed^0x57a7e))
	plan.stateless = more.IntN(4) == 0
	for i, f := range plan.faults {
		if plan.durable && f.kind == "crash" && more.IntN(3) == 0 {
			plan.faults[i].kind = "wipe"
		}
	}
	// A fourth carries the views' traffic over the simulated wire in
	// one run of two.
	plan.wire = rand.New(rand.NewPCG(seed, seed^0x3a1e)).IntN(2) == 0
	return plan, rng
}

// runSim runs one seed, inside a synctest bubble, and reports what its
// checks find to t.
func runSim(t testing.TB, seed uint64, opts simOptions) {
	plan, rng := seedPlan(seed, false)
	switch *simNet {
	case "wire":
		plan.wire = true
	case "rdmc":
		plan.wire = false
	}
	if opts.durable {
		plan.durable = true
	}
	if opts.faults != nil {
		plan.faults = opts.faults
	}
	if opts.plant != 0 {
		t.Logf("seed %d, planted fault %v: %v", seed, opts.plant, plan)
	} else {
		t.Logf("seed %d: %v", seed, plan)
	}

	ctx, cancel := context.WithCancel(context.Background())
	// opening ends the members' opens under way when the run ends.
	opening, stopOpens := context.WithCancel(context.Background())
	sim := newSimEtcd("/sim/", 2*time.Second)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		sim.run(ctx, 10*time.Millisecond)
	}()
	c := &vsCluster{t: t, leaseTTL: 2 * time.Second, log: testLogger(), sim: sim, prefix: "/sim/", openTimeout: time.Minute, ctx: opening,
		fabric: rdma.NewMemFabric(rdma.MemOptions{Seed: int64(seed), MaxDelay: plan.maxDelay}),
		nodes:  make(map[NodeID]*vsNode)}
	if plan.wire {
		c.wire = newSimWire(seed, plan.maxDelay)
	}
	r := &simRun{t: t, c: c, plan: plan, plant: opts.plant, rng: rng, stop: make(chan struct{}), ended: make(chan struct{}),
		disks: make(map[NodeID]*vfs.MemFS), dead: make(map[*vsNode]bool), shown: make(map[NodeID]map[uint64]bool)}
	sim.checkPut = r.checkPut
	var stopLoad sync.Once
	// undo tracks the goroutines that undo faults (restarts).
	var undo sync.WaitGroup
	defer func() {
		// The run may end at a violation, with the load and restarts
		// still going: they stop, and the run waits for them, which
		// must not report to the test once it returned.
		stopLoad.Do(func() { close(r.stop) })
		close(r.ended)
		stopOpens()
		undo.Wait()
		c.mu.Lock()
		nodes := mapValues(c.nodes)
		c.mu.Unlock()
		for _, n := range nodes {
			n.g.Close()
		}
		r.waitLoads()
		c.fabric.Close()
		if c.wire != nil {
			c.wire.close()
		}
		cancel()
		bg.Wait()
	}()
	n := plan.n
	if plan.durable {
		for i := range n {
			r.disks[NodeID(i+1)] = vfs.NewCrashableMem()
		}
	}
	nodes := c.openAll(n, r.config)
	for _, nd := range nodes {
		r.load(nd)
	}
	c.waitCount(nodes[0], 20)

	// The faults, each undone after it lasted.
	start := time.Now()
	for _, f := range plan.faults {
		if !r.sleep(time.Until(start.Add(f.at))) {
			break // a violation ends the run
		}
		switch f.kind {
		case "crash", "wipe":
			// Without durable logs, a group whose view lost its majority
			// cannot go on, and a wiped disk does not count toward the
			// restart of a durable one: such a member crashes only while
			// every member is up and in the latest view, with no change
			// of it under way (then the others are a majority of every
			// view the group can go on to).
			id := f.who[0][0]
			_, alive := c.node(id)
			if !alive || (!plan.durable || f.kind == "wipe") && !c.settled(n, sim.srv) {
				t.Logf("%v: skipped, the group is not whole, or its view is changing", f)
				continue
			}
			r.crash(id, f.kind == "wipe")
			undo.Add(1)
			go func() {
				defer undo.Done()
				if r.wait(f.lasts) {
					r.restart(id, n)
				}
			}()
		case "crash-all":
			live := c.live()
			for _, nd := range live {
				r.crash(nd.id, false)
			}
			r.restartAll(live, f.lasts, 0, n, &undo)
		case "power-cut":
			r.powerCut(f, n, &undo)
		case "partition":
			c.partition(f.who...)
			r.sleep(f.lasts)
			c.heal()
		case "break":
			c.breakLink(f.who[0][0], f.who[0][1])
		case "etcd-down":
			sim.srv.Down()
			r.sleep(f.lasts)
			sim.srv.Up()
			sim.poke()
		case "etcd-cut":
			sim.setCut(f.who[0][0], true)
			r.sleep(f.lasts)
			sim.setCut(f.who[0][0], false)
			sim.poke()
		}
	}
	// The restarts are over, unless a violation (a restart that failed)
	// ends the run first.
	undone := make(chan struct{})
	go func() {
		undo.Wait()
		close(undone)
	}()
	for waiting := true; waiting && !t.Failed(); {
		select {
		case <-undone:
			waiting = false
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !t.Failed() {
		// The faults are over: the group comes back whole and delivers.
		live := c.live()
		c.waitMembers(n, live...)
		for _, nd := range live {
			c.waitCount(nd, nd.delivered()+20)
		}
	}
	stopLoad.Do(func() { close(r.stop) })
	r.waitLoads()
	if t.Failed() {
		return
	}
	live := c.live()
	c.waitAccepted(live, plan.stateless)
	c.waitSameIndex(live...)
	c.check()
	if !plan.stateless {
		// A stateless joiner's application starts from nothing.
		sameState(t, live...)
	}
	r.checkAcked(live)
}

// waitLoads waits until every sender of the run has stopped.
func (r *simRun) waitLoads() {
	r.mu.Lock()
	loads := slices.Clone(r.loads)
	r.mu.Unlock()
	for _, l := range loads {
		l.Wait()
	}
}

// sleep waits for d, or until a violation is found; it reports whether
// none was.
func (r *simRun) sleep(d time.Duration) bool {
	end := time.Now().Add(d)
	for !r.t.Failed() {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		time.Sleep(min(left, 100*time.Millisecond))
	}
	return false
}

// wait waits for d, and reports whether the run is still going.
func (r *simRun) wait(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.ended:
		return false
	}
}

// config sets a member's configuration for the plan.
func (r *simRun) config(cfg *Config) {
	// Beacons and the load come every 20 ms: each costs work in every
	// member, and a seed checks the same guarantees with fewer of them.
	cfg.BeaconInterval = 20 * time.Millisecond
	cfg.WindowMessages = 256
	// Each view's multicast groups set aside a block for each sender's
	// next large message; the load sends none, and a view opened with
	// the default blocks (multicast.DefaultBlockBytes) costs a member
	// megabytes to clear.
	cfg.BlockBytes = 64 << 10
	cfg.test.plant = r.plant
	if r.plan.stateless {
		cfg.State = nil
	}
	onView, self := cfg.OnView, cfg.Self
	cfg.OnView = func(v View) {
		if !v.Excluded {
			r.mu.Lock()
			if r.shown[self] == nil {
				r.shown[self] = make(map[uint64]bool)
			}
			r.shown[self][v.Epoch] = true
			r.mu.Unlock()
		}
		onView(v)
	}
	i := int(cfg.Self) - 1
	if skew, drift := r.plan.skew[i], r.plan.drift[i]; skew != 0 || drift != 0 {
		base := time.Now()
		cfg.Clock = func() int64 {
			since := time.Since(base)
			return base.UnixNano() + int64(skew) + int64(since) + int64(float64(since)*drift)
		}
	}
	if r.plan.durable {
		r.mu.Lock()
		disk := r.disks[cfg.Self]
		r.mu.Unlock()
		cfg.Durable = &DurableConfig{Dir: "db", FS: errorfs.Wrap(disk, powerSwitch{r, cfg.Self, disk}), RestartWait: 200 * time.Millisecond}
		onView := cfg.OnView
		cfg.OnView = func(v View) {
			onView(v)
			if !v.Excluded {
				r.checkViewOnDisk(self, disk, v.Epoch)
			}
		}
	}
}

// checkPut checks a write of member id to etcd as it is made
// (checkCaughtUpMark).
func (r *simRun) checkPut(id NodeID, key, value []byte) {
	err := checkCaughtUpMark(r.c.prefix, id, key, func(epoch uint64) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.shown[id][epoch]
	})
	if err != nil {
		r.t.Error(err)
	}
}

// checkCaughtUpMark checks a write of member id to etcd under prefix as
// it is made. A joiner marks itself caught up (and so counts towards
// majorities) only once it holds the group's state: once its application
// has been shown the view that admitted it, which it is only after its
// state transfer. holds reports whether the member held the state by the
// view of epoch.
func checkCaughtUpMark(prefix string, id NodeID, key []byte, holds func(epoch uint64) bool) error {
	rest, ok := strings.CutPrefix(string(key), prefix+"caughtup/")
	if !ok {
		return nil
	}
	var epoch uint64
	if _, err := fmt.Sscanf(rest, "%d/", &epoch); err != nil {
		return fmt.Errorf("member %d: caught-up mark %q: %w", id, key, err)
	}
	if !holds(epoch) {
		return fmt.Errorf("member %d marked itself caught up in view %d before it was shown that view or an earlier one (before its state came)", id, epoch)
	}
	return nil
}

// viewInLog checks that the record of view epoch, which member id's
// application was just shown, is synced in its log in memory (see
// checkViewOnDisk).
func viewInLog(id NodeID, disk *simDisk, epoch uint64) error {
	views, open, err := disk.views(context.Background())
	if err != nil {
		return fmt.Errorf("member %d: the view records in its log: %w", id, err)
	}
	if open && !slices.ContainsFunc(views, func(v membership.View) bool { return v.Epoch == epoch }) {
		return fmt.Errorf("member %d was shown view %d, whose record is not synced in its log", id, epoch)
	}
	return nil
}

// checkViewOnDisk checks that the record of view epoch, which member
// id's application was just shown, is on the member's disk (synced): a
// durable member puts a view's record, and waits for its fsync, before it
// delivers anything of the view or of the cut that ends the view before
// (its application sees the view after that cut).
func (r *simRun) checkViewOnDisk(id NodeID, disk *vfs.MemFS, epoch uint64) {
	ctx := context.Background()
	l, err := persistence.Open(ctx, persistence.Options{Dir: "db", FS: disk.CrashClone(vfs.CrashCloneCfg{})})
	if err != nil {
		r.t.Errorf("member %d: its disk as a crash would leave it: %v", id, err)
		return
	}
	defer l.Close()
	views, err := l.Views(ctx)
	if err != nil {
		r.t.Errorf("member %d: the view records on its disk: %v", id, err)
		return
	}
	if !slices.ContainsFunc(views, func(v membership.View) bool { return v.Epoch == epoch }) {
		r.t.Errorf("member %d was shown view %d, whose record is not on its disk", id, epoch)
	}
}

// crash kills member id: its links break, its disk keeps what it synced
// and a random part of the rest (or nothing, wiped), and it stops.
func (r *simRun) crash(id NodeID, wipe bool) {
	nd, ok := r.c.node(id)
	if !ok {
		return
	}
	r.mu.Lock()
	r.dead[nd] = true
	r.mu.Unlock()
	r.c.crashLinks(id)
	if r.plan.durable {
		r.mu.Lock()
		if wipe {
			r.disks[id] = vfs.NewCrashableMem()
		} else {
			r.disks[id] = r.disks[id].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.rng.IntN(101), RNG: r.rng})
		}
		r.mu.Unlock()
	}
	r.c.crash(id)
}

// restart starts member id again, like a process supervisor, and sends
// from it.
func (r *simRun) restart(id NodeID, initial int) {
	nd, err := r.c.openJoin(id, initial, r.config)
	select {
	case <-r.ended:
		// The run ended (at a violation) and stopped the open; a member
		// it opened meanwhile is closed with the others.
		return
	default:
	}
	if err != nil {
		r.t.Errorf("restart member %d: %v", id, err)
		return
	}
	r.load(nd)
}

// load sends from member nd, one message every 20 ms, until the run's
// load stops or the member is crashed. A send that fails (the member is
// excluded, or waits out a view change) is not retried. In a durable
// run, sends wait until the message is durable (WaitDelivered).
func (r *simRun) load(nd *vsNode) {
	c := r.c
	// A restarted member sends under a name of its own: the checks want
	// each sender's numbers to grow.
	c.mu.Lock()
	name := fmt.Sprintf("m%d", nd.id)
	for _, old := range c.gone {
		if old.id == nd.id {
			name += "r"
		}
	}
	c.mu.Unlock()
	var opts []SendOption
	if r.plan.durable {
		opts = append(opts, WaitDelivered())
	}
	var wg sync.WaitGroup
	r.mu.Lock()
	r.loads = append(r.loads, &wg)
	r.mu.Unlock()
	wg.Go(func() {
		for k := 0; ; k++ {
			select {
			case <-r.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			r.mu.Lock()
			dead := r.dead[nd]
			r.mu.Unlock()
			if dead {
				return
			}
			p := fmt.Sprintf("set %s-%d %d", name, k, k)
			before := nd.exclusions()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := nd.g.Send(ctx, []byte(p), opts...)
			cancel()
			if err != nil {
				continue
			}
			nd.mu.Lock()
			if nd.exclusionsLocked() == before {
				nd.accepted = append(nd.accepted, p)
				nd.acceptedInc = append(nd.acceptedInc, before)
			}
			nd.mu.Unlock()
			r.mu.Lock()
			if r.plan.durable && !r.dead[nd] {
				r.acked = append(r.acked, p)
			}
			r.mu.Unlock()
		}
	})
}

// checkAcked checks that every message reported durable survived every
// crash: the final states hold it.
func (r *simRun) checkAcked(live []*vsNode) {
	r.mu.Lock()
	acked := slices.Clone(r.acked)
	r.mu.Unlock()
	if err := checkAckedSurvived(acked, live, r.plan.stateless); err != nil {
		r.t.Fatal(err)
	}
}

// checkAckedSurvived checks that the messages reported durable (acked) survived
// every crash: each live member's state holds them or, in a stateless
// group, where no member need hold the whole state, some live member
// delivered or replayed each.
func checkAckedSurvived(acked []string, live []*vsNode, stateless bool) error {
	if stateless {
		seen := make(map[string]bool)
		for _, nd := range live {
			nd.mu.Lock()
			for _, d := range nd.replayed {
				seen[string(d.Payload)] = true
			}
			for _, e := range nd.events {
				if e.view == nil {
					seen[string(e.d.Payload)] = true
				}
			}
			nd.mu.Unlock()
		}
		for _, p := range acked {
			if !seen[p] {
				return fmt.Errorf("%q was reported durable and no live member delivered it (%d acknowledged in all)", p, len(acked))
			}
		}
		return nil
	}
	for _, nd := range live {
		nd.mu.Lock()
		for _, p := range acked {
			k, v, _ := kvtest.ParseSet(p)
			if have, _ := nd.state.Get(k); have != v {
				nd.mu.Unlock()
				return fmt.Errorf("member %d lost %q, which was reported durable (%d acknowledged in all)", nd.id, p, len(acked))
			}
		}
		nd.mu.Unlock()
	}
	return nil
}

// node returns the running incarnation of member id.
func (c *vsCluster) node(id NodeID) (*vsNode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[id]
	return n, ok
}

// openJoin starts member id again (a new process after a crash): it
// joins the running group and gets its state by transfer.
// Like a process supervisor, it tries again while Open fails (etcd is
// out of reach, or the member was not admitted within a minute), for up
// to two minutes, or until c.ctx is done.
func (c *vsCluster) openJoin(id NodeID, initial int, opts ...func(*Config)) (*vsNode, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := c.open(id, initial, opts...)
		if err == nil || time.Now().After(deadline) || c.ctx != nil && c.ctx.Err() != nil {
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

// settled reports whether the group is whole and etcd (srv) shows no
// change of its view under way: the view the members take part in is
// the current one, and nobody suspects a member of it or filed a final
// report for it. The members' views alone do not say so: a view that
// leaves out the far side of a partition may be committed already, and
// a crash of one of its members then leaves it without a majority for
// good (long-schedule seed 517482 of TestGroupStep), while a change that
// would leave out a crashed member besides others needs its final
// report, which it can no longer file.
func (c *vsCluster) settled(n int, srv *etcdsim.Server) bool {
	if !c.whole(n) {
		return false
	}
	v, _ := c.live()[0].lastView()
	st, err := observe(srv, c.prefix)
	if err != nil {
		c.t.Fatalf("reading etcd's state: %v", err)
	}
	return st.Current.Epoch == v.Epoch && len(st.Suspects) == 0 && len(st.Reports) == 0
}

// observe reads the group's state in etcd (srv) as a member's store
// does, through an observer of the server: also while the server is
// down, and without changing it.
func observe(srv *etcdsim.Server, prefix string) (membership.State, error) {
	store, err := membership.NewStoreOn(clientv3.NewKVFromKVClient(srv.Observer(), nil), observerLease{},
		membership.StoreConfig{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return membership.State{}, err
	}
	return store.State(context.Background())
}

// observerLease is the lease of a store that only reads: it puts no
// leased key, and never closes it.
type observerLease struct{}

func (observerLease) ID() clientv3.LeaseID         { return 0 }
func (observerLease) Done() <-chan struct{}        { return nil }
func (observerLease) Err() error                   { return nil }
func (observerLease) Revoke(context.Context) error { return nil }

// live returns the members running now, by ID.
func (c *vsCluster) live() []*vsNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := mapValues(c.nodes)
	slices.SortFunc(out, func(a, b *vsNode) int { return int(a.id) - int(b.id) })
	return out
}

// exclusions returns how many times the member was excluded so far: its
// incarnation, counting from 0.
func (n *vsNode) exclusions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exclusionsLocked()
}

func (n *vsNode) exclusionsLocked() int { return n.excluded }

// waitAccepted waits until every given member holds every message that
// one of them accepted in its last incarnation (a message accepted in an
// incarnation that was excluded afterwards may be lost beyond its last
// view's cut): it delivered it, or, for one that joined later, its state
// holds it. Stateless members' joiners start from nothing: then each
// message need only be delivered by one of them.
func (c *vsCluster) waitAccepted(nodes []*vsNode, stateless bool) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range nodes {
		for {
			// Read again each time: an exclusion that takes effect only
			// now releases what its incarnation accepted.
			want := acceptedLast(nodes)
			missing := missingAccepted(n, want, nodes, stateless)
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

// acceptedLast returns the messages the members accepted in their last
// incarnations.
func acceptedLast(nodes []*vsNode) []string {
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
	return want
}

// missingAccepted returns the messages of want that member n does not
// hold (see waitAccepted).
func missingAccepted(n *vsNode, want []string, nodes []*vsNode, stateless bool) []string {
	got := func(n *vsNode, p string) bool {
		if !stateless {
			return n.got[p]
		}
		for _, o := range nodes {
			if o != n {
				o.mu.Lock()
			}
			ok := o.got[p]
			if o != n {
				o.mu.Unlock()
			}
			if ok {
				return true
			}
		}
		return false
	}
	var missing []string
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range want {
		if got(n, p) {
			continue
		}
		if k, v, ok := kvtest.ParseSet(p); ok {
			if have, ok := n.state.Get(k); ok && have == v {
				continue
			}
		}
		missing = append(missing, p)
	}
	return missing
}
