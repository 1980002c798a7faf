package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/internal/plant"
	"github.com/convoy-gcs/convoy/internal/vsync"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/ordering"
)

// onState applies a state read from etcd: the view-change core decides
// (vsync.Core.State) and the loop carries out what it returns. It
// returns false when the loop must stop.
func (r *runner) onState(st *membership.State) bool {
	for {
		again := false
		for _, a := range r.vs.State(r.g.cfg.Clock(), st) {
			if !r.do(a) {
				return false
			}
			if a.Kind == vsync.Install {
				// The core asks for one view at a time: once it is in,
				// the same state may hold the next (the views in between
				// a member missed are applied in order).
				if !r.vs.Phase().InView() {
					return true
				}
				again = true
			}
		}
		if !again {
			return true
		}
	}
}

// do carries out one action of the view-change core. It returns false
// when the loop must stop.
func (r *runner) do(a vsync.Action) bool {
	g := r.g
	if r.installing && (a.Kind == vsync.RequestJoin || a.Kind == vsync.Enter) {
		// An earlier incarnation's state is still being installed: a new
		// one starts once it is in (stateInstalled), lest two writers
		// change the application's state and the log at once.
		r.afterInstall = append(r.afterInstall, a)
		return true
	}
	switch a.Kind {
	case vsync.Bootstrap:
		first := *a.View
		r.async("found the group", func(ctx context.Context, s *membership.Store) error { return s.Bootstrap(ctx, first) })
	case vsync.RequestJoin:
		self := r.vs.Self()
		pos, fromLog := r.logPos()
		reqs := g.topicRequests(self)
		r.async("join request", func(ctx context.Context, s *membership.Store) error {
			if err := s.Register(ctx, self); err != nil {
				return err
			}
			if err := putTopicRequests(ctx, s, reqs); err != nil {
				return err
			}
			if fromLog {
				return s.RequestJoinFrom(ctx, self, pos)
			}
			return s.RequestJoin(ctx, self)
		})
	case vsync.Enter:
		return r.enter(a.View, a.Rank)
	case vsync.Install:
		rec := a.View
		if rec == nil {
			v, err := r.view(a.Epoch)
			if err != nil {
				g.log.Error("reading an intervening view", "epoch", a.Epoch, "err", err)
				r.excluded(nil, fmt.Sprintf("view %d unreadable", a.Epoch))
				return true
			}
			rec = &v
		}
		if !r.install(*rec) {
			return g.Err() == nil
		}
	case vsync.Exclude:
		r.excluded(a.View, a.Reason)
	case vsync.Wedge:
		r.stopView(a.Reason)
	case vsync.Report:
		r.report()
	case vsync.RefreshReport:
		r.refreshReport()
	case vsync.Propose:
		r.propose(*a.View, a.Logs)
	case vsync.Minority:
		if a.Minority {
			g.m.minority.Add(g.ctx, 1)
			g.log.Warn("the next view would hold no majority of this one: waiting", "epoch", r.v.rec.Epoch, "next", a.Next)
		}
	case vsync.DonorsDone:
		r.donorsDone()
	case vsync.MarkCaughtUp:
		g.log.Info("etcd does not show this member caught up: marking it again", "epoch", r.v.rec.Epoch)
		r.markCaughtUp()
	case vsync.Claim:
		r.claimLog(a.View)
	case vsync.Recover:
		next := *a.View
		g.log.Info("restarting the group", "epoch", next.Epoch, "start", next.Start, "members", len(next.Members), "joining", len(next.Joining))
		r.async("restart the group", func(ctx context.Context, s *membership.Store) error { return s.Recover(ctx, next) })
	}
	return true
}

// view reads committed view e.
func (r *runner) view(e uint64) (membership.View, error) {
	ctx, cancel := context.WithTimeout(r.g.ctx, 10*time.Second)
	defer cancel()
	return r.g.mem.current().View(ctx, e)
}

