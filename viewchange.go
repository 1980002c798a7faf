package convoy

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/internal/vsync"
	"github.com/convoy-gcs/convoy/membership"
)

// onState applies a state read from etcd. It returns false when the loop
// must stop.
func (r *runner) onState(st *membership.State) bool {
	ms := &r.ms
	cur := &st.Current
	switch {
	case cur.Epoch == 0:
		r.maybeBootstrap(st)
		return true
	case r.v == nil:
		if rank := cur.Rank(ms.self.ID); rank >= 0 && cur.Members[rank].Incarnation == ms.self.Incarnation {
			return r.enter(cur, rank)
		}
		if r.g.disk != nil && r.recovering(st) {
			return true // most of the view failed: restart from the logs
		}
		// Ask to join, and ask again if the request is gone (it hangs on
		// the lease, which may have been renewed).
		asked := slices.ContainsFunc(st.Joins, func(m membership.Member) bool { return m == ms.self })
		if now := time.Now(); !asked && now.After(ms.joinRetry) {
			ms.joinRetry = now.Add(max(4*r.g.cfg.SuspectTimeout, time.Second))
			self := ms.self
			pos, fromLog := r.logPos()
			r.async("join request", func(ctx context.Context, s *membership.Store) error {
				if err := s.Register(ctx, self); err != nil {
					return err
				}
				if fromLog {
					return s.RequestJoinFrom(ctx, self, pos)
				}
				return s.RequestJoin(ctx, self)
			})
		}
		return true
	case cur.Epoch < r.v.rec.Epoch:
		return true // an older read
	case cur.Epoch > r.v.rec.Epoch:
		for e := r.v.rec.Epoch + 1; e <= cur.Epoch && r.v != nil; e++ {
			rec := *cur
			if e < cur.Epoch {
				var err error
				if rec, err = r.view(e); err != nil {
					r.g.log.Error("reading an intervening view", "epoch", e, "err", err)
					r.excluded(nil, fmt.Sprintf("view %d unreadable", e))
					return true
				}
			}
			if !r.install(rec) {
				return r.g.Err() == nil
			}
		}
		if r.v == nil {
			return true
		}
	}
	if r.giveWay(st) {
		return true
	}
	r.decide(st)
	return true
}

// view reads committed view e.
func (r *runner) view(e uint64) (membership.View, error) {
	ctx, cancel := context.WithTimeout(r.g.ctx, 10*time.Second)
	defer cancel()
	return r.g.mem.current().View(ctx, e)
}

