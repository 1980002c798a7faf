package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/rdma"
)

// transferSlices is how many parts each donor's share of a joiner's state
// is cut into: a donor sends the first while it snapshots the next, and
// snapshots its backup share only after its own.
const transferSlices = 16

// donorsOf returns the members that stream state to rec's joiners: up to
// max members that come from the previous view and hold its state, in
// rank order.
func donorsOf(rec *membership.View, max int) []NodeID {
	prev := make(map[uint64]bool, len(rec.Cut))
	for _, c := range rec.Cut {
		prev[c.ID] = true
	}
	var out []NodeID
	for _, m := range rec.Members {
		if prev[m.ID] && !slices.Contains(rec.Joining, m.ID) && len(out) < max {
			out = append(out, NodeID(m.ID))
		}
	}
	return out
}

// donate serves this member's snapshot parts to the joiners of the view it
// just opened, if it is one of their donors. The parts are taken exactly
// at the end of the previous view, where the joiners' first view starts:
// the view's deliveries are held back until the snapshots are done,
// unless the state machine is a Checkpointer, whose checkpoint, taken
// there, the snapshots read while deliveries go on. They are taken on
// another goroutine, slice by slice and its own share first, so that the
// loop goes on heartbeating meanwhile and the donor sends each slice
// while it takes the next. Each slice is written to a spill, in memory
// if small, in a file if not, from which the donor reads it as it sends
// it.
func (r *runner) donate(v *view) {
	g, rec := r.g, &v.rec
	donors := donorsOf(rec, g.cfg.MaxDonors)
	i := slices.Index(donors, NodeID(r.vs.Self().ID))
	joining := snapshotJoiners(rec)
	if i < 0 || len(joining) == 0 || g.cfg.State == nil {
		return
	}
	if r.snap != nil || r.own != nil || g.disk != nil && r.durableBefore(rec.Start) {
		// The snapshot of an earlier view is still finishing its part in
		// progress, Snapshot reads the state, or, in durable delivery,
		// the previous view's last messages are not durable, and so not
		// applied, yet: snapshot once they are (stateFree,
		// flushDurable).
		r.pendingDonate = v
		return
	}
	parts := membership.DonorSlices(i, len(donors), transferSlices)
	of := len(donors) * transferSlices
	joiners := make([]rdma.NodeID, 0, len(joining))
	for _, id := range joining {
		joiners = append(joiners, rdma.NodeID(id))
	}
	read := g.cfg.State.Snapshot
	var cp membership.StateSnapshot
	if c, ok := g.cfg.State.(membership.Checkpointer); ok {
		var err error
		if cp, err = c.Checkpoint(); err != nil {
			// As if every part failed: the joiners ask the other donors.
			g.log.Error("snapshot for joiners", "epoch", rec.Epoch, "err", fmt.Errorf("checkpoint: %w", err))
			return
		}
		read = cp.Snapshot
	}
	var err error
	dcfg := membership.DonorConfig{
		Endpoint: g.ep, Stream: transferStream(rec.Epoch), Joiners: joiners, Pending: parts, Of: of, Logger: g.cfg.Logger,
		OnSent: g.m.transferred(roleDonor, kindSnapshot),
	}
	dcfg.Clock, dcfg.Rand = g.transferClock()
	v.donor, err = membership.NewDonor(g.ctx, dcfg)
	if err != nil {
		g.log.Error("serving state to joiners", "epoch", rec.Epoch, "err", err)
		if cp != nil {
			cp.Release()
		}
		return
	}
	v.donorSince = g.cfg.Clock()
	job := &snapJob{
		v: v, left: len(parts), done: make(chan struct{}), cp: cp, hold: cp == nil,
		// Buffered for every part, so that the goroutine never waits for
		// the loop (which may be waiting for it in waitSnapshots).
		results: make(chan snapshot, len(parts)),
	}
	r.snap = job
	limit := g.spillBytes()
	job.hurry = g.spawn(func() {
		defer close(job.done)
		for _, p := range parts {
			if job.stop.Load() {
				return
			}
			sp := newSpill(limit)
			err := read(sp, p, of)
			if err != nil {
				err = fmt.Errorf("membership: snapshot part %d of %d: %w", p, of, err)
			}
			job.results <- snapshot{part: p, sp: sp, err: err}
		}
	})
}

// spillBytes returns how much of a part of the state being transferred
// is kept in memory.
func (g *Group) spillBytes() int {
	if n := g.cfg.test.spillBytes; n > 0 {
		return n
	}
	return defaultSpillBytes
}