// propose commits next, a view this member proposes as leader, once the
// joiners that restarted with their logs are told where their logs go
// on (addSuffixes).
func (r *runner) propose(next membership.View, logs map[membership.ID]membership.LogPos) {
	g := r.g
	r.addSuffixes(&next, logs)
	g.log.Info("proposing view", "epoch", next.Epoch, "members", len(next.Members), "start", next.Start)
	if g.cfg.test.onPropose != nil {
		g.cfg.test.onPropose(next.Epoch)
	}
	r.async("install view", func(ctx context.Context, s *membership.Store) error {
		if err := s.Install(ctx, next); err != nil {
			return err
		}
		if g.cfg.test.onCommitted != nil {
			g.cfg.test.onCommitted(next.Epoch)
		}
		return nil
	})
}

// donorsDone stops serving the view's joiners: each holds its state.
func (r *runner) donorsDone() {
	g, v := r.g, r.v
	now := g.cfg.Clock()
	if v.donor != nil {
		v.donor.Close()
		v.donor = nil
		v.closeSpills()
		g.m.transferTook(roleDonor, kindSnapshot, time.Duration(now-v.donorSince))
	}
	for _, d := range v.suffixDonors {
		d.Close()
		g.m.transferTook(roleDonor, kindSuffix, time.Duration(now-v.suffixDonorsSince))
	}
	v.suffixDonors = nil
}

// ending reports whether this member has stopped in its view, which is
// ending (a group with fixed membership never is).
func (r *runner) ending() bool { return r.vs != nil && r.vs.Phase().Ending() }

// wedge ends this member's part in the current view and reports what it
// holds: its ordering core sends, announces and delivers nothing more in
// it, so that the report (the messages it holds per sender, its last
// delivered index) is final.
func (r *runner) wedge(reason string) {
	if r.vs.Wedge(r.g.cfg.Clock()) {
		r.stopView(reason)
	}
}

// stopView stops the current view's machinery once the core wedged: no
// more sending, announcing or delivering in it; heartbeats go to every
// member until the final report.
func (r *runner) stopView(reason string) {
	g, v := r.g, r.v
	v.core.Wedge()
	v.det.Wedge()
	g.log.Info("wedged", "epoch", v.rec.Epoch, "reason", reason, "delivered", v.core.Index())
	_, r.change = g.tr.Start(g.ctx, "convoy.view.change", trace.WithAttributes(
		attribute.Int64("convoy.epoch", int64(v.rec.Epoch)),
		attribute.String("convoy.reason", reason),
		attribute.Int64("convoy.delivered", int64(v.core.Index()))))
}

// endChange ends the view change's span.
func (r *runner) endChange(attrs ...attribute.KeyValue) {
	if r.change != nil {
		r.change.SetAttributes(attrs...)
		r.change.End()
		r.change = nil
	}
}

// report writes this member's final report for the wedged view.
func (r *runner) report() {
	g, v := r.g, r.v
	rep := membership.Report{
		Epoch: v.rec.Epoch, Member: r.vs.Self(), Held: v.core.Held(), TopicHeld: v.core.HeldTopics(),
		Delivered: v.core.Index(), Hears: r.hears(),
	}
	g.log.Debug("final report", "epoch", v.rec.Epoch, "hears", rep.Hears)
	if r.change != nil {
		r.change.AddEvent("final report", trace.WithAttributes(attribute.Int("convoy.hears", len(rep.Hears))))
	}
	r.putReport(rep)
	if g.cfg.test.plant.Has(plant.EarlyDelivery) {
		// The planted fault: the member delivers what it holds as if that
		// were the cut, before the cut is committed.
		ds, _, _ := v.core.Finish(ordering.Cut{Senders: rep.Held, Topics: rep.TopicHeld})
		r.deliver(ds)
	}
}

// hears returns whom this wedged member hears now: the members whose
// heartbeats came since it wedged, when every wedged member beats to all,
// and within the last suspect timeout (older ones may predate a
// partition). A shorter window would take a member's scheduling pause
// of a few heartbeat intervals, which the detector itself forgives, for
// a partition, and the view change would exclude it.
func (r *runner) hears() []uint64 {
	g, v := r.g, r.v
	since := max(r.vs.WedgedAt(), g.cfg.Clock()-int64(g.cfg.SuspectTimeout))
	var out []uint64
	for _, rank := range v.det.Heard(since) {
		out = append(out, v.rec.Members[rank].ID)
	}
	return out
}

