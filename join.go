package convoy

import (
	"context"
	"fmt"
	"slices"

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
	i := slices.Index(donors, NodeID(r.ms.self.ID))
	joining := snapshotJoiners(rec)
	if i < 0 || len(joining) == 0 || g.cfg.State == nil {
		return
	}
	if g.disk != nil && r.durableBefore(rec.Start) {
		// In durable delivery the previous view's last messages may not be
		// durable, and so not applied, yet: snapshot once they are.
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
	v.donor, err = membership.NewDonor(g.ctx, membership.DonorConfig{
		Endpoint: g.ep, Stream: transferStream(rec.Epoch), Joiners: joiners, Pending: parts, Of: of, Logger: g.cfg.Logger,
	})
	if err != nil {
		g.log.Error("serving state to joiners", "epoch", rec.Epoch, "err", err)
		return
	}
	r.snapshots = len(parts)
	done := make(chan struct{})
	// Buffered for every part, so that the goroutine never waits for the
	// loop (which may be waiting for it in waitSnapshots).
	results := make(chan snapshot, len(parts))
	r.snapDone, r.snapCh = done, results
	g.mem.wg.Add(1)
	go func() {
		defer g.mem.wg.Done()
		defer close(done)
		for _, p := range parts {
			data, err := membership.SnapshotParts(g.cfg.State, []int{p}, of)
			results <- snapshot{v: v, part: p, data: data[p], err: err}
		}
	}()
}

// snapshot is one part taken for joiners.
type snapshot struct {
	v    *view
	part int
	data []byte
	err  error
}

// snapshotted hands a part snapshotted for joiners to the view's donor;
// once all are taken, the deliveries held meanwhile go out.
func (r *runner) snapshotted(part int, data []byte, err error) {
	g, v := r.g, r.v
	switch {
	case err != nil:
		g.log.Error("snapshot for joiners", "epoch", v.rec.Epoch, "part", part, "err", err)
	case v.donor == nil:
		// Every joiner has its state already (from other donors).
	default:
		if err := v.donor.AddPart(part, data); err != nil {
			g.log.Error("serving state to joiners", "epoch", v.rec.Epoch, "part", part, "err", err)
		}
	}
	if r.snapshots--; r.snapshots == 0 {
		r.snapDone, r.snapCh = nil, nil
		r.servePendingSnapshots()
		if !r.restoring {
			r.release()
		}
		if g.disk != nil {
			r.flushDurable()
		}
	}
}

// release hands out the deliveries held while state was restored or
// snapshotted.
func (r *runner) release() {
	held := r.held
	r.held = nil
	for _, d := range held {
		r.hand(d, d.Sender == r.g.cfg.Self)
	}
}

// waitSnapshots waits for a snapshot still being taken: the application's
// state must not change under it.
func (r *runner) waitSnapshots() {
	if r.snapDone != nil {
		<-r.snapDone
	}
	r.snapDone, r.snapCh, r.snapshots = nil, nil, 0
	r.servePendingSnapshots()
}

// fetch transfers this joiner's state from the donors of view v.
func (r *runner) fetch(v *view) {
	g := r.g
	cfg := membership.FetchConfig{
		Endpoint: g.ep, Stream: transferStream(v.rec.Epoch), Donors: donorsOf(&v.rec, g.cfg.MaxDonors),
		Slices: transferSlices, StallTimeout: g.cfg.TransferStall, Logger: g.cfg.Logger,
	}
	g.mem.wg.Add(1)
	go func() {
		defer g.mem.wg.Done()
		ctx, span := g.tr.Start(g.ctx, "convoy.state.transfer", trace.WithAttributes(
			attribute.Int64("convoy.epoch", int64(v.rec.Epoch)), attribute.Int("convoy.donors", len(cfg.Donors))))
		parts, err := membership.Fetch(ctx, cfg)
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
	}()
}

// restored installs the state transferred to this joiner and hands over
// the deliveries held meanwhile.
func (r *runner) restored(parts [][]byte, err error) bool {
	g := r.g
	if err == nil {
		if err = g.restoreParts(parts); err != nil {
			err = fmt.Errorf("restore: %w", err)
		}
	}
	if err == nil && g.disk != nil {
		// The log holds the state from now on, for a restart.
		if err = g.disk.InstallSnapshot(g.ctx, r.v.rec.Start, encodeParts(parts)); err != nil {
			err = fmt.Errorf("durable log: %w", err)
		}
	}
	if err != nil {
		// Without its state this member cannot take part: it drops out
		// (the others exclude it once it falls silent) and tries again.
		r.excluded(nil, fmt.Sprintf("state transfer for view %d failed: %v", r.v.rec.Epoch, err))
		return true
	}
	r.applied = r.v.rec.Start
	r.joined()
	return true
}

// joined ends this joiner's wait for its state: it sees its first view,
// gets the deliveries held meanwhile, and counts as caught up.
func (r *runner) joined() {
	r.restoring = false
	r.onView(publicView(&r.v.rec, nil))
	r.release()
	r.caughtUp()
	r.g.mem.markReady()
}

// caughtUp marks this joiner as holding the group's state.
func (r *runner) caughtUp() {
	epoch, self := r.v.rec.Epoch, r.ms.self
	r.async("mark caught up", func(ctx context.Context, s *membership.Store) error { return s.MarkCaughtUp(ctx, epoch, self) })
}