// snapJob takes the parts of this member's share of a snapshot for the
// joiners of view v, one after the other, on its own goroutine. Unless it
// reads a checkpoint, the application's state must hold still meanwhile:
// deliveries and views wait in the runner's held queue until the job
// ends.
type snapJob struct {
	v *view
	// cp is the checkpoint the job reads, if the state machine is a
	// Checkpointer (released once the job ends); hold: it reads the
	// state itself.
	cp   membership.StateSnapshot
	hold bool
	// left counts the parts not yet handed to the loop.
	left    int
	results chan snapshot
	// done is closed when the goroutine has ended; hurry is its spawn's
	// (Group.spawn), called before the loop waits for done.
	done  chan struct{}
	hurry func()
	// stop makes the goroutine skip the parts it has not started;
	// stopped is the loop's copy.
	stop    atomic.Bool
	stopped bool
}

// snapshot is one part taken for joiners.
type snapshot struct {
	part int
	sp   *spill
	err  error
}

// drain releases the parts the job took that the loop did not take.
// REQUIRES: the job has ended (done is closed).
func (j *snapJob) drain() {
	for {
		select {
		case s := <-j.results:
			s.sp.Close()
		default:
			return
		}
	}
}

// snapEvents returns the channels the loop waits on for the snapshot
// job: its parts while it runs, its end once it was stopped. Both are
// nil without a job.
func (r *runner) snapEvents() (<-chan snapshot, <-chan struct{}) {
	switch {
	case r.snap == nil:
		return nil, nil
	case r.snap.stopped:
		return nil, r.snap.done
	default:
		return r.snap.results, nil
	}
}

// stopSnapshot stops the snapshot job when its view ends before it: the
// joiners it served take their state in the next view, from that view's
// donors, or were excluded. The part in progress still finishes, so the
// deliveries stay held until the job ends (snapEnded); the loop does not
// wait for it.
func (r *runner) stopSnapshot() {
	if r.snap != nil && !r.snap.stopped {
		r.snap.stopped = true
		r.snap.stop.Store(true)
	}
}

// snapshotted hands a part snapshotted for joiners to the view's donor;
// once all are taken, the deliveries held meanwhile go out.
func (r *runner) snapshotted(s snapshot) {
	g, v := r.g, r.snap.v
	switch {
	case s.err != nil:
		// The part stays pending: the joiners ask its other holder once
		// this donor stalls, and give it up after a few stalls.
		g.log.Error("snapshot for joiners", "epoch", v.rec.Epoch, "part", s.part, "err", s.err)
		s.sp.Close()
	case v.donor == nil:
		// Every joiner has its state already (from other donors).
		s.sp.Close()
	default:
		var err error
		if data, ok := s.sp.inMemory(); ok {
			err = v.donor.AddPart(s.part, data)
		} else {
			// The donor reads it until the view's donations end.
			v.spills = append(v.spills, s.sp)
			err = v.donor.AddPartReader(s.part, s.sp, s.sp.size())
		}
		if err != nil {
			g.log.Error("serving state to joiners", "epoch", v.rec.Epoch, "part", s.part, "err", err)
		}
	}
	if r.snap.left--; r.snap.left == 0 {
		r.snapEnded()
	}
}

// snapEnded follows the end of the snapshot job.
func (r *runner) snapEnded() {
	r.snap.end()
	r.snap = nil
	r.stateFree()
}

// end releases what the job holds once its goroutine has ended: the
// parts the loop did not take, and the checkpoint.
func (j *snapJob) end() {
	j.drain()
	if j.cp != nil {
		j.cp.Release()
		j.cp = nil
	}
}

// stateFree follows the end of a snapshot's read of the state: the
// Snapshot calls that waited for it are served, and then, unless one of
// them reads the state, the deliveries and views held meanwhile go out,
// and a donation that waited starts.
func (r *runner) stateFree() {
	r.servePendingSnapshots()
	if r.stateBusy() {
		return
	}
	if !r.restoring {
		r.release()
	}
	if r.g.disk != nil {
		r.flushDurable() // donates once the view's start is applied
		return
	}
	if v := r.pendingDonate; v != nil && v == r.v {
		r.pendingDonate = nil
		r.donate(v)
		if !r.stateBusy() && !r.restoring {
			r.release() // the donation did not start, or reads a checkpoint
		}
	}
}

// holding reports whether deliveries and views wait in held: while this
// member's state is being restored or snapshotted, and until what was
// held meanwhile is out.
func (r *runner) holding() bool { return r.restoring || r.stateBusy() || len(r.held) > 0 }