// putReport writes rep, this member's final report for its view, to
// etcd. The writes are numbered (Report.Seq): one retried while etcd was
// out of reach may land after a later one, and the later stands
// (membership.Store.PutReport).
func (r *runner) putReport(rep membership.Report) {
	rep.Seq = 1
	if r.reported.Epoch == rep.Epoch && r.reported.Member == rep.Member {
		rep.Seq = r.reported.Seq + 1
	}
	r.reported = rep
	r.reportWrites.start(rep)
	r.asyncThen(0, "final report", func(ctx context.Context, s *membership.Store) error { return s.PutReport(ctx, rep) },
		func(err error) { r.reportWrites.done(rep, err) })
}

// refreshReport writes the final report again if whom this member hears
// has changed since it last wrote it, or if its last write was given up
// (etcd was out of reach for longer than writes are retried) and none is
// under way. The core asks once the last write is a suspect timeout old
// (vsync.RefreshReport says why).
func (r *runner) refreshReport() {
	hears := r.hears()
	switch {
	case !slices.Equal(hears, r.reported.Hears):
		r.g.log.Info("whom this member hears changed: reporting again", "epoch", r.reported.Epoch, "hears", hears)
	case !r.reportWrites.lost(r.reported):
		return
	default:
		r.g.log.Info("the final report's write was given up: reporting again", "epoch", r.reported.Epoch, "hears", hears)
	}
	rep := r.reported
	rep.Hears = hears
	r.putReport(rep)
	r.vs.Rereported(r.g.cfg.Clock())
}

// reportWrites follows the writes of a member's latest final report: the
// writes of its current view's report by its current incarnation under
// way, and the highest write number etcd acknowledged. Writes of other
// reports do not count.
type reportWrites struct {
	mu      sync.Mutex
	epoch   uint64
	self    membership.Member
	pending int
	acked   uint64
}

// start records a write of rep under way.
func (w *reportWrites) start(rep membership.Report) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rep.Epoch != w.epoch || rep.Member != w.self {
		w.epoch, w.self, w.pending, w.acked = rep.Epoch, rep.Member, 0, 0
	}
	w.pending++
}

// done records the end of a write of rep, made if err is nil.
func (w *reportWrites) done(rep membership.Report, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rep.Epoch != w.epoch || rep.Member != w.self {
		return
	}
	w.pending--
	if err == nil {
		w.acked = max(w.acked, rep.Seq)
	}
}

// lost reports whether etcd does not hold rep (or a later write of the
// same report) and no write under way may still bring it: none of the
// report's writes is under way, and none numbered rep's or higher was
// acknowledged.
func (w *reportWrites) lost(rep membership.Report) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rep.Epoch != w.epoch || rep.Member != w.self {
		return true
	}
	return w.pending == 0 && w.acked < rep.Seq
}

// suspect records a confirmed suspicion of member id in etcd.
func (r *runner) suspect(id NodeID, reason string) {
	epoch, by := r.v.rec.Epoch, r.vs.Self().ID
	r.async("record suspicion", func(ctx context.Context, s *membership.Store) error {
		return s.Suspect(ctx, epoch, by, uint64(id), reason)
	})
}