// maybeBootstrap founds the group once enough members have registered:
// the one with the lowest id writes the first view.
func (r *runner) maybeBootstrap(st *membership.State) {
	ms := &r.ms
	if ms.bootAsked || len(st.Registered) < r.g.cfg.InitialMembers {
		return
	}
	ids := make([]uint64, 0, len(st.Registered))
	for id := range st.Registered {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if ids[0] != ms.self.ID {
		return
	}
	first := membership.View{Epoch: 1, Sent: make([]uint64, len(ids))}
	for _, id := range ids {
		first.Members = append(first.Members, st.Registered[id])
	}
	ms.bootAsked = true
	r.async("found the group", func(ctx context.Context, s *membership.Store) error { return s.Bootstrap(ctx, first) })
}

// decide runs the view-change decision on a state of the current view.
func (r *runner) decide(st *membership.State) {
	g, ms, v := r.g, &r.ms, r.v
	in := membership.ChangeInput{
		Current: st.Current, CaughtUp: st.CaughtUp,
		Joins: st.Joins, Leaves: st.Leaves, Reports: st.Reports,
	}
	in.Suspected = membership.Suspected(&st.Current, st.Suspects, st.Reports)
	for id := range r.unregistered(st) {
		in.Suspected[id] = true
	}
	d, err := membership.Decide(ms.self.ID, in)
	if err != nil {
		g.log.Error("view change", "epoch", v.rec.Epoch, "err", err)
		return
	}
	if d.Change && !r.phase.Ending() {
		r.wedge("view change under way")
	}
	if !r.phase.Ending() && accused(&st.Current, st.Suspects) {
		// A recorded suspicion counts only once a majority has reported
		// (membership.Suspected), and members report once wedged: a
		// suspicion is reason enough to wedge, even when no connection
		// broke (a partition that silently drops packets).
		r.wedge("suspicion recorded")
	}
	if d.Minority != ms.minority {
		ms.minority = d.Minority
		if d.Minority {
			g.m.minority.Add(g.ctx, 1)
			g.log.Warn("the next view would hold no majority of this one: waiting", "epoch", v.rec.Epoch, "next", d.Next)
		}
	}
	if d.Propose != nil && st.Revision > ms.proposed {
		if sameMembers(d.Propose.Members, st.Current.Members) {
			// Nobody is suspected yet, but the view broke: give the
			// detector time to find out who is gone before starting the
			// same members again, or broken views would follow each other.
			if at := r.wedgedAt + 2*int64(g.cfg.SuspectTimeout); g.cfg.Clock() < at {
				r.retryAt, r.retryState = at, st
				return
			}
		}
		ms.proposed = st.Revision
		next := *d.Propose
		r.addSuffixes(&next, st.JoinLogs)
		g.log.Info("proposing view", "epoch", next.Epoch, "members", len(next.Members), "start", next.Start)
		if g.cfg.onPropose != nil {
			g.cfg.onPropose(next.Epoch)
		}
		r.async("install view", func(ctx context.Context, s *membership.Store) error {
			if err := s.Install(ctx, next); err != nil {
				return err
			}
			if g.cfg.onCommitted != nil {
				g.cfg.onCommitted(next.Epoch)
			}
			return nil
		})
	}
	if (v.donor != nil || len(v.suffixDonors) > 0) && allCaughtUp(&v.rec, st.CaughtUp) {
		if v.donor != nil {
			v.donor.Close()
			v.donor = nil
		}
		for _, d := range v.suffixDonors {
			d.Close()
		}
		v.suffixDonors = nil
	}
}

// unregistered returns the members of the current view that the etcd
// registrations give up for dead, a second, coarse signal beside the
// failure detector: a member whose registration names a newer
// incarnation, or whose registration has been missing for a whole lease
// period as this member saw it. A registration goes missing for a moment
// whenever a live member's lease lapses (etcd was out of reach, or slow
// to answer a renewal) and the member registers again: counting that as
// a suspicion would end a view each time.
func (r *runner) unregistered(st *membership.State) map[uint64]bool {
	ms, now := &r.ms, r.g.cfg.Clock()
	out := make(map[uint64]bool)
	missing := make(map[membership.Member]int64)
	for _, m := range st.Current.Members {
		reg, ok := st.Registered[m.ID]
		switch {
		case ok && reg.Incarnation != m.Incarnation:
			out[m.ID] = true
		case !ok:
			key := membership.Member{ID: m.ID, Incarnation: m.Incarnation}
			since, seen := ms.missing[key]
			if !seen {
				since = now
			}
			missing[key] = since
			if now-since >= int64(r.g.cfg.Etcd.LeaseTTL) {
				out[m.ID] = true
			}
		}
	}
	ms.missing = missing
	return out
}

// accused reports whether a member of v suspects another.
func accused(v *membership.View, suspects map[uint64]map[uint64]string) bool {
	for suspect, by := range suspects {
		if v.Rank(suspect) < 0 {
			continue
		}
		for accuser := range by {
			if accuser != suspect && v.Rank(accuser) >= 0 {
				return true
			}
		}
	}
	return false
}

// sameMembers reports whether two member lists hold the same incarnations.
func sameMembers(a, b []membership.Member) bool {
	return slices.EqualFunc(a, b, func(x, y membership.Member) bool { return x.ID == y.ID && x.Incarnation == y.Incarnation })
}

func allCaughtUp(v *membership.View, caughtUp map[uint64]bool) bool {
	for _, id := range v.Joining {
		if !caughtUp[id] {
			return false
		}
	}
	return true
}

// wedge ends this member's part in the current view and reports what it
// holds: its ordering core sends, announces and delivers nothing more in
// it, so that the report (the messages it holds per sender, its last
// delivered index) is final.
func (r *runner) wedge(reason string) {
	if r.phase != vsync.Active {
		return
	}
	g, v := r.g, r.v
	r.to(vsync.Wedged, reason)
	r.wedgedAt = g.cfg.Clock()
	v.core.Wedge()
	v.det.Wedge()
	// The report goes out after a few heartbeats to everyone, so that it
	// can say whom this member still reaches.
	r.reportAt = r.wedgedAt + 3*int64(g.cfg.HeartbeatInterval)
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
	r.reportAt = 0
	rep := membership.Report{Epoch: v.rec.Epoch, Member: r.ms.self, Held: v.core.Held(), Delivered: v.core.Index(), Hears: r.hears()}
	g.log.Debug("final report", "epoch", v.rec.Epoch, "hears", rep.Hears)
	if r.change != nil {
		r.change.AddEvent("final report", trace.WithAttributes(attribute.Int("convoy.hears", len(rep.Hears))))
	}
	r.putReport(rep)
	r.to(vsync.Reported, "final report sent")
}

// hears returns whom this wedged member hears now: the members whose
// heartbeats came in the last two intervals, when every wedged member
// beats to all (older ones may predate a partition).
func (r *runner) hears() []uint64 {
	g, v := r.g, r.v
	since := max(r.wedgedAt, g.cfg.Clock()-2*int64(g.cfg.HeartbeatInterval))
	var out []uint64
	for _, rank := range v.det.Heard(since) {
		out = append(out, v.rec.Members[rank].ID)
	}
	return out
}

func (r *runner) putReport(rep membership.Report) {
	r.reported, r.reportedAt = rep, r.g.cfg.Clock()
	r.async("final report", func(ctx context.Context, s *membership.Store) error { return s.PutReport(ctx, rep) })
}

// refreshReport writes the report again if whom this member hears has
// changed since it last wrote it, at most once per suspect timeout. What
// it holds and delivered is final from the wedge on; whom it hears is
// not: a partition that healed after the reports were written would
// otherwise stand in them for good, and a view change that waits for a
// majority group of reporters (membership.Suspected) would wait forever
// once the suspicions on both sides leave no side a majority.
func (r *runner) refreshReport() {
	now := r.g.cfg.Clock()
	if r.phase != vsync.Reported || now-r.reportedAt < int64(r.g.cfg.SuspectTimeout) {
		return
	}
	hears := r.hears()
	if slices.Equal(hears, r.reported.Hears) {
		return
	}
	rep := r.reported
	rep.Hears = hears
	r.g.log.Info("whom this member hears changed: reporting again", "epoch", rep.Epoch, "hears", hears)
	r.putReport(rep)
}

// suspect records a confirmed suspicion of member id in etcd.
func (r *runner) suspect(id NodeID, reason string) {
	epoch, by := r.v.rec.Epoch, r.ms.self.ID
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
	rank := rec.Rank(r.ms.self.ID)
	in := rank >= 0 && rec.Members[rank].Incarnation == r.ms.self.Incarnation
	if !r.phase.Ending() {
		// Its report was not needed (it is not in rec), or a later view
		// is committed and rec is one of those in between.
		r.to(vsync.Wedged, fmt.Sprintf("view %d is committed", rec.Epoch))
		old.core.Wedge()
	}
	// In durable delivery the view record is on disk before any message
	// of its cut is delivered: a log that holds a message delivered at the
	// cut also holds the cut, with the view it starts.
	if g.disk != nil && in {
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
	rest, resend, err := old.core.Finish(cut)
	if err != nil {
		g.log.Error("cannot end the view at its cut", "epoch", old.rec.Epoch, "err", err)
		r.excluded(&rec, err.Error())
		return false
	}
	r.deliver(rest)
	old.close()
	now := g.cfg.Clock()
	v, err := g.openView(g.ctx, rec, rank, now)
	if err != nil {
		r.fail(fmt.Errorf("open view %d: %w", rec.Epoch, err))
		r.v = nil
		return false
	}
	r.v, r.pendingDonate = v, nil
	// The old view's report (if it was not needed) and held-back decision
	// are moot: left set, a deadline in the past would wake the loop
	// again and again.
	r.reportAt, r.retryAt, r.retryState = 0, 0, nil
	r.to(vsync.Active, fmt.Sprintf("installed view %d", rec.Epoch))
	if g.disk != nil {
		r.announcePersisted() // to the new view's members
	}
	if r.restoring {
		// This member was still waiting for its state: it comes now as of
		// this view's start, which covers what was held back.
		r.held = nil
		r.fetch(v)
	}
	g.m.views.Add(g.ctx, 1)
	g.m.epoch.Record(g.ctx, int64(rec.Epoch))
	r.endChange(attribute.Int64("convoy.next_epoch", int64(rec.Epoch)), attribute.Int("convoy.members", len(rec.Members)),
		attribute.Int("convoy.resend", len(resend)), attribute.Int("convoy.joining", len(rec.Joining)))
	g.log.Info("installed view", "epoch", rec.Epoch, "members", len(rec.Members), "start", rec.Start, "resend", len(resend), "pending", len(r.pending), "joining", len(rec.Joining))
	if !r.restoring {
		r.onView(publicView(&rec, &old.rec)) // a joiner sees its first view once restored
		r.donate(v)
		r.donateSuffixes(v)
	}
	if v.broken != nil {
		// Everything waits for the next view.
		r.pending = append(resend, r.pending...)
		resend = nil
		r.wedge("cannot open the view: " + v.broken.Error())
	}
	// Every message not yet handed to every member goes out again in this
	// view: the re-sent ones, those accepted during the change, and those
	// still on their way to the loop.
	g.mu.Lock()
	g.mu.epoch = rec.Epoch
	g.mu.sending, g.mu.sendingBytes = len(resend)+len(r.pending)+g.mu.queued, g.mu.queuedBytes
	for _, p := range resend {
		g.mu.sendingBytes += len(p)
	}
	for _, p := range r.pending {
		g.mu.sendingBytes += len(p)
	}
	g.spaceFreedLocked()
	g.mu.Unlock()
	if r.phase.Ending() {
		return true
	}
	for _, p := range resend {
		v.core.Send(now, p)
	}
	for _, p := range r.pending {
		r.send(now, p)
	}
	r.pending = nil
	return true
}

// cutFor returns the cut that rec sets on view old, by rank in old.
func cutFor(old, rec *membership.View) ([]uint64, error) {
	if rec.Epoch != old.Epoch+1 || len(rec.Cut) != len(old.Members) {
		return nil, fmt.Errorf("view %d does not follow view %d (%d cuts for %d members)", rec.Epoch, old.Epoch, len(rec.Cut), len(old.Members))
	}
	cut := make([]uint64, len(rec.Cut))
	for i, c := range rec.Cut {
		if c.ID != old.Members[i].ID {
			return nil, fmt.Errorf("view %d's cut names member %d at rank %d of view %d, which is member %d", rec.Epoch, c.ID, i, old.Epoch, old.Members[i].ID)
		}
		cut[i] = c.Seq
	}
	return cut, nil
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
	r.reportAt, r.retryAt, r.retryState = 0, 0, nil
	r.to(vsync.Active, fmt.Sprintf("entered view %d", rec.Epoch))
	g.mu.Lock()
	g.mu.epoch, g.mu.out = rec.Epoch, nil
	g.mu.Unlock()
	joining := slices.Contains(rec.Joining, r.ms.self.ID)
	suffix, bySuffix := rec.SuffixOf(r.ms.self.ID)
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
		case joining:
			// A joiner's state comes by transfer as of the view's start:
			// what an earlier incarnation logged is dropped, and the log
			// continues at Start+1 (restored records the state).
			err = g.disk.InstallSnapshot(g.ctx, rec.Start, nil)
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
	donors := donorsOf(rec, g.cfg.MaxDonors)
	g.log.Info("entered view", "epoch", rec.Epoch, "rank", rank, "members", len(rec.Members), "joining", joining, "donors", len(donors))
	if bySuffix {
		r.restoring = true
		r.fetchSuffix(v, suffix)
		return true
	}
	if joining && g.cfg.State != nil && len(donors) > 0 {
		r.restoring = true
		r.fetch(v)
		return true
	}
	r.onView(publicView(rec, nil))
	if joining {
		r.caughtUp()
	}
	if rec.Recovered {
		r.donate(v) // to the members whose log was not chosen
	}
	g.mem.markReady()
	return true
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
	r.v.close()
	r.v, r.pending, r.restoring, r.held, r.pendingDonate = nil, nil, false, nil, nil
	// Deliveries still waiting to be durable everywhere are not handed
	// out: this incarnation ends here.
	r.durq = nil
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
	g.mu.inflight, g.mu.inflightBytes, g.mu.sending, g.mu.sendingBytes = 0, 0, 0, 0
	g.mu.delivered, g.mu.stable = 0, 0
	g.mu.Unlock()
	ex := View{Epoch: epoch, Excluded: true}
	if rec != nil {
		ex = publicView(rec, nil)
		ex.Excluded = true
	}
	r.onView(ex)
	g.m.epoch.Record(g.ctx, 0)
	if leaving {
		r.to(vsync.Left, reason)
		m.leftOnce.Do(func() { close(m.left) })
		return
	}
	if g.disk != nil && g.disk.Err() != nil {
		// A member that cannot persist does not come back: the
		// application sees the group fail and restarts it (the loop ends
		// on diskErr).
		r.diskErr = g.disk.Err()
		return
	}
	r.to(vsync.Joining, reason)
	// Rejoin as a new incarnation: registering it tells the others that
	// the old one is gone. A member excluded again and again (it is cut
	// off from the others, and each view that admits it breaks at once)
	// waits longer each time, so that the others make progress meanwhile.
	wait := r.rejoinDelay()
	r.ms = memberState{
		self:      membership.Member{ID: r.ms.self.ID, Incarnation: newIncarnation(), Addr: r.ms.self.Addr},
		joinRetry: time.Now().Add(wait + max(4*g.cfg.SuspectTimeout, time.Second)),
	}
	self := r.ms.self
	m.setSelf(self)
	g.log.Info("rejoining as a new incarnation", "incarnation", self.Incarnation, "after", wait)
	r.async("rejoin", func(ctx context.Context, s *membership.Store) error {
		select {
		case <-time.After(wait):
		case <-g.ctx.Done():
			return nil
		}
		if err := s.Register(ctx, self); err != nil {
			return err
		}
		return s.RequestJoin(ctx, self)
	})
}

// rejoinDelay returns how long to wait before rejoining: nothing the first
// time, then from a suspect timeout up, doubling while exclusions follow
// each other within a minute.
func (r *runner) rejoinDelay() time.Duration {
	now := time.Now()
	if now.Sub(r.lastExcluded) > time.Minute {
		r.exclusions = 0
	}
	r.lastExcluded = now
	r.exclusions++
	if r.exclusions == 1 {
		return 0
	}
	return min(r.g.cfg.SuspectTimeout<<(r.exclusions-2), 30*time.Second)
}