// release hands out the deliveries and views held while state was
// restored or snapshotted. Without a durable log, when a donation waits
// (pendingDonate), it stops after the donation's view's start: the
// snapshot must see the state exactly there, and what follows waits for
// it.
func (r *runner) release() {
	limit := uint64(math.MaxUint64)
	if r.pendingDonate != nil && r.g.disk == nil {
		limit = r.pendingDonate.rec.Start
	}
	n := 0
	for ; n < len(r.held); n++ {
		it := r.held[n]
		if it.v != nil {
			r.passView(*it.v)
			continue
		}
		if it.d.Topic == "" && it.d.Index > limit {
			break
		}
		if it.logged {
			r.durq = append(r.durq, durItem{d: it.d, pos: it.pos, after: it.after})
			continue
		}
		if it.d.Topic != "" {
			r.handTopic(it.d, it.after, it.d.Sender == r.g.cfg.Self)
			continue
		}
		r.hand(it.d, it.d.Sender == r.g.cfg.Self)
	}
	clear(r.held[:n])
	r.held = r.held[n:]
	if len(r.held) == 0 {
		r.held = nil
	}
}

// waitSnapshots stops the snapshot job and waits for the part in
// progress: the application's state must not change under it.
func (r *runner) waitSnapshots() {
	if r.snap == nil {
		return
	}
	r.stopSnapshot()
	r.snap.hurry()
	<-r.snap.done
	r.snap.end()
	r.snap = nil
	r.servePendingSnapshots()
}

// fetch transfers this joiner's state from the donors of view v, into
// its durable log's next snapshot or, without a durable log, into spills:
// the state is never held whole in memory.
func (r *runner) fetch(v *view) {
	g := r.g
	cfg := membership.FetchConfig{
		Endpoint: g.ep, Stream: transferStream(v.rec.Epoch), Donors: donorsOf(&v.rec, g.cfg.MaxDonors),
		Slices: transferSlices, StallTimeout: g.cfg.TransferStall, Logger: g.cfg.Logger,
		ChunkBytes: g.cfg.test.transferChunkBytes, OnReceived: g.m.transferred(roleJoiner, kindSnapshot),
	}
	parts := len(cfg.Donors) * transferSlices
	if g.disk != nil {
		w, err := g.disk.CreateSnapshot(g.ctx, v.rec.Start, parts)
		if err != nil {
			// Posted from another goroutine: this is the loop, which
			// would wait on itself for room in its own queue.
			ev := event{kind: evRestored, v: v, err: fmt.Errorf("durable log: %w", err)}
			g.spawn(func() { g.post(ev) })
			return
		}
		v.sink = &logSink{w: w}
	} else {
		v.sink = newSpillSink(parts, g.spillBytes())
	}
	cfg.Sink = v.sink
	sink := v.sink
	ctx, span := g.tr.Start(v.transfers, "convoy.state.transfer", trace.WithAttributes(
		attribute.Int64("convoy.epoch", int64(v.rec.Epoch)), attribute.Int("convoy.donors", len(cfg.Donors))))
	start := g.cfg.Clock()
	g.startFetch(v, ctx, cfg, func(_ [][]byte, err error) {
		g.m.transferTook(roleJoiner, kindSnapshot, time.Duration(g.cfg.Clock()-start))
		span.SetAttributes(attribute.Int64("convoy.bytes", sink.bytes()))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		g.post(event{kind: evRestored, v: v, err: err})
	})
}

// restored takes the end of this joiner's state transfer for the view:
// the state it received into its sink is installed (installState), and
// the deliveries held meanwhile are handed over once it is in.
func (r *runner) restored(err error) bool {
	g, v := r.g, r.v
	// The sink goes with the installation from here on.
	sink := v.sink
	v.sink = nil
	if err != nil {
		if sink != nil {
			sink.discard()
		}
		if r.ending() {
			// The view ends before the state came, and its donors stop
			// serving as they leave it: the next view, if it keeps this
			// member, brings the state as of its start (install fetches
			// again).
			g.log.Info("state transfer ended with the view", "epoch", v.rec.Epoch, "err", err)
			return true
		}
		r.excluded(nil, fmt.Sprintf("state transfer for view %d failed: %v", v.rec.Epoch, err))
		return true
	}
	if f := g.cfg.test.onTransferred; f != nil {
		f(v.rec.Epoch)
	}
	in := &stateInstall{v: v, sink: sink}
	if r.installing {
		// The state of an earlier view is still being installed: this
		// one follows it (stateInstalled).
		r.dropNextInstall()
		r.nextInstall = in
		return true
	}
	r.installState(in)
	return true
}

// stateInstall is a state transferred to this joiner for view v, to
// install: the sink holds it.
type stateInstall struct {
	v    *view
	sink stateSink
}