// install moves from the current view to its successor rec: it delivers
// the rest of the old view's cut, discards the old view's messages beyond
// it, and sends its own messages beyond the cut again in rec. It returns
// false if this member left the views.
func (r *runner) install(rec membership.View) bool {
	g, old := r.g, r.v
	self := r.vs.Self()
	rank := rec.Rank(self.ID)
	in := rank >= 0 && rec.Members[rank].Incarnation == self.Incarnation
	if !r.ending() {
		// Its report was not needed (it is not in rec), or a later view
		// is committed and rec is one of those in between.
		r.vs.Ending(g.cfg.Clock())
		old.core.Wedge()
	}
	// In durable delivery the view record is on disk before any message
	// of its cut is delivered: a log that holds a message delivered at the
	// cut also holds the cut, with the view it starts.
	// (The planted fault leaves the record out: the log fsyncs its writes
	// in order, so a record put before the cut's entries, waited for or
	// not, is on disk before them.)
	if g.disk != nil && in && !g.cfg.test.plant.Has(plant.UnsyncedView) {
		if err := g.disk.PutView(g.ctx, rec); err != nil {
			g.log.Error("durable log: view record", "epoch", rec.Epoch, "err", err)
		}
	}
	// A snapshot for the ending view's joiners is of no use any more: it
	// stops after the part in progress, and until then the deliveries
	// (and views) stay held, behind those held already.
	r.stopSnapshot()
	r.deliver(old.core.Ready().Deliveries)
	cut, err := cutFor(&old.rec, &rec)
	if err != nil {
		r.excluded(&rec, err.Error())
		return false
	}
	if !in {
		r.excluded(&rec, "not a member of the new view")
		return false
	}
	rest, again, err := old.core.Finish(cut)
	if err != nil {
		g.log.Error("cannot end the view at its cut", "epoch", old.rec.Epoch, "err", err)
		r.excluded(&rec, err.Error())
		return false
	}
	if n := old.core.Stats().Discarded; n > 0 {
		g.m.fenced.Add(g.ctx, int64(n), g.m.cut.add...)
	}
	r.deliver(rest)
	r.endTopics(old, cut)
	resend := make([]outMsg, len(again))
	for i, m := range again {
		resend[i] = outMsg{old.topicName(m.Topic), m.Payload}
	}
	old.close()
	// What the old view did not order beyond the cut, it never delivers.
	g.msgs.abandonUnordered("beyond the view's cut")
	now := g.cfg.Clock()
	v, err := g.openView(g.ctx, rec, rank, now)
	if err != nil {
		r.fail(fmt.Errorf("open view %d: %w", rec.Epoch, err))
		r.v = nil
		return false
	}
	r.v, r.pendingDonate = v, nil
	g.setTopics(&rec)
	// The old view's report (if it was not needed) and held-back decision
	// are moot: the core forgets them, or a deadline in the past would
	// wake the loop again and again.
	r.vs.Installed(&rec)
	if g.disk != nil {
		r.announcePersisted() // to the new view's members
	}
	caughtUpNow := false
	if r.restoring {
		// This member was still waiting for its state: it comes now as of
		// this view's start, which covers what was held back. Its log
		// took the previous view's messages up to the cut, and goes on
		// from there. An earlier view's state being installed meanwhile
		// is not to be logged any more, and one waiting to be installed
		// goes.
		r.held = nil
		if r.installing {
			r.supersede(r.installingView)
		}
		r.dropNextInstall()
		if g.cfg.State == nil {
			// No state comes by transfer without a StateMachine (no donor
			// serves one): like a joiner of this view (enter), the member
			// is caught up at once, as of the view's start, with the state
			// it starts with.
			if g.disk != nil {
				if err := r.logOwnStateAt(rec.Start); err != nil {
					g.log.Error("durable log: joining again", "epoch", rec.Epoch, "err", err)
				}
			}
			r.stateAtStart(&rec)
			r.restoring = false
			caughtUpNow = true
		} else {
			if g.disk != nil && g.disk.Last() != rec.Start {
				if err := g.disk.InstallSnapshot(g.ctx, rec.Start, nil); err != nil {
					g.log.Error("durable log: joining again", "epoch", rec.Epoch, "err", err)
				}
			}
			r.fetch(v)
		}
	}
	g.m.views.Add(g.ctx, 1)
	g.m.epoch.Record(g.ctx, int64(rec.Epoch))
	r.endChange(attribute.Int64("convoy.next_epoch", int64(rec.Epoch)), attribute.Int("convoy.members", len(rec.Members)),
		attribute.Int("convoy.resend", len(resend)), attribute.Int("convoy.joining", len(rec.Joining)))
	g.log.Info("installed view", "epoch", rec.Epoch, "members", len(rec.Members), "start", rec.Start, "resend", len(resend), "pending", len(r.pending), "joining", len(rec.Joining))
	// Every message not yet handed to every member goes out again in this
	// view: the re-sent ones, those accepted during the change, and those
	// still on their way to the loop. The group's account shows the view
	// before the application hears of it: Status, read once OnView
	// reported a view, shows that view's epoch or a later one.
	g.mu.Lock()
	g.mu.epoch = rec.Epoch
	g.mu.sending, g.mu.sendingBytes = len(resend)+len(r.pending)+g.mu.queued, g.mu.queuedBytes
	for _, m := range resend {
		g.mu.sendingBytes += len(m.payload)
	}
	for _, m := range r.pending {
		g.mu.sendingBytes += len(m.payload)
	}
	g.spaceFreedLocked()
	g.mu.Unlock()
	r.publish()
	if !r.restoring {
		prev := &old.rec
		if caughtUpNow {
			prev = nil // its first view, as a joiner's (joined)
		}
		r.onView(publicView(&rec, prev)) // a joiner sees its first view once restored
		r.donate(v)
		r.donateSuffixes(v)
	}
	if caughtUpNow {
		r.caughtUp()
		g.mem.markReady()
	}
	if v.broken != nil {
		// Everything waits for the next view.
		r.pending = append(resend, r.pending...)
		resend = nil
		r.wedge("cannot open the view: " + v.broken.Error())
		r.publish()
	}
	r.syncsAtView()
	if r.ending() {
		return true
	}
	for _, m := range resend {
		if m.topic == "" {
			v.core.Send(now, m.payload)
		} else {
			r.publishOn(now, m.topic, m.payload)
		}
	}
	for _, m := range r.pending {
		r.sendMsg(now, m)
	}
	r.pending = nil
	return true
}

