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
// the view's deliveries are held back until the snapshots are done. They
// are taken on another goroutine, slice by slice and its own share first,
// so that the loop goes on heartbeating meanwhile and the donor sends each
// slice while it takes the next.
func (r *runner) donate(v *view) {
	g, rec := r.g, &v.rec
	donors := donorsOf(rec, g.cfg.MaxDonors)
	i := slices.Index(donors, NodeID(r.vs.Self().ID))
	joining := snapshotJoiners(rec)
	if i < 0 || len(joining) == 0 || g.cfg.State == nil {
		return
	}
	if r.snap != nil || g.disk != nil && r.durableBefore(rec.Start) {
		// The snapshot of an earlier view is still finishing its part in
		// progress, or, in durable delivery, the previous view's last
		// messages are not durable, and so not applied, yet: snapshot
		// once they are (snapEnded, flushDurable).
		r.pendingDonate = v
		return
	}
	parts := membership.DonorSlices(i, len(donors), transferSlices)
	of := len(donors) * transferSlices
	joiners := make([]rdma.NodeID, 0, len(joining))
	for _, id := range joining {
		joiners = append(joiners, rdma.NodeID(id))
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
		return
	}
	v.donorSince = g.cfg.Clock()
	job := &snapJob{
		v: v, left: len(parts), done: make(chan struct{}),
		// Buffered for every part, so that the goroutine never waits for
		// the loop (which may be waiting for it in waitSnapshots).
		results: make(chan snapshot, len(parts)),
	}
	r.snap = job
	g.spawn(func() {
		defer close(job.done)
		for _, p := range parts {
			if job.stop.Load() {
				return
			}
			data, err := membership.SnapshotParts(g.cfg.State, []int{p}, of)
			job.results <- snapshot{part: p, data: data[p], err: err}
		}
	})
}

// snapJob takes the parts of this member's share of a snapshot for the
// joiners of view v, one after the other, on its own goroutine. The
// application's state must hold still meanwhile: deliveries and views
// wait in the runner's held queue until the job ends.
type snapJob struct {
	v *view
	// left counts the parts not yet handed to the loop.
	left    int
	results chan snapshot
	// done is closed when the goroutine has ended.
	done chan struct{}
	// stop makes the goroutine skip the parts it has not started;
	// stopped is the loop's copy.
	stop    atomic.Bool
	stopped bool
}

// snapshot is one part taken for joiners.
type snapshot struct {
	part int
	data []byte
	err  error
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
func (r *runner) snapshotted(part int, data []byte, err error) {
	g, v := r.g, r.snap.v
	switch {
	case err != nil:
		// The part stays pending: the joiners ask its other holder once
		// this donor stalls, and give it up after a few stalls.
		g.log.Error("snapshot for joiners", "epoch", v.rec.Epoch, "part", part, "err", err)
	case v.donor == nil:
		// Every joiner has its state already (from other donors).
	default:
		if err := v.donor.AddPart(part, data); err != nil {
			g.log.Error("serving state to joiners", "epoch", v.rec.Epoch, "part", part, "err", err)
		}
	}
	if r.snap.left--; r.snap.left == 0 {
		r.snapEnded()
	}
}

// snapEnded follows the end of the snapshot job: the Snapshot calls
// that waited for it are served, the deliveries and views held meanwhile
// go out, and a donation that waited for the job starts.
func (r *runner) snapEnded() {
	r.snap = nil
	r.servePendingSnapshots()
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
		if r.snap == nil && !r.restoring {
			r.release() // the donation did not start: nothing to wait for
		}
	}
}

// holding reports whether deliveries and views wait in held: while this
// member's state is being restored or snapshotted for joiners, and until
// what was held meanwhile is out.
func (r *runner) holding() bool { return r.restoring || r.snap != nil || len(r.held) > 0 }

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
			r.durq = append(r.durq, durItem{d: it.d})
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
	<-r.snap.done
	r.snap = nil
	r.servePendingSnapshots()
}

// fetch transfers this joiner's state from the donors of view v.
func (r *runner) fetch(v *view) {
	g := r.g
	cfg := membership.FetchConfig{
		Endpoint: g.ep, Stream: transferStream(v.rec.Epoch), Donors: donorsOf(&v.rec, g.cfg.MaxDonors),
		Slices: transferSlices, StallTimeout: g.cfg.TransferStall, Logger: g.cfg.Logger,
		ChunkBytes: g.cfg.test.transferChunkBytes, OnReceived: g.m.transferred(roleJoiner, kindSnapshot),
	}
	ctx, span := g.tr.Start(v.transfers, "convoy.state.transfer", trace.WithAttributes(
		attribute.Int64("convoy.epoch", int64(v.rec.Epoch)), attribute.Int("convoy.donors", len(cfg.Donors))))
	start := g.cfg.Clock()
	g.startFetch(v, ctx, cfg, func(parts [][]byte, err error) {
		g.m.transferTook(roleJoiner, kindSnapshot, time.Duration(g.cfg.Clock()-start))
		var n int
		for _, p := range parts {
			n += len(p)
		}
		span.SetAttributes(attribute.Int("convoy.bytes", n))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		g.post(event{kind: evRestored, v: v, parts: parts, err: err})
	})
}

// restored installs the state transferred to this joiner and hands over
// the deliveries held meanwhile.
func (r *runner) restored(parts [][]byte, err error) bool {
	g := r.g
	if err != nil && r.ending() {
		// The view ends before the state came, and its donors stop
		// serving as they leave it: the next view, if it keeps this
		// member, brings the state as of its start (install fetches
		// again).
		g.log.Info("state transfer ended with the view", "epoch", r.v.rec.Epoch, "err", err)
		return true
	}
	if err != nil {
		r.excluded(nil, fmt.Sprintf("state transfer for view %d failed: %v", r.v.rec.Epoch, err))
		return true
	}
	if r.installing {
		// The state of an earlier view is still being installed: this
		// one follows it (stateInstalled).
		r.nextInstall = &event{kind: evRestored, v: r.v, parts: parts}
		return true
	}
	r.installState(r.v, parts)
	return true
}

// installState installs the state transferred to this joiner for view v,
// off the loop: restoring a large state, and writing it to the durable
// log, takes longer than the failure detector waits for a heartbeat, and
// the loop must go on heartbeating (and holding deliveries) meanwhile.
// The loop hears of the end through evInstalled (stateInstalled).
func (r *runner) installState(v *view, parts [][]byte) {
	g := r.g
	r.installing, r.installingView = true, v
	start := v.rec.Start
	g.spawn(func() {
		err := g.restoreParts(parts)
		if err != nil {
			err = fmt.Errorf("restore: %w", err)
		}
		if err == nil && g.disk != nil {
			// The log holds the state from now on, for a restart,
			// followed by the deliveries it took meanwhile (it ends at
			// the view's start or goes on from there: enter, install) —
			// unless a later view made this member join again
			// meanwhile, and its log start over there (logInstall).
			err = g.logInstall(func() error {
				err := g.disk.SetSnapshot(g.ctx, start, encodeParts(parts))
				if err == nil && g.disk.First() <= start {
					err = g.disk.TrimBefore(g.ctx, start+1)
				}
				return err
			}, v)
			if err != nil {
				err = fmt.Errorf("durable log: %w", err)
			}
		}
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
			r.installState(next.v, next.parts)
			return true
		}
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
