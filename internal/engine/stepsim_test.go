package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/internal/etcdsim"
	"github.com/convoy-gcs/convoy/internal/invariants"
	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/internal/plant"
	"github.com/convoy-gcs/convoy/internal/vsync"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/rdma"
)

var (
	stepSeeds     = flag.Int("step.seeds", cond(invariants.RaceEnabled, 50, 10_000), "number of seeds TestGroupStep runs")
	stepSeed      = flag.Uint64("step.seed", 0, "run TestGroupStep on this seed only, printing its trace (0: seeds from -step.first)")
	stepFirst     = flag.Uint64("step.first", 1, "the first seed TestGroupStep runs")
	stepLong      = flag.Bool("step.long", false, "TestGroupStep draws the longer schedules of TestGroupSim (up to four faults, clocks up to 1.5 s apart)")
	stepSlow      = flag.Bool("step.slow", false, "TestGroupStep makes the work members spawn for their loops slow (stepOptions.slowWork)")
	stepTraceKeep = 200 // trace lines a failing seed prints
)

// stepLeaseTTL is the members' etcd lease TTL in the stepped simulation
// (simSchedule draws etcd outages shorter and longer than it).
const stepLeaseTTL = 2 * time.Second

// TestGroupStep runs whole groups deterministically: every member's
// production runner — its view-change core, ordering core, failure
// detector, state transfers, durable log — driven by one goroutine on a
// virtual clock, with the I/O simulated (the wire for the views' traffic,
// a Manual rdma.MemFabric for state transfers, logs in memory that sync
// an fsync's time after a write, a simulated etcd with leases on the
// virtual clock) and every draw made from the seed. The same seed gives
// the same run, step for step: a run's fingerprint (a hash of every step
// it took) is checked by running seeds twice.
//
// A seed draws its group (3 to 7 members; durable or not; with a state
// machine, whose state joiners get by transfer, or stateless) and a short
// schedule of faults (simSchedule): crashes and restarts (on the same
// disk, or a wiped one), the whole durable group crashing at once or in
// a power cut, partitions, broken links, etcd outages shorter and longer
// than the leases (and now and then than the retries of etcd writes),
// members cut off from etcd. Then the faults stop and the checks run: the
// group comes back whole and delivers again within a bound of virtual
// time (liveness), the histories hold the guarantees (vsCluster.check),
// the members hold the same state, nothing reported durable was lost, a
// view is shown only once its record is synced, a joiner marks itself
// caught up only once its state came, and no member was excluded that
// no fault touched (checkExclusions).
//
// A failing seed prints its last steps and replays, the same, with
//
//	go test -run 'TestGroupStep$' -step.seed=N ./internal/engine
//
// A long campaign: go test -run 'TestGroupStep$' -step.seeds=1000000 -timeout=0 ./internal/engine
func TestGroupStep(t *testing.T) {
	first, n := *stepFirst, uint64(*stepSeeds)
	if *stepSeed != 0 {
		first, n = *stepSeed, 1
	}
	var failed, steps, synced, ran atomic.Int64
	// The seeds beyond the first minStepSeeds start only within half the
	// time left before the test binary's deadline (-timeout), so that a
	// machine several times slower than usual (a loaded one) runs fewer
	// seeds rather than time out; the log says how many ran.
	budget := time.Time{}
	if d, ok := t.Deadline(); ok {
		budget = time.Now().Add(time.Until(d) / 2)
	}
	seedRan := make([]atomic.Bool, n)
	// A seed's run allocates much that dies young: collecting less often
	// saves a fifth of the time. (Top-level tests run one at a time.)
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	t.Run("seeds", func(t *testing.T) {
		for seed := first; seed < first+n; seed++ {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				if seed-first >= minStepSeeds && !budget.IsZero() && time.Now().After(budget) {
					return
				}
				ran.Add(1)
				seedRan[seed-first].Store(true)
				// Deferred: a violation ends the seed's goroutine
				// (t.Fatal).
				defer func() {
					if t.Failed() {
						failed.Add(1)
					}
				}()
				res := runStepWith(t, seed, stepOptions{verbose: *stepSeed != 0, long: *stepLong, slowWork: *stepSlow})
				steps.Add(res.steps)
				synced.Add(int64(res.synced))
			})
		}
	})
	t.Logf("simulated %d of %d seeds, %d violations (%d steps, %d Syncs checked)", ran.Load(), n, failed.Load(), steps.Load(), synced.Load())
	// What the seeds drew (a plan is a function of its seed alone). The
	// default run, and any of 200 seeds or more, must have drawn every
	// kind of fault: the rarest, a crash of a whole durable group, comes
	// about 6 times in 200 seeds.
	kinds := make(map[string]int)
	sizes := make(map[int]int)
	durable := 0
	for seed := first; seed < first+n; seed++ {
		if !seedRan[seed-first].Load() {
			continue
		}
		p, _ := seedPlan(seed, !*stepLong)
		sizes[p.n]++
		if p.durable {
			durable++
		}
		for _, f := range p.faults {
			k := f.kind
			if k == "etcd-down" && f.lasts > stepLeaseTTL {
				k = "etcd-down past the leases"
			}
			kinds[k]++
		}
	}
	var drawn []string
	for _, k := range simFaultKinds {
		drawn = append(drawn, fmt.Sprintf("%s %d", k, kinds[k]))
		if ran.Load() >= minStepSeeds && kinds[k] == 0 {
			t.Errorf("no seed drew a fault of kind %s", k)
		}
	}
	t.Logf("faults drawn: %s; groups of 3 to 7 members: %v; durable: %d", strings.Join(drawn, ", "), []int{sizes[3], sizes[4], sizes[5], sizes[6], sizes[7]}, durable)
}

// minStepSeeds is how many seeds TestGroupStep runs whatever the time
// (if -step.seeds asks for as many): enough to draw every kind of fault.
const minStepSeeds = 200

// TestGroupStepFound replays the seeds that found bugs, each with what it
// found, whatever -step.seeds says.
func TestGroupStepFound(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		opts  stepOptions
		found string
	}{
		{1846, stepOptions{noSync: true}, "a stateless member joining a restart of the group dropped the entries its log held back, which its claim had put in the group's sequence: after a power cut of the whole group, no member handed a message reported durable again"},
		{501393, stepOptions{long: true}, "a member excluded while it snapshotted the state for joiners waited, in its loop, for the snapshot job to end, which the simulation's one goroutine was to run after the loop: the run hung (the simulation's spawn now runs such a job when the loop waits for it)"},
		{511730, stepOptions{long: true}, "a stateless durable group restarted from the members' logs: the members whose logs were shorter than the chosen one handed their entries to the application and started their logs again at the restart's start, so only the chosen log's holder kept the group's messages on disk; a second power cut took its unsynced durable mark, it rejoined with nothing too, and messages reported durable were on no disk (a recovered view now sends such members the messages their logs lack, Suffixes)"},
		{513627, stepOptions{long: true}, "in a group without a StateMachine, a member still restoring when the next view installed fetched a snapshot, which no donor serves: after a recovered view's suffix fetch failed across a partition, the fetch stalled for good and the group did not come back whole (such a member is now caught up at once, as of the view's start)"},
		{517482, stepOptions{long: true}, "the simulation crashed a member of a group without durable logs while every member still took part in the same view of all of them, but a view leaving out the far side of a partition was committed already: the crash left that view without a majority for good (a crash now waits for etcd to show no change under way)"},
		{1825, stepOptions{long: true, slowWork: true}, "a joiner that got its state in one view could not mark itself caught up while it was cut off from etcd, and so was still listed as joining in the next view, in which it marked itself caught up before that view was shown to it (a donor's slow snapshot held it back): the mark was right, the simulation's check, which wanted the mark's own view shown, was not (it now asks that the member was shown that view or an earlier one since it last started or was excluded)"},
		{604016, stepOptions{long: true}, "the simulation fixed the messages the group owed before a member whose lease ran out during an etcd outage was excluded, which happened only once etcd answered again: the messages it had accepted in that incarnation beyond the new view's cut were dropped, as the protocol says, and counted as lost (what is owed is now read at every check)"},
	} {
		t.Run(fmt.Sprintf("seed=%d", tc.seed), func(t *testing.T) {
			t.Log(tc.found)
			runStepWith(t, tc.seed, tc.opts)
		})
	}
}