// cutFor returns the cut that rec sets on view old, by rank in old: on
// the group's messages, and on each topic of old.
func cutFor(old, rec *membership.View) (ordering.Cut, error) {
	senders, err := senderCut(old, rec.Epoch, rec.Cut)
	if err != nil {
		return ordering.Cut{}, err
	}
	cut := ordering.Cut{Senders: senders}
	for _, t := range old.Topics {
		next, _ := rec.Topic(t.Name)
		if next == nil {
			return ordering.Cut{}, fmt.Errorf("view %d drops topic %q of view %d", rec.Epoch, t.Name, old.Epoch)
		}
		tc, err := senderCut(old, rec.Epoch, next.Cut)
		if err != nil {
			return ordering.Cut{}, fmt.Errorf("topic %q: %w", t.Name, err)
		}
		cut.Topics = append(cut.Topics, tc)
	}
	return cut, nil
}

// senderCut returns, by rank in old, the counts of a cut that view
// epoch sets on old.
func senderCut(old *membership.View, epoch uint64, sc []membership.SenderCut) ([]uint64, error) {
	if epoch != old.Epoch+1 || len(sc) != len(old.Members) {
		return nil, fmt.Errorf("view %d does not follow view %d (%d cuts for %d members)", epoch, old.Epoch, len(sc), len(old.Members))
	}
	cut := make([]uint64, len(sc))
	for i, c := range sc {
		if c.ID != old.Members[i].ID {
			return nil, fmt.Errorf("view %d's cut names member %d at rank %d of view %d, which is member %d", epoch, c.ID, i, old.Epoch, old.Members[i].ID)
		}
		cut[i] = c.Seq
	}
	return cut, nil
}

// endTopics settles this member's messages on the topics of the ended
// view old up to its cut: every subscriber that stays delivered them.
// Those beyond it are sent again in the next view, but for those on a
// topic in total order mode, which best effort sends no more (they may
// or may not have been delivered).
func (r *runner) endTopics(old *view, cut ordering.Cut) {
	for i := range old.topics {
		t, q := &old.topics[i], &old.pubs[i]
		end := t.sent[old.self] + cut.Topics[i][old.self]
		if t.mode != Atomic && len(q.sizes) > 0 {
			end = q.first + uint64(len(q.sizes)) - 1
		}
		if end < q.first || len(q.sizes) == 0 {
			continue
		}
		n := min(int(end-q.first+1), len(q.sizes))
		r.g.ownPublished(t.name, q.first, q.first+uint64(n)-1, q.sizes[:n], t.subscribed)
		q.sizes = q.sizes[n:]
		q.first += uint64(n)
	}
}