// installState installs the state transferred to this joiner, off the
// loop: restoring a large state from its sink, and keeping it as the
// durable log's snapshot, takes longer than the failure detector waits
// for a heartbeat, and the loop must go on heartbeating (and holding
// deliveries) meanwhile. The installation owns the sink, and releases it
// before the loop hears of the end through evInstalled (stateInstalled).
func (r *runner) installState(in *stateInstall) {
	g, v, sink := r.g, in.v, in.sink
	r.installing, r.installingView = true, v
	start := v.rec.Start
	g.spawn(func() {
		parts, err := sink.readers(g.ctx)
		if err == nil {
			err = g.cfg.State.Restore(parts)
		}
		if err != nil {
			err = fmt.Errorf("restore: %w", err)
		}
		if err == nil && g.disk != nil {
			// The log holds the state from now on, for a restart: the
			// parts it received are committed as its snapshot, followed
			// by the deliveries it took meanwhile (it ends at the view's
			// start or goes on from there: enter, install) — unless a
			// later view made this member join again meanwhile, and its
			// log start over there (logInstall).
			err = g.logInstall(func() error {
				err := sink.keep(g.ctx)
				if err == nil && g.disk.First() <= start {
					err = g.disk.TrimBefore(g.ctx, start+1)
				}
				return err
			}, v)
			if err != nil {
				err = fmt.Errorf("durable log: %w", err)
			}
		}
		// What the log did not keep (all of it, if superseded) goes.
		sink.discard()
		g.post(event{kind: evInstalled, v: v, err: err})
	})
}

// logInstall runs write, an installed state's write to the durable log,
// unless view v was superseded first: the loop marks that (supersede)
// before it makes the log start over at a later view, so that the two
// writes never land in the wrong order.
func (g *Group) logInstall(write func() error, v *view) error {
	g.install.Lock()
	defer g.install.Unlock()
	if g.install.superseded == v {
		return nil
	}
	return write()
}

// supersede marks the state being installed for v, if any, as not to be
// written to the durable log: a later view brings the state again. It
// waits for a write in progress.
func (r *runner) supersede(v *view) {
	g := r.g
	g.install.Lock()
	defer g.install.Unlock()
	g.install.superseded = v
}

// dropNextInstall gives up the transfer that waits for the installation
// in progress, if any: a later view brings the state again, or this
// incarnation ends.
func (r *runner) dropNextInstall() {
	if r.nextInstall != nil {
		r.nextInstall.sink.discard()
		r.nextInstall = nil
	}
}

// stateInstalled ends the installation of view v's state: if v is still
// the view, this joiner has its state and takes part; otherwise a later
// view brings the state again, and whatever transfer ended meanwhile is
// installed now.
func (r *runner) stateInstalled(v *view, err error) bool {
	r.installing, r.installingView = false, nil
	r.g.install.Lock()
	r.g.install.superseded = nil
	r.g.install.Unlock()
	if next := r.nextInstall; next != nil {
		r.nextInstall = nil
		if next.v == r.v && r.restoring {
			r.installState(next)
			return true
		}
		next.sink.discard()
	}
	if acts := r.afterInstall; len(acts) > 0 {
		r.afterInstall = nil
		for _, a := range acts {
			if !r.do(a) {
				return false
			}
		}
		return true
	}
	if v != r.v || !r.restoring {
		return true
	}
	if err != nil {
		// Without its state this member cannot take part: it drops out
		// (the others exclude it once it falls silent) and tries again.
		r.excluded(nil, fmt.Sprintf("state transfer for view %d failed: %v", v.rec.Epoch, err))
		return true
	}
	r.applied = v.rec.Start
	r.joined()
	return true
}

// joined ends this joiner's wait for its state: it sees its first view,
// gets the deliveries held meanwhile, and counts as caught up.
func (r *runner) joined() {
	r.restoring = false
	first := publicView(&r.v.rec, nil)
	r.held = slices.Insert(r.held, 0, durItem{v: &first})
	r.release()
	if r.g.disk != nil {
		r.flushDurable() // what was held may be durable already
	}
	r.caughtUp()
	r.g.mem.markReady()
}

// caughtUp marks this joiner as holding the group's state (and tells
// the core, which asks for the mark again while etcd does not show it).
func (r *runner) caughtUp() {
	r.vs.CaughtUp(r.g.cfg.Clock())
	r.markCaughtUp()
}

// markCaughtUp writes this member's caught-up mark.
func (r *runner) markCaughtUp() {
	epoch, self := r.v.rec.Epoch, r.vs.Self()
	r.async("mark caught up", func(ctx context.Context, s *membership.Store) error { return s.MarkCaughtUp(ctx, epoch, self) })
}