var slowStepSeeds = flag.Int("step.slow.seeds", cond(invariants.RaceEnabled, 10, 300), "number of seeds TestGroupStepSlowWork runs")

// TestGroupStepSlowWork runs TestGroupStep's simulation with slow work
// (stepOptions.slowWork): each snapshot a donor reads for joiners, each
// transferred state a joiner installs, takes up to three suspect
// timeouts longer, as a large state's does. The work runs off the loop,
// which goes on heartbeating: besides TestGroupStep's checks, none of
// it may get a member excluded that no fault touched (checkExclusions).
// The same runs on other seeds, and on longer schedules:
//
//	go test -run 'TestGroupStep$' -step.slow [-step.long] -step.first=N -step.seeds=M ./internal/engine
func TestGroupStepSlowWork(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*slowStepSeeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runStepWith(t, seed, stepOptions{slowWork: true})
		})
	}
}

// TestGroupStepReplays runs seeds twice: each run must take the same
// steps.
func TestGroupStepReplays(t *testing.T) {
	for seed := uint64(1); seed <= cond[uint64](invariants.RaceEnabled, 5, 20); seed++ {
		a := runStep(t, seed, false)
		b := runStep(t, seed, false)
		if a != b {
			t.Errorf("seed %d: two runs differ: %+v, then %+v", seed, a, b)
		}
	}
}

// TestPlantedFaultsStepped plants protocol faults, one at a time, in
// every member of the deterministic simulation's groups, and checks that
// the seeds catch each, within a bound: delivering beyond the view's cut
// before the cut is committed (plant.EarlyDelivery), showing a view
// whose record is not synced in the log (plant.UnsyncedView), a joiner
// marking itself caught up before its state came (plant.EarlyCaughtUp),
// and a restart replaying its log beyond the durable mark
// (plant.ReplayBeyondDurable, which takes a power cut: a member keeping
// writes the others lost). A run is a function of its seed, so the seed
// that catches a fault is always the same one, and it must pass without
// the fault.
func TestPlantedFaultsStepped(t *testing.T) {
	for _, tc := range []plantedCase{
		{fault: plant.EarlyDelivery, seeds: 20},
		{fault: plant.UnsyncedView, seeds: 20},
		{fault: plant.EarlyCaughtUp, seeds: 20},
		// The power fails while member 1 has writes the others lose, and
		// member 1 restarts after the others restarted the group.
		{fault: plant.ReplayBeyondDurable, durable: true, seeds: 100, faults: []simFault{{at: 500 * time.Millisecond, kind: "power-cut", who: [][]NodeID{{1}}, lasts: 300 * time.Millisecond}}},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			findPlanted(t, tc.fault, tc.seeds, nil, func(seed uint64, planted plant.Faults) []string {
				return runStepRecorded(t, seed, stepOptions{plant: planted, durable: tc.durable, faults: tc.faults})
			})
		})
	}
}

// runStepRecorded runs seed with planted faults and returns the
// violations its checks found instead of failing t.
func runStepRecorded(t *testing.T, seed uint64, opts stepOptions) []string {
	rec := &simRecorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(simStop); !ok {
					panic(p)
				}
			}
		}()
		runStepWith(rec, seed, opts)
	}()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.mu.found
}

// stepResult sums up a run: how many steps it took, until when, and the
// hash of every step.
type stepResult struct {
	steps int64
	end   time.Duration
	hash  uint64
	// synced counts the Syncs that returned and were checked.
	synced int
}

// stepSim is one seed's run: the scheduler, the simulated I/O and the
// members.
type stepSim struct {
	t     testing.TB
	plan  *simPlan
	plant plant.Faults
	rng   *rand.Rand
	// syncRng draws the load's Syncs (apart from rng, so that they leave
	// the rest of the run's draws alone); noSync: none; syncs counts those
	// that returned and were checked.
	syncRng *rand.Rand
	noSync  bool
	syncs   int
	// workRng, if set (stepOptions.slowWork), draws how much longer each
	// piece of spawned work takes, apart from rng.
	workRng *rand.Rand
	// excluded records each exclusion a member saw (OnView), checked at
	// the end against the faults (checkExclusions).
	excluded []stepExclusion
	// topDelivered is the highest index any member has delivered.
	topDelivered uint64
	// now is the virtual time, in nanoseconds since base; tasks run in
	// order of time, then of scheduling.
	base  time.Time
	now   time.Duration
	tasks stepTasks
	seq   uint64
	steps int64
	hash  uint64
	// trace keeps the last steps, printed when the run fails.
	trace   []stepLine
	traceAt int
	verbose bool
	etcd    *simEtcd
	rev     int64 // the revision the members were last woken for
	// wire carries the views' traffic in the seeds that draw it; fabric
	// the others' (RDMC), and every seed's state transfers, in Manual
	// mode on the virtual clock. Each steps when its driver runs it.
	wire         *simWire
	wireDriver   *stepDriver
	fabric       *rdma.MemFabric
	fabricDriver *stepDriver
	c            *vsCluster
	members      map[NodeID]*stepMember
	loadStop     bool
	// shown holds, for each member, the views its application has been
	// shown as a member (in any incarnation).
	shown map[NodeID]map[uint64]bool
	// holdsSince is, for each member, the epoch of the first view its
	// current incarnation was shown as a member since it last took part
	// in none (it started, or was excluded): from then on it holds the
	// group's state. Zero: it does not (yet).
	holdsSince map[NodeID]uint64
	// disks are the members' durable logs, in durable runs; acked holds
	// the messages reported durable to their senders (delivered to them:
	// what Send with WaitDelivered reports).
	disks map[NodeID]*simDisk
	acked []string
	// restarting counts the members crashed and not yet started again.
	restarting int
	// cutAt is a power cut waiting for its member's next write.
	cutAt *simFault
	// spins counts the loop's timer running again at one instant.
	spinAt time.Duration
	spins  int
	// topics records the topics' deliveries, in runs with topics.
	topics *topicHist
}