// enter starts this incarnation's first view, rec, in which it has rank.
func (r *runner) enter(rec *membership.View, rank int) bool {
	g := r.g
	v, err := g.openView(g.ctx, *rec, rank, g.cfg.Clock())
	if err != nil {
		r.fail(fmt.Errorf("open view %d: %w", rec.Epoch, err))
		return false
	}
	r.v = v
	g.setTopics(rec)
	r.vs.Entered(rec)
	// The incarnation's topic requests (a joiner's went with its join
	// request, but a founder of the group or of its restart makes none).
	if reqs := g.topicRequests(r.vs.Self()); len(reqs) > 0 {
		r.async("topic requests", func(ctx context.Context, s *membership.Store) error { return putTopicRequests(ctx, s, reqs) })
	}
	g.mu.Lock()
	g.mu.epoch, g.mu.out = rec.Epoch, nil
	g.mu.Unlock()
	r.publish()
	joining := slices.Contains(rec.Joining, r.vs.Self().ID)
	suffix, bySuffix := rec.SuffixOf(r.vs.Self().ID)
	donors := donorsOf(rec, g.cfg.MaxDonors)
	// A joiner gets the state by transfer, unless there is none to get.
	transfer := joining && g.cfg.State != nil && len(donors) > 0
	if g.disk != nil {
		var err error
		switch {
		case bySuffix:
			// Its log goes on where it ends: the messages after it come
			// from the donor's log (suffixed).
			if last := g.disk.Last(); last != suffix.From-1 || r.applied > last || r.applied < last && g.disk.First() > r.applied+1 {
				err = fmt.Errorf("log ends at %d (applied %d), the suffix starts at %d", last, r.applied, suffix.From)
				if werr := g.disk.InstallSnapshot(g.ctx, 0, nil); werr != nil {
					g.log.Error("durable log: reset", "err", werr)
				}
				r.applied = 0
			}
		case transfer:
			// A joiner's state comes by transfer as of the view's start:
			// what an earlier incarnation logged is dropped, and the log
			// continues at Start+1 (restored records the state).
			err = g.disk.InstallSnapshot(g.ctx, rec.Start, nil)
		case joining:
			// No transfer follows: the joiner is caught up at once, with
			// the state it starts with, and its log says so. Joining a
			// restart of the group, it first hands what its claim put in
			// the group's sequence.
			if rec.Recovered {
				err = r.handClaimed(rec)
			}
			if err == nil {
				err = r.logOwnStateAt(rec.Start)
			}
		case rec.Recovered:
			err = r.enterRecovered(rec)
		}
		if err == nil {
			err = g.disk.PutView(g.ctx, *rec)
		}
		if err != nil {
			g.log.Error("durable log: entering a view", "epoch", rec.Epoch, "err", err)
			r.excluded(rec, "durable log: "+err.Error())
			return true
		}
		r.announcePersisted()
	}
	if v.broken != nil {
		r.wedge("cannot open the view: " + v.broken.Error())
	}
	g.m.views.Add(g.ctx, 1)
	g.m.epoch.Record(g.ctx, int64(rec.Epoch))
	g.log.Info("entered view", "epoch", rec.Epoch, "rank", rank, "members", len(rec.Members), "joining", joining, "donors", len(donors))
	if bySuffix {
		r.restoring = true
		r.fetchSuffix(v, suffix)
		return true
	}
	if transfer {
		r.restoring = true
		if g.cfg.test.plant.Has(plant.EarlyCaughtUp) {
			r.caughtUp() // the planted fault: before the state has come
		}
		r.fetch(v)
		return true
	}
	if joining {
		r.stateAtStart(rec)
	}
	r.onView(publicView(rec, nil))
	if joining {
		r.caughtUp()
	}
	if rec.Recovered {
		// To the members whose log was not chosen: the state, or the
		// messages their logs lack.
		r.donate(v)
		r.donateSuffixes(v)
	}
	g.mem.markReady()
	return true
}

// logOwnStateAt starts the durable log again at start with a snapshot
// that has no parts: the member is caught up without a transfer, with
// the state it starts with, so that a restart from this log replays from
// start+1 instead of waiting for a state that will never come.
func (r *runner) logOwnStateAt(start uint64) error {
	return r.g.disk.InstallSnapshot(r.g.ctx, start, encodeParts(nil))
}

// stateAtStart records a member caught up without a transfer: its state
// is that of the view's start, as a transfer would have left it.
func (r *runner) stateAtStart(rec *membership.View) {
	r.applied = max(r.applied, rec.Start)
	r.g.delivered.Store(r.applied)
}