type stepTask struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// stepTasks is a min-heap of tasks by time, then by scheduling order
// (container/heap would box every task).
type stepTasks []stepTask

func (h stepTasks) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *stepTasks) push(t stepTask) {
	*h = append(*h, t)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *stepTasks) pop() stepTask {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = stepTask{}
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(q) && q.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// at schedules fn at virtual time at (not before now).
func (s *stepSim) at(at time.Duration, fn func()) {
	s.seq++
	s.tasks.push(stepTask{at: max(at, s.now), seq: s.seq, fn: fn})
}

// after schedules fn d from now.
func (s *stepSim) after(d time.Duration, fn func()) { s.at(s.now+d, fn) }

// latency draws how long an etcd call or a state read takes.
func (s *stepSim) latency() time.Duration {
	return time.Duration(s.rng.IntN(2000)) * time.Microsecond
}

// clock is the wall time at virtual time now.
func (s *stepSim) clock() time.Time { return s.base.Add(s.now) }

// stepLine is one line of the trace: a text, or an event a member's loop
// took (formatted only when printed).
type stepLine struct {
	at   time.Duration
	text string
	id   NodeID
	ev   event
}

func (l stepLine) String() string {
	if l.text != "" {
		return fmt.Sprintf("%v %s", l.at, l.text)
	}
	return fmt.Sprintf("%v m%d %s", l.at, l.id, evName(l.ev))
}

// note adds a line to the trace.
func (s *stepSim) note(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	h := fnv.New64a()
	h.Write([]byte(text))
	s.add(stepLine{at: s.now, text: text}, h.Sum64())
}

// noteEvent adds to the trace an event member id's loop takes.
func (s *stepSim) noteEvent(id NodeID, ev event) {
	var epoch uint64
	if ev.v != nil {
		epoch = ev.v.rec.Epoch
	}
	h := uint64(ev.kind)<<56 ^ uint64(id)<<48 ^ epoch<<32 ^ uint64(ev.from)<<24 ^ uint64(ev.rec.TS) ^ ev.rec.Seq*0x9e3779b97f4a7c15 ^ ev.imm
	s.add(stepLine{at: s.now, id: id, ev: event{kind: ev.kind, v: ev.v, from: ev.from, rec: ev.rec, imm: ev.imm, err: ev.err, state: ev.state, payload: ev.payload}}, h)
}

func (s *stepSim) add(l stepLine, h uint64) {
	s.hash = (s.hash^uint64(l.at))*0x100000001b3 + h
	if s.verbose {
		s.t.Log(l.String())
		return
	}
	if len(s.trace) < stepTraceKeep {
		s.trace = append(s.trace, l)
		return
	}
	s.trace[s.traceAt] = l
	s.traceAt = (s.traceAt + 1) % stepTraceKeep
}

// fail reports a violation with the run's last steps, and ends the run.
func (s *stepSim) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	var b strings.Builder
	for i := range len(s.trace) {
		b.WriteString("\n  " + s.trace[(s.traceAt+i)%len(s.trace)].String())
	}
	s.t.Fatalf("at %v: %s\nlast steps:%s", s.now, msg, b.String())
}

// step runs the next task; it reports whether there was one due by until.
func (s *stepSim) step(until time.Duration) bool {
	if len(s.tasks) == 0 || s.tasks[0].at > until {
		return false
	}
	task := s.tasks.pop()
	if task.at > s.now {
		s.now = task.at
		s.etcd.srv.Advance(s.clock().UnixNano())
	}
	s.steps++
	task.fn()
	if rev := s.etcd.srv.Revision(); rev != s.rev {
		// A watch fires at every member.
		s.rev = rev
		for _, id := range sortedKeys(s.members, cmpNodeID) {
			s.members[id].wake()
		}
	}
	return true
}

func cmpNodeID(a, b NodeID) int { return int(a) - int(b) }

// run runs tasks until the virtual time until, or until done holds
// (checked every poll).
func (s *stepSim) run(until time.Duration, done func() bool) bool {
	const poll = 10 * time.Millisecond
	next := s.now + poll
	for {
		if s.now >= next {
			if done != nil && done() {
				return true
			}
			next = s.now + poll
		}
		if !s.step(min(until, next)) {
			if s.now >= until {
				return done != nil && done()
			}
			s.now = min(until, next)
			s.etcd.srv.Advance(s.clock().UnixNano())
		}
	}
}

// stepMember is one incarnation of a member.
type stepMember struct {
	s     *stepSim
	id    NodeID
	node  *vsNode
	g     *Group
	r     *runner
	lease *stepLease
	q     []event
	spare []event // the slice q was, to be reused
	// queued: a run of the loop is scheduled; timer: the generation of
	// the loop's timer (older timers do nothing).
	queued  bool
	timer   uint64
	reading bool
	// dead: crashed; ended: its loop stopped (the group failed).
	dead, ended bool
	name        string
	k           int
	lastOK      time.Duration // the lease's last renewal
	// inView: the member takes part in a view in its current incarnation,
	// which began after index joinStart (OnView).
	inView    bool
	joinStart uint64
	// syncs are the Syncs made through the loop and not yet answered
	// (startSync): each takes its answer if there is one.
	syncs []func() bool
}

var _ host = (*stepMember)(nil)

func (m *stepMember) gone() bool { return m.dead || m.ended }

func (m *stepMember) post(_ *Group, ev event) {
	if m.gone() {
		return
	}
	m.q = append(m.q, ev)
	if !m.queued {
		m.queued = true
		m.s.after(0, m.runLoop)
	}
}

// runLoop is one pass of Group.loop: the events queued, then settle,
// then the timer for the next deadline.
func (m *stepMember) runLoop() {
	m.queued = false
	if m.gone() {
		return
	}
	// The events queued, in order; those posted meanwhile go to a fresh
	// queue, taken next (the two slices take turns).
	for len(m.q) > 0 {
		q := m.q
		m.q = m.spare[:0]
		for i, ev := range q {
			q[i] = event{}
			m.s.noteEvent(m.id, ev)
			if !m.r.handle(ev) {
				m.end()
				return
			}
		}
		m.spare = q[:0]
	}
	// What the disk and the work spawned for the loop left in its
	// channels (the other cases of Group.loop's select), looked at in a
	// fixed order: a select would choose among them at random.
	var diskFailed <-chan struct{}
	if m.g.disk != nil {
		diskFailed = m.g.disk.Failed()
	}
	for r := m.r; r != nil; {
		if ready(m.g.synced) {
			if r.v != nil && r.v.dur != nil {
				r.announcePersisted()
			}
			continue
		}
		if ready(diskFailed) {
			r.diskErr = m.g.disk.Err() // settle ends the loop
			break
		}
		parts, snapEnd := r.snapEvents()
		select {
		case sn := <-parts:
			m.s.note("m%d snapshotted part %d: %v", m.id, sn.part, sn.err)
			r.snapshotted(sn)
			continue
		default:
		}
		if ready(snapEnd) {
			m.s.note("m%d snapshot job ended", m.id)
			r.snapEnded()
			continue
		}
		if ready(r.own) {
			m.s.note("m%d snapshot read", m.id)
			r.ownReleased()
			continue
		}
		break
	}
	m.settle()
}

// ready reports whether a receive from ch would not block, and makes it.
func ready[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// poke runs the member's loop soon, with or without events.
func (m *stepMember) poke() {
	if m.gone() || m.queued {
		return
	}
	m.queued = true
	m.s.after(0, m.runLoop)
}

func (m *stepMember) spawn(_ *Group, fn func()) (hurry func()) {
	ran := false
	d := m.s.latency()
	if m.s.workRng != nil {
		d += time.Duration(m.s.workRng.Int64N(int64(slowWorkMax) + 1))
	}
	m.s.after(d, func() {
		if ran || m.gone() {
			return
		}
		ran = true
		fn()
		m.poke()
	})
	// The member's loop, running, waits for fn: it runs now, on the one
	// goroutine, where production's would have run meanwhile.
	return func() {
		if !ran {
			ran = true
			fn()
		}
	}
}

func (m *stepMember) fetch(g *Group, cfg membership.FetchConfig, done func([][]byte, error)) (stop func()) {
	m.s.note("m%d fetch from %v on stream %d", m.id, cfg.Donors, cfg.Stream)
	t, err := membership.StartFetch(g.ctx, cfg, func(parts [][]byte, err error) {
		m.s.note("m%d fetch on stream %d ended: %v", m.id, cfg.Stream, err)
		done(parts, err)
	})
	if err != nil {
		// As Fetch would return it, on another goroutine.
		m.s.after(0, func() { done(nil, err) })
		return func() {}
	}
	return func() { t.Stop(context.Canceled) }
}

func (m *stepMember) afterFunc(d time.Duration, f func()) membership.Timer {
	t := &stepTimer{}
	m.s.after(d, func() {
		if !t.stopped {
			t.ran = true
			f()
		}
	})
	return t
}

func (m *stepMember) rand() *rand.Rand { return m.s.rng }

// stepTimer is a call a member's state transfer scheduled.
type stepTimer struct{ stopped, ran bool }

func (t *stepTimer) Stop() bool {
	if t.stopped || t.ran {
		return false
	}
	t.stopped = true
	return true
}

func (m *stepMember) settle() {
	ok := m.r.settle()
	if len(m.syncs) > 0 && !m.gone() {
		k := 0
		for _, done := range m.syncs {
			if !done() {
				m.syncs[k] = done
				k++
			}
		}
		clear(m.syncs[k:])
		m.syncs = m.syncs[:k]
	}
	if !ok {
		m.end()
		return
	}
	m.timer++
	gen := m.timer
	wait := max(m.r.deadline()-time.Duration(m.g.cfg.Clock()), 0)
	if wait > 30*time.Minute {
		return
	}
	if wait == 0 {
		if m.s.spinAt == m.s.now {
			if m.s.spins++; m.s.spins > 10000 {
				m.s.fail("member %d's loop spins: its deadline stays in the past", m.id)
			}
		} else {
			m.s.spinAt, m.s.spins = m.s.now, 0
		}
	}
	m.s.after(wait, func() {
		if gen == m.timer && !m.gone() {
			m.settle()
		}
	})
}

// end is the end of Group.loop.
func (m *stepMember) end() {
	m.ended = true
	r, g := m.r, m.g
	r.endChange()
	r.stopSnapshot() // its part in progress is a task the run never gets to
	if r.v != nil {
		r.v.close()
	}
	if g.Err() != nil {
		g.mem.withdraw(g)
	}
	m.s.fail("member %d's group failed: %v", m.id, g.Err())
}

func evName(ev event) string {
	switch ev.kind {
	case evSend:
		return fmt.Sprintf("send %q", ev.payload)
	case evRecord:
		return fmt.Sprintf("record e%d from %d kind %d ts %d seq %d", ev.v.rec.Epoch, ev.from, ev.rec.Kind, ev.rec.TS, ev.rec.Seq)
	case evFail:
		return fmt.Sprintf("fail e%d: %v", ev.v.rec.Epoch, ev.err)
	case evSignal:
		return fmt.Sprintf("signal e%d from %d %x", ev.v.rec.Epoch, ev.from, ev.imm)
	case evState:
		return fmt.Sprintf("state e%d rev %d", ev.state.Current.Epoch, ev.state.Revision)
	case evLinkDown:
		return fmt.Sprintf("link down e%d to %d", ev.v.rec.Epoch, ev.from)
	case evPersisted:
		return fmt.Sprintf("persisted e%d from %d %d", ev.v.rec.Epoch, ev.from, ev.imm)
	}
	return fmt.Sprintf("event %d", ev.kind)
}

func (m *stepMember) etcdWrite(g *Group, wait time.Duration, what string, fn func(ctx context.Context, s *membership.Store) error, done func(error)) {
	start := m.s.now + wait
	backoff := 20 * time.Millisecond
	var try func()
	try = func() {
		if m.gone() {
			done(context.Canceled)
			return
		}
		err := fn(g.ctx, g.mem.current())
		m.s.note("m%d etcd %s: %v", m.id, what, err)
		var deadline error
		if m.s.now-start > asyncTimeout {
			deadline = context.DeadlineExceeded
		}
		if !asyncRetry(g, what, err, deadline) {
			done(err)
			return
		}
		m.s.after(backoff, try)
		backoff = min(2*backoff, time.Second)
	}
	m.s.after(wait+m.s.latency(), try)
}

// wake is a watch firing: the member reads the state soon.
func (m *stepMember) wake() {
	if m.reading || m.gone() || m.r == nil {
		return
	}
	m.reading = true
	m.s.after(m.s.latency(), m.read)
}

// read is member.follow's read of the state, handed to the loop.
func (m *stepMember) read() {
	m.reading = false
	if m.gone() {
		return
	}
	st, err := m.g.mem.current().State(m.g.ctx)
	if err != nil {
		m.s.note("m%d read state: %v", m.id, err)
		return
	}
	m.g.mem.learn(&st)
	m.post(m.g, event{kind: evState, state: &st})
}

// resync reads the state every half lease, as member.follow does.
func (m *stepMember) resync() {
	if m.gone() {
		return
	}
	m.wake()
	m.s.after(max(m.g.cfg.Etcd.LeaseTTL/2, 100*time.Millisecond), m.resync)
}

// keepAlive renews the lease a third of a TTL apart while the member
// reaches etcd, and registers on a new lease once it is lost (as
// member.watch and renew do).
func (m *stepMember) keepAlive() {
	if m.gone() {
		return
	}
	ttl := m.g.cfg.Etcd.LeaseTTL
	l := m.lease
	if m.s.etcd.isCut(m.id) {
		if m.s.now-m.lastOK >= ttl {
			l.Lose(errCutOff)
		}
	} else if l.KeepAlive() == nil {
		m.lastOK = m.s.now
	}
	if l.Err() != nil {
		m.s.note("m%d lease lost: %v", m.id, l.Err())
		m.register(m.g.mem.mu.self, func(store *membership.Store, l *stepLease) {
			mem := m.g.mem
			mem.mu.Lock()
			old := mem.mu.store
			mem.mu.store = store
			withdrawn := mem.mu.withdrawn
			mem.mu.Unlock()
			if withdrawn {
				store.Close()
				return
			}
			old.Close()
			m.lease = l
			m.s.after(ttl/3, m.keepAlive)
		})
		return
	}
	m.s.after(ttl/3, m.keepAlive)
}

// register makes a store on a lease of its own and registers self in it,
// trying again after the pauses member.register makes, then calls done.
func (m *stepMember) register(self membership.Member, done func(*membership.Store, *stepLease)) {
	m.registerAgain(self, registerBackOff(), done)
}

func (m *stepMember) registerAgain(self membership.Member, b *backoff.ExponentialBackOff, done func(*membership.Store, *stepLease)) {
	if m.gone() {
		return
	}
	store, l, err := m.newStore()
	if err == nil {
		if err = store.Register(context.Background(), self); err != nil {
			store.Close()
		}
	}
	if err != nil {
		m.s.note("m%d register: %v", m.id, err)
		// The pause's jitter comes from the seed, not from the backoff's
		// own source.
		f := b.RandomizationFactor
		b.RandomizationFactor = 0
		pause := b.NextBackOff()
		b.RandomizationFactor = f
		wait := time.Duration(float64(pause) * (1 - f + 2*f*m.s.rng.Float64()))
		m.s.after(wait, func() { m.registerAgain(self, b, done) })
		return
	}
	m.lastOK = m.s.now
	done(store, l)
}

func (m *stepMember) newStore() (*membership.Store, *stepLease, error) {
	e := m.s.etcd
	if e.isCut(m.id) {
		return nil, nil, etcdsim.ErrUnavailable
	}
	cl, err := e.srv.GrantClientLease(e.ttl)
	if err != nil {
		return nil, nil, err
	}
	l := &stepLease{ClientLease: cl, m: m}
	b := e.member(m.id)
	store, err := membership.NewStoreOn(clientv3.NewKVFromKVClient(simKV{b}, nil), l, membership.StoreConfig{Prefix: e.prefix})
	if err != nil {
		cl.Lose(err)
		return nil, nil, err
	}
	return store, l, nil
}

// stepLease is a member's hold on its lease; keepAlive renews it.
type stepLease struct {
	*etcdsim.ClientLease
	m *stepMember
}

// Revoke revokes the lease, unless the member crashed or is cut off:
// its lease is then left to expire.
func (l *stepLease) Revoke(ctx context.Context) error {
	if l.m.dead || l.m.s.etcd.isCut(l.m.id) {
		l.Lose(errCutOff)
		return nil
	}
	return l.ClientLease.Revoke(ctx)
}

// stepEtcd is a member's etcdBackend in the stepped simulation: its
// stores come from stepMember.register, and nothing watches.
type stepEtcd struct{}

func (stepEtcd) newStore(context.Context) (*membership.Store, error) {
	return nil, errors.New("stepped simulation: stores come from stepMember.register")
}
func (stepEtcd) watch(context.Context, *membership.Store) <-chan membership.Change { return nil }
func (stepEtcd) abandon()                                                          {}
func (stepEtcd) close()                                                            {}

// open starts an incarnation of member id; initial is
// Config.InitialMembers.
func (s *stepSim) open(id NodeID, initial int) {
	n := &vsNode{id: id, state: kvtest.New()}
	m := &stepMember{s: s, id: id, node: n}
	name := fmt.Sprintf("m%d", id)
	for _, old := range s.c.gone {
		if old.id == id {
			name += "r"
		}
	}
	m.name = name
	i := int(id) - 1
	skew, drift := s.plan.skew[i], s.plan.drift[i]
	cfg := Config{
		Self: id, InitialMembers: initial,
		Etcd:           &EtcdConfig{Prefix: s.c.prefix, LeaseTTL: s.c.leaseTTL},
		BeaconInterval: 40 * time.Millisecond, WindowMessages: 256, NoWait: true,
		// Buffers sized to the simulation's small messages and states
		// (RDMC's receive buffers and a joiner's are allocated again at
		// every view and transfer).
		BlockBytes:        16 << 10,
		test:              hooks{host: m, etcd: stepEtcd{}, batchBytes: 8 << 10, transferChunkBytes: 16 << 10, plant: s.plant},
		HeartbeatInterval: 40 * time.Millisecond, SuspectTimeout: stepSuspectTimeout,
		Logger: testLogger(),
		Clock: func() int64 {
			return s.base.UnixNano() + int64(skew) + int64(s.now) + int64(float64(s.now)*drift)
		},
		OnView: func(v View) {
			s.note("m%d view %d %v excluded %v start %d", id, v.Epoch, v.Members, v.Excluded, v.Start)
			switch {
			case v.Excluded:
				m.inView = false
				s.excluded = append(s.excluded, stepExclusion{id: id, epoch: v.Epoch, at: s.now})
				delete(s.holdsSince, id)
			case !m.inView:
				m.inView, m.joinStart = true, v.Start
				s.holdsSince[id] = v.Epoch
			}
			if !v.Excluded {
				if s.shown[id] == nil {
					s.shown[id] = make(map[uint64]bool)
				}
				s.shown[id][v.Epoch] = true
				if disk := s.disks[id]; disk != nil {
					if err := viewInLog(id, disk, v.Epoch); err != nil {
						s.fail("%v", err)
					}
				}
			}
			n.mu.Lock()
			n.addLocked(vsEvent{view: &v})
			n.mu.Unlock()
			if s.topics != nil {
				s.topics.view(m, v)
			}
		},
	}
	if s.topics != nil {
		cfg.Topics = s.topics.declare(id)
	}
	if s.plan.wire {
		// The views' traffic goes over the simulated wire; otherwise
		// over RDMC groups and queue pairs on the member's endpoint of
		// the fabric, as in production.
		cfg.test.openNet = s.wire.open
	}
	if !s.plan.stateless {
		cfg.State = n.state
		if s.plan.checkpoints {
			cfg.State = kvtest.Checkpointing{Map: n.state}
		}
	}
	if s.plan.durable {
		cfg.Durable = &DurableConfig{Dir: "mem", RestartWait: 200 * time.Millisecond}
		cfg.test.openDisk = s.disks[id].open
	}
	g, err := newGroup(context.Background(), cfg, func(d Delivery) {
		if s.topics != nil {
			if d.Replayed && d.Topic != "" {
				s.topics.replay(m, d)
				return
			}
			if !d.Replayed {
				s.topics.deliver(m, d)
				if d.Topic != "" {
					return
				}
			}
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		n.state.Apply(d.Payload)
		if d.Replayed {
			n.replayed = append(n.replayed, d)
			return
		}
		n.addLocked(vsEvent{d: d})
		s.topDelivered = max(s.topDelivered, d.Index)
		if n.got == nil {
			n.got = make(map[string]bool)
		}
		n.got[string(d.Payload)] = true
		if s.plan.durable && d.Sender == id {
			// Delivered to its sender, so on every member's disk.
			s.acked = append(s.acked, string(d.Payload))
		}
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if g.ep, err = s.fabric.Endpoint(rdma.NodeID(id)); err != nil {
		s.t.Fatal(err)
	}
	// A durable member restarts from its log.
	var applied uint64
	if g.disk != nil {
		if applied, err = g.replayLog(context.Background()); err != nil {
			s.fail("member %d: %v", id, err)
		}
		if s.topics != nil {
			s.topics.restarted(id)
		}
	}
	mem := &member{etcd: stepEtcd{}, ready: make(chan struct{}), left: make(chan struct{}), failed: make(chan struct{})}
	mem.mu.addrs = make(map[NodeID]string)
	g.mem = mem
	m.g, n.g = g, g
	var after uint64
	if old := s.members[id]; old != nil {
		after = old.g.mem.mu.self.Incarnation
	}
	self := membership.Member{ID: uint64(id), Incarnation: g.newIncarnation(after)}
	s.wire.revive(id)
	s.members[id] = m
	s.c.nodes[id] = n
	s.note("m%d open, incarnation %d", id, self.Incarnation)
	m.register(self, func(store *membership.Store, l *stepLease) {
		mem.mu.store, m.lease = store, l
		g.mu.out = ErrNotMember
		mem.setSelf(self)
		m.r = &runner{g: g, vs: vsync.NewCore(g.vsyncConfig(), self), applied: applied}
		m.resync()
		m.s.after(g.cfg.Etcd.LeaseTTL/3, m.keepAlive)
		m.s.after(0, m.settle)
	})
	s.load(m)
}

// load sends a message from m every 40 ms, while the run's load goes on
// (every 20 ms, as in TestGroupSim, costs a tenth more CPU a seed).
func (s *stepSim) load(m *stepMember) {
	s.after(40*time.Millisecond, func() {
		if s.loadStop || m.gone() {
			return
		}
		s.load(m)
		if m.r == nil {
			return
		}
		if !s.noSync && s.syncRng.IntN(8) == 0 {
			s.startSync(m)
		}
		p := fmt.Sprintf("set %s-%d %d", m.name, m.k, m.k)
		m.k++
		n := m.node
		before := n.exclusions()
		if _, err := m.g.Send(context.Background(), []byte(p)); err != nil {
			return
		}
		n.mu.Lock()
		n.accepted = append(n.accepted, p)
		n.acceptedInc = append(n.acceptedInc, before)
		n.mu.Unlock()
		if s.topics != nil {
			s.topics.load(m)
		}
	})
}

// startSync makes member m Sync (Group.Sync: the loop's barrier, then
// the view confirmed in etcd) and, once it returns, checks that m has
// delivered every message that any member delivered before the call, and
// that the index returned is past them. (Members deliver the same message
// at an index, without gaps, as the histories' checks see to; so it is
// enough to compare indexes.)
func (s *stepSim) startSync(m *stepMember) {
	if !m.inView {
		return
	}
	top := s.topDelivered
	reply := make(chan syncResult, 1)
	m.post(m.g, event{kind: evSync, syncReply: reply})
	// The loop answers as it handles events or settles (stepMember.settle
	// looks).
	m.syncs = append(m.syncs, func() bool {
		var res syncResult
		select {
		case res = <-reply:
		default:
			return false
		}
		if res.err != nil {
			return true // excluded, or no longer in a view: nothing promised
		}
		// Group.Sync's second step: is the view still current in etcd?
		// If not, ask again for the view the group is in.
		next, err := m.g.confirmView(context.Background(), res.epoch)
		if err != nil {
			return true // etcd out of reach: Sync fails
		}
		if next != 0 {
			m.post(m.g, event{kind: evSync, syncReply: reply, imm: next})
			return false
		}
		if have := max(m.joinStart, m.node.lastDelivered()); have < top || res.index < top {
			s.fail("member %d's Sync returned %d, having delivered up to %d, below %d, which a member delivered before the call", m.id, res.index, have, top)
		}
		s.syncs++
		return true
	})
}

// Kinds of crash, for a durable member's log.
const (
	crashKeepSome = iota // it keeps what was synced and the oldest of the rest, as many as the seed draws
	crashKeepAll         // it keeps every write, synced or not
	crashWipe            // the disk is replaced by an empty one
)

// crash stops member id as kill -9 would: its links break, its loop and
// tasks stop, its lease is left to expire, and its durable log, if any,
// keeps what kind says.
func (s *stepSim) crash(id NodeID, kind int) {
	m := s.members[id]
	s.note("m%d crash (%d)", id, kind)
	delete(s.holdsSince, id)
	if disk := s.disks[id]; disk != nil {
		switch kind {
		case crashWipe:
			disk.wipe()
			if s.topics != nil {
				s.topics.wiped(id)
			}
		case crashKeepAll:
			disk.crash(func(unsynced int) int { return unsynced })
		default:
			disk.crash(func(unsynced int) int { return s.rng.IntN(unsynced + 1) })
		}
	}
	m.dead = true
	delete(s.c.nodes, id)
	s.c.gone = append(s.c.gone, m.node)
	s.wire.crash(id)
	s.fabric.Crash(rdma.NodeID(id))
	if m.r != nil && m.r.v != nil {
		m.r.v.close()
	}
	m.g.cancel()
}

// runStep runs seed; verbose logs every step.
func runStep(t testing.TB, seed uint64, verbose bool) stepResult {
	return runStepWith(t, seed, stepOptions{verbose: verbose})
}

// stepOptions change a seed's run.
type stepOptions struct {
	// verbose logs every step.
	verbose bool
	// plant plants faults in every member.
	plant plant.Faults
	// durable makes delivery durable.
	durable bool
	// faults, if set, replace the schedule of faults drawn.
	faults []simFault
	// long draws TestGroupSim's longer schedules.
	long bool
	// noSync leaves out the Syncs the load makes now and then.
	noSync bool
	// topics gives the members topics to publish on and subscribe to
	// (stepsim_topics_test.go).
	topics bool
	// slowWork makes the work a member spawns for its loop (reading its
	// snapshot for joiners, installing the state transferred to it,
	// taking a transfer's result) take up to slowWorkMax longer, as a
	// large state's does.
	slowWork bool
}

// stepSuspectTimeout is the members' suspect timeout in the step
// simulation.
const stepSuspectTimeout = 200 * time.Millisecond

// slowWorkMax bounds the extra time spawned work takes with
// stepOptions.slowWork: three suspect timeouts, so that a joiner's
// Restore or a donor's Snapshot outlasts what the failure detector waits
// for a heartbeat (TestViewsSlowRestore's case, under faults).
const slowWorkMax = 3 * stepSuspectTimeout

// runStepWith runs seed with opts.
func runStepWith(t testing.TB, seed uint64, opts stepOptions) stepResult {
	plan, _ := seedPlan(seed, !opts.long)
	if opts.durable {
		plan.durable = true
	}
	if opts.faults != nil {
		plan.faults = opts.faults
	}
	verbose, planted := opts.verbose, opts.plant
	plan.memDisk = true
	plan.fsync = time.Duration(rand.New(rand.NewPCG(seed, seed^0xf5c)).IntN(2001)) * time.Microsecond
	// Drawn apart from the run's other draws, which it leaves alone.
	plan.checkpoints = rand.New(rand.NewPCG(seed, seed^0xc4e)).IntN(2) == 0
	s := &stepSim{
		t: t, plan: plan, rng: rand.New(rand.NewPCG(seed, seed^0x57e9)), verbose: verbose,
		syncRng: rand.New(rand.NewPCG(seed, seed^0x5c5c)), noSync: opts.noSync,
		base: time.Unix(1_800_000_000, 0), plant: planted,
		etcd:       newSimEtcd("/sim/", stepLeaseTTL),
		members:    make(map[NodeID]*stepMember),
		shown:      make(map[NodeID]map[uint64]bool),
		holdsSince: make(map[NodeID]uint64),
		disks:      make(map[NodeID]*simDisk),
		c:          &vsCluster{t: t, leaseTTL: stepLeaseTTL, prefix: "/sim/", nodes: make(map[NodeID]*vsNode)},
	}
	if opts.slowWork {
		s.workRng = rand.New(rand.NewPCG(seed, seed^0x510e))
	}
	s.etcd.srv.Advance(s.clock().UnixNano())
	s.etcd.checkPut = func(id NodeID, key, _ []byte) {
		// A member holds the state of a view it was shown (in this
		// incarnation, or in one before that kept its disk, from which
		// it restarts), and of a later one, when its mark did not reach
		// etcd in time (it was cut off) and the later view still lists it
		// as joining.
		holds := func(epoch uint64) bool {
			e := s.holdsSince[id]
			return s.shown[id][epoch] || e != 0 && e <= epoch
		}
		if err := checkCaughtUpMark(s.c.prefix, id, key, holds); err != nil {
			s.fail("%v", err)
		}
	}
	s.wireDriver = &stepDriver{s: s, step: func() (bool, time.Duration) { return s.wire.step() }}
	s.wire = newSteppedWire(seed, plan.maxDelay, s.clock, s.wireDriver.kick)
	s.fabricDriver = &stepDriver{s: s, step: func() (bool, time.Duration) {
		did, wait := s.fabric.StepDue()
		if !did && wait == 0 {
			wait = time.Hour // nothing queued
		}
		return did, wait
	}}
	s.fabric = rdma.NewMemFabric(rdma.MemOptions{
		Seed: int64(seed), Manual: true, MaxDelay: plan.maxDelay, Now: s.clock, OnWork: s.fabricDriver.kick,
	})
	defer s.fabric.Close()
	// One etcd outage in sixteen outlasts the retries of etcd writes
	// (asyncTimeout): what a view change needs written there is written
	// again once etcd is back.
	for i := range plan.faults {
		if f := &plan.faults[i]; (f.kind == "etcd-down" || f.kind == "etcd-cut") && s.rng.IntN(16) == 0 {
			f.lasts = asyncTimeout + time.Duration(1000+s.rng.IntN(4000))*time.Millisecond
		}
	}
	t.Logf("seed %d: %v", seed, plan)
	n := plan.n
	if opts.topics {
		s.topics = newTopicHist(s, seed)
	}
	if plan.durable {
		for i := range n {
			id := NodeID(i + 1)
			disk := newSimDisk(plan.fsync)
			// A sync runs on the scheduler, and the member's loop then
			// hears of it (Group.synced).
			disk.after = func(d time.Duration, f func()) {
				if c := s.cutAt; c != nil && c.who[0][0] == id {
					s.cutAt = nil
					s.after(0, func() { s.powerCut(*c) }) // before the sync
				}
				s.after(d, func() {
					f()
					if m := s.members[id]; m != nil {
						m.poke()
					}
				})
			}
			s.disks[id] = disk
		}
	}
	for i := range n {
		s.open(NodeID(i+1), n)
	}
	s.waitCount(NodeID(1), 20, 60*time.Second)
	start := s.now
	// undone is when the last fault is undone.
	undone := s.now
	for _, f := range plan.faults {
		s.run(start+f.at, nil)
		s.note("fault %v", f)
		switch f.kind {
		case "crash", "wipe":
			// Without durable logs, a group whose view lost its majority
			// cannot go on, and a wiped disk does not count toward the
			// restart of a durable one: such a member crashes only while
			// every member is up and in the latest view, with no change
			// of it under way (then the others are a majority of every
			// view the group can go on to).
			id := f.who[0][0]
			if s.members[id].gone() || (!plan.durable || f.kind == "wipe") && !s.c.settled(n, s.etcd.srv) {
				s.note("skipped: the group is not whole, or its view is changing")
				continue
			}
			kind := crashKeepSome
			if f.kind == "wipe" {
				kind = crashWipe
			}
			s.crash(id, kind)
			s.restart(f.lasts, id)
		case "crash-all":
			live := s.liveIDs()
			for _, id := range live {
				s.crash(id, crashKeepSome)
			}
			s.restart(f.lasts, live...)
		case "power-cut":
			// The power fails in the middle of an fsync of member who's
			// (at its next write, if it runs): see powerCut.
			if who := f.who[0][0]; s.members[who].gone() {
				s.powerCut(f)
			} else {
				s.cutAt = &f
			}
		case "partition":
			s.wire.partition(f.who...)
			s.fabric.Partition(rdmaIDs(f.who)...)
			s.after(f.lasts, func() { s.note("heal"); s.wire.heal(); s.fabric.Heal() })
			undone = max(undone, s.now+f.lasts)
		case "break":
			s.wire.breakLink(f.who[0][0], f.who[0][1])
			s.fabric.BreakLink(rdma.NodeID(f.who[0][0]), rdma.NodeID(f.who[0][1]))
		case "etcd-down":
			s.etcd.srv.Down()
			s.after(f.lasts, func() { s.note("etcd up"); s.etcd.srv.Up() })
			undone = max(undone, s.now+f.lasts)
		case "etcd-cut":
			id := f.who[0][0]
			s.etcd.setCut(id, true)
			s.after(f.lasts, func() { s.note("etcd reconnects m%d", id); s.etcd.setCut(id, false) })
			undone = max(undone, s.now+f.lasts)
		}
	}
	s.run(undone, nil)
	if !s.run(s.now+time.Minute, func() bool { return s.restarting == 0 && s.cutAt == nil }) {
		s.fail("%d members were not started again within a minute of the last fault", s.restarting)
	}
	// The faults are over: the group comes back whole and delivers.
	faultsEnd := s.now
	const liveness = 30 * time.Second
	if !s.run(s.now+liveness, func() bool { return s.c.whole(n) }) {
		s.fail("the group did not come back whole within %v of the last fault", liveness)
	}
	for _, nd := range s.c.live() {
		s.waitCount(nd.id, nd.delivered()+20, liveness)
	}
	recovered := s.now - faultsEnd
	s.loadStop = true
	live := s.c.live()
	// Until every member holds what was sent. What is owed is read
	// again at every check: a member whose lease ran out during the
	// faults may be excluded only now, once etcd answers, and the
	// messages it accepted in the incarnation excluded may be lost
	// beyond that view's cut (see acceptedLast).
	settled := func() bool {
		want := acceptedLast(live)
		var idx uint64
		for i, nd := range live {
			last, ok := nd.settled()
			if !ok || i > 0 && last != idx || len(missingAccepted(nd, want, live, s.plan.stateless)) > 0 {
				return false
			}
			idx = last
		}
		return true
	}
	if !s.run(s.now+liveness, settled) {
		want := acceptedLast(live)
		for _, nd := range live {
			if m := missingAccepted(nd, want, live, s.plan.stateless); len(m) > 0 {
				s.fail("member %d misses %d of %d accepted messages, first %q", nd.id, len(m), len(want), m[0])
			}
		}
		s.fail("the members did not settle at one index")
	}
	s.c.check()
	if s.topics != nil {
		s.topics.final(live, liveness)
		s.topics.check()
	}
	if !plan.stateless {
		s.sameState(live)
	}
	if err := checkAckedSurvived(s.acked, live, plan.stateless); err != nil {
		s.fail("%v", err)
	}
	s.checkExclusions()
	s.note("recovered in %v", recovered)
	return stepResult{steps: s.steps, end: s.now, hash: s.hash, synced: s.syncs}
}

// stepExclusion is an exclusion member id saw: the view of epoch, at
// virtual time at, left it out.
type stepExclusion struct {
	id    NodeID
	epoch uint64
	at    time.Duration
}

// checkExclusions fails the run if a member was excluded though no fault
// touched it. A fault that names a member (a crash, a wipe, a cut from
// etcd, a side of a partition, an end of a broken link) may explain its
// exclusion, and a fault of the whole group (a crash of all, a power
// cut, an etcd outage, after which leases may have run out, or faults
// of half the members or more, which may leave a view without a
// majority) any member's; nothing else may. Here no member is ever
// starved of time, and the network's delays stay far below the suspect
// timeout, so the suspicion of a member no fault touched is false: a
// slow Snapshot or Restore (stepOptions.slowWork) that kept its loop
// from heartbeating, say, or a view change that left out a member that
// was there.
func (s *stepSim) checkExclusions() {
	touched := make(map[NodeID]bool)
	for _, f := range s.plan.faults {
		if f.kind == "crash-all" || f.kind == "power-cut" || f.kind == "etcd-down" {
			return
		}
		for _, side := range f.who {
			for _, id := range side {
				touched[id] = true
			}
		}
	}
	if 2*len(touched) >= s.plan.n {
		// The faults may have left a view without a majority: then the
		// group stops, and every member, whether touched or not, may
		// take part in no view until it restarts.
		return
	}
	for _, e := range s.excluded {
		if !touched[e.id] {
			s.fail("member %d was excluded at %v (view %d) though no fault touched it", e.id, e.at, e.epoch)
		}
	}
}

// powerCut crashes every member as a power cut does: member f.who keeps
// every write, synced or not, the others what they synced and some of
// the rest. The others restart after f.lasts and, as a majority of the
// last view, may restart the group without f.who's writes; f.who
// restarts f.lasts after they are back (see powercut_test.go).
func (s *stepSim) powerCut(f simFault) {
	last := f.who[0][0]
	s.note("power cut, member %d in the middle of an fsync", last)
	live := s.liveIDs()
	var others []NodeID
	for _, id := range live {
		if id == last {
			s.crash(id, crashKeepAll)
			continue
		}
		s.crash(id, crashKeepSome)
		others = append(others, id)
	}
	s.restart(f.lasts, others...)
	if slices.Contains(live, last) {
		s.restarting++
		s.afterBack(others, f.lasts, func() {
			s.restarting--
			s.open(last, s.plan.n)
		})
	}
}

// liveIDs returns the members running, in order.
func (s *stepSim) liveIDs() []NodeID {
	var ids []NodeID
	for _, id := range sortedKeys(s.members, cmpNodeID) {
		if !s.members[id].gone() {
			ids = append(ids, id)
		}
	}
	return ids
}

// restart starts the members ids again after d, as a process supervisor
// would.
func (s *stepSim) restart(d time.Duration, ids ...NodeID) {
	s.restarting += len(ids)
	s.after(d, func() {
		for _, id := range ids {
			s.restarting--
			s.open(id, s.plan.n)
		}
	})
}

// afterBack calls fn d after the members ids, started again, are back in
// a view (or, if they are not within 20 s, then).
func (s *stepSim) afterBack(ids []NodeID, d time.Duration, fn func()) {
	deadline := s.now + 20*time.Second
	var poll func()
	poll = func() {
		back := true
		for _, id := range ids {
			if m := s.members[id]; m.gone() || m.r == nil || m.r.v == nil {
				back = false
			}
		}
		if back || s.now >= deadline {
			s.after(d, fn)
			return
		}
		s.after(10*time.Millisecond, poll)
	}
	s.after(d, poll)
}

// waitCount runs until member id delivered k messages.
func (s *stepSim) waitCount(id NodeID, k int, bound time.Duration) {
	nd := s.c.nodes[id]
	if !s.run(s.now+bound, func() bool { return nd.delivered() >= k }) {
		s.fail("member %d delivered %d messages in %v, want %d", id, nd.delivered(), bound, k)
	}
}

// sameState checks that the members, settled at one index, hold the same
// state (a joiner's came by transfer).
func (s *stepSim) sameState(live []*vsNode) {
	var first string
	for i, nd := range live {
		nd.mu.Lock()
		sum, keys := nd.state.Checksum()
		nd.mu.Unlock()
		if keys == 0 {
			s.fail("member %d's state is empty", nd.id)
		}
		if i == 0 {
			first = sum
		} else if sum != first {
			s.fail("member %d's state differs from member %d's", nd.id, live[0].id)
		}
	}
}

// rdmaIDs converts the sides of a partition.
func rdmaIDs(sides [][]NodeID) [][]rdma.NodeID {
	out := make([][]rdma.NodeID, len(sides))
	for i, side := range sides {
		for _, id := range side {
			out[i] = append(out[i], rdma.NodeID(id))
		}
	}
	return out
}

// stepDriver runs simulated I/O that steps itself (the wire, the fabric)
// on the scheduler: step does one unit of work due now and reports
// whether there was one; if not, how long until the next may be due (an
// hour or more: none is queued).
type stepDriver struct {
	s    *stepSim
	step func() (did bool, wait time.Duration)
	// pending: the task of generation gen is scheduled, at at; older
	// tasks do nothing.
	pending bool
	at      time.Duration
	gen     uint64
}

// kick schedules a run now (there may be work due), unless one is.
func (d *stepDriver) kick() {
	if d.pending && d.at <= d.s.now {
		return
	}
	d.schedule(0)
}

func (d *stepDriver) schedule(wait time.Duration) {
	d.gen++
	gen := d.gen
	d.pending, d.at = true, d.s.now+wait
	d.s.after(wait, func() {
		if gen != d.gen {
			return
		}
		// Kicks meanwhile are this run's to serve.
		d.at = d.s.now
		for {
			did, wait := d.step()
			if did {
				continue
			}
			d.pending = false
			if wait < time.Hour {
				d.schedule(wait)
			}
			return
		}
	})
}