// onView hands a view to the application, behind the deliveries still
// held or waiting to be durable.
func (r *runner) onView(v View) {
	if r.holding() && !r.restoring {
		r.held = append(r.held, durItem{v: &v})
		return
	}
	r.passView(v)
}

// passView hands a view to the application, behind the deliveries still
// waiting to be durable.
func (r *runner) passView(v View) {
	if len(r.durq) > 0 {
		r.durq = append(r.durq, durItem{v: &v})
		return
	}
	r.onViewNow(v)
}

func (r *runner) onViewNow(v View) {
	r.g.mu.Lock()
	r.g.mu.view = v
	r.g.mu.Unlock()
	if r.g.cfg.OnView != nil {
		r.g.cfg.OnView(v)
	}
}

// excluded takes this member out of the views: rec (nil if unknown) does
// not hold it. Its undelivered messages are reported lost to their
// senders; unless it is leaving, it rejoins as a new incarnation.
func (r *runner) excluded(rec *membership.View, reason string) {
	g, m := r.g, r.g.mem
	epoch := uint64(0)
	if rec != nil {
		epoch = rec.Epoch
	}
	m.mu.Lock()
	leaving := m.mu.leaving
	m.mu.Unlock()
	if leaving {
		g.log.Info("left the group", "epoch", epoch)
	} else {
		g.log.Warn("excluded from the group", "epoch", epoch, "reason", reason)
	}
	r.endChange(attribute.Bool("convoy.excluded", true))
	r.waitSnapshots()
	r.waitOwnSnapshot()
	r.dropNextInstall()
	r.v.close()
	r.v, r.pending, r.restoring, r.held, r.pendingDonate = nil, nil, false, nil, nil
	// Deliveries still waiting to be durable everywhere are not handed
	// out: this incarnation ends here.
	r.durq = nil
	r.dropTopics()
	r.sendTimes, r.sentBase = nil, 0
	out := fmt.Errorf("%w: view %d: %s", ErrExcluded, epoch, reason)
	if leaving {
		out = ErrLeft
	}
	// Send refuses messages before the application hears of the
	// exclusion: a message Send accepts after OnView reported it belongs
	// to the next incarnation, never to this one, whose messages beyond
	// the cut are dropped.
	g.mu.Lock()
	g.mu.epoch, g.mu.out = 0, out
	g.wakeAllLocked(out)
	g.mu.nextSeq = 1
	clear(g.mu.pubSeq)
	g.mu.inflight, g.mu.inflightBytes, g.mu.sending, g.mu.sendingBytes = 0, 0, 0, 0
	g.mu.delivered, g.mu.stable = 0, 0
	g.mu.Unlock()
	r.publish()
	r.endSyncs(out)
	ex := View{Epoch: epoch, Excluded: true}
	if rec != nil {
		ex = publicView(rec, nil)
		ex.Excluded = true
	}
	r.onView(ex)
	g.m.epoch.Record(g.ctx, 0)
	if leaving {
		r.vs.Left()
		m.leftOnce.Do(func() { close(m.left) })
		return
	}
	if g.disk != nil && g.disk.Err() != nil {
		// A member that cannot persist does not come back: the
		// application sees the group fail and restarts it (the loop ends
		// on diskErr).
		r.diskErr = g.disk.Err()
		r.vs.Failed()
		return
	}
	// Rejoin as a new incarnation: registering it tells the others that
	// the old one is gone.
	old := r.vs.Self()
	self := membership.Member{ID: old.ID, Incarnation: g.newIncarnation(old.Incarnation), Addr: old.Addr}
	wait := r.vs.Excluded(g.cfg.Clock(), self)
	m.setSelf(self)
	g.log.Info("rejoining as a new incarnation", "incarnation", self.Incarnation, "after", wait)
	reqs := g.topicRequests(self)
	r.asyncAfter(wait, "rejoin", func(ctx context.Context, s *membership.Store) error {
		if err := s.Register(ctx, self); err != nil {
			return err
		}
		if err := putTopicRequests(ctx, s, reqs); err != nil {
			return err
		}
		return s.RequestJoin(ctx, self)
	})
}
