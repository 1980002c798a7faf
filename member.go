package convoy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/convoy-gcs/convoy/internal/etcdembed"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/rdma"
)

// member is the membership runtime of a view-managed group: the etcd
// connection, this member's incarnation, and the goroutines that watch
// etcd and write to it on the loop's behalf.
type member struct {
	server   *etcdembed.Server // when Open started an embedded etcd
	client   *clientv3.Client
	storeCfg membership.StoreConfig
	// ready is closed once this member takes part in a view (with its
	// state), left once it has left the group on purpose.
	ready, left         chan struct{}
	readyOnce, leftOnce sync.Once
	// failed is closed when the group fails.
	failed     chan struct{}
	failedOnce sync.Once
	closeOnce  sync.Once
	wg         sync.WaitGroup
	// abandon, for tests, makes close leave the etcd lease to expire, as
	// when the process is killed.
	abandon bool

	mu struct {
		sync.Mutex
		addrs   map[NodeID]string
		leaving bool
		self    membership.Member // the current incarnation
		store   *membership.Store // replaced when its lease is lost
	}
}

func (m *member) setSelf(self membership.Member) {
	m.mu.Lock()
	m.mu.self = self
	m.mu.Unlock()
}

// memberState is the loop's part of the membership runtime.
type memberState struct {
	self membership.Member
	// joinRetry is when to ask to join again if no request is recorded;
	// bootAsked: the first view was written.
	joinRetry time.Time
	bootAsked bool
	// proposed is the etcd revision of the state this member last
	// proposed a view on, as leader.
	proposed int64
	minority bool
}

// openDynamic is Open for a view-managed group.
func (g *Group) openDynamic(ctx context.Context) (_ *Group, err error) {
	c := g.cfg
	m := &member{ready: make(chan struct{}), left: make(chan struct{}), failed: make(chan struct{})}
	m.mu.addrs = make(map[NodeID]string)
	g.mem = m
	// Until the loop runs, failures release what is set up so far.
	started := false
	defer func() {
		if err != nil && !started {
			g.cancel()
			g.closeTransport()
			m.close()
		}
	}()
	if len(c.Etcd.Endpoints) == 0 {
		if m.server, err = etcdembed.Start(ctx, etcdembed.Config{Dir: c.Etcd.Dir, Logger: c.Logger}); err != nil {
			return nil, fmt.Errorf("convoy: start embedded etcd: %w", err)
		}
		if m.client, err = m.server.Client(ctx); err != nil {
			return nil, fmt.Errorf("convoy: connect to embedded etcd: %w", err)
		}
	} else if m.client, err = clientv3.New(clientv3.Config{
		Endpoints: c.Etcd.Endpoints, DialTimeout: c.Etcd.DialTimeout, TLS: c.Etcd.TLS, Logger: zap.NewNop(), Context: g.ctx,
	}); err != nil {
		return nil, fmt.Errorf("convoy: connect to etcd %v: %w", c.Etcd.Endpoints, err)
	}
	m.storeCfg = membership.StoreConfig{Client: m.client, Prefix: c.Etcd.Prefix, LeaseTTL: c.Etcd.LeaseTTL, Logger: c.Logger}
	store, err := membership.NewStore(ctx, m.storeCfg)
	if err != nil {
		return nil, fmt.Errorf("convoy: %w", err)
	}
	m.mu.store = store
	addr := c.Addr
	if g.ep = c.Endpoint; g.ep == nil {
		if g.ep, err = g.listen(m.resolve); err != nil {
			return nil, err
		}
		g.ownEP = true
		if t, ok := g.ep.(*rdma.TCPEndpoint); ok {
			addr = t.Addr().String()
		}
	}
	self := membership.Member{ID: uint64(c.Self), Incarnation: newIncarnation(), Addr: addr}
	if err := store.Register(ctx, self); err != nil {
		return nil, fmt.Errorf("convoy: register in etcd: %w", err)
	}
	g.mu.out = ErrNotMember
	m.setSelf(self)
	started = true
	g.loopWG.Add(1)
	go g.loop(&runner{g: g, ms: memberState{self: self}})
	m.wg.Add(1)
	go m.watch(g)
	select {
	case <-m.ready:
		return g, nil
	case <-ctx.Done():
		err = fmt.Errorf("convoy: waiting to take part in a view: %w", ctx.Err())
	case <-m.failed:
		err = g.Err()
	}
	g.Close()
	return nil, err
}

// newIncarnation returns a number that grows from one incarnation of a
// member to the next.
func newIncarnation() uint64 { return uint64(time.Now().UnixNano()) }

// resolve gives the tcp transport a member's address.
func (m *member) resolve(id NodeID) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.mu.addrs[id]; ok && a != "" {
		return a, nil
	}
	return "", fmt.Errorf("convoy: no address known for member %d", id)
}

// learn records the members' addresses from st.
func (m *member) learn(st *membership.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mb := range st.Current.Members {
		m.mu.addrs[NodeID(mb.ID)] = mb.Addr
	}
	for _, mb := range st.Joins {
		m.mu.addrs[NodeID(mb.ID)] = mb.Addr
	}
	for id, mb := range st.Registered {
		m.mu.addrs[NodeID(id)] = mb.Addr
	}
}

// watch reads the store's state whenever it changes (and at least once
// per lease period) and hands it to the loop.
func (m *member) watch(g *Group) {
	defer m.wg.Done()
	resync := max(g.cfg.Etcd.LeaseTTL/2, 100*time.Millisecond)
	for g.ctx.Err() == nil {
		store := m.current()
		ctx, cancel := context.WithCancel(g.ctx)
		changes := store.Watch(ctx)
		m.follow(g, store, changes, resync)
		cancel()
		if g.ctx.Err() != nil {
			return
		}
		// The lease is gone (etcd was out of reach for longer than its
		// TTL, or this process was paused): register again on a new one.
		// The others may have excluded this member meanwhile; the state
		// then says so, and it rejoins.
		g.log.Warn("etcd registration lost: registering again", "err", store.Err())
		m.renew(g)
	}
}

// follow hands the store's state to the loop on every change until the
// store's lease is lost or the group closes.
func (m *member) follow(g *Group, store *membership.Store, changes <-chan membership.Change, resync time.Duration) {
	for {
		st, err := store.State(g.ctx)
		switch {
		case g.ctx.Err() != nil:
			return
		case err != nil:
			g.log.Warn("reading the group's state from etcd", "err", err)
		default:
			m.learn(&st)
			g.post(event{kind: evState, state: &st})
		}
		select {
		case <-changes:
		case <-time.After(resync):
		case <-store.Done():
			return
		case <-g.ctx.Done():
			return
		}
	}
}

// renew replaces a store whose lease was lost, retrying until it works or
// the group closes.
func (m *member) renew(g *Group) {
	for backoff := 50 * time.Millisecond; g.ctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
		ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
		store, err := membership.NewStore(ctx, m.storeCfg)
		if err == nil {
			m.mu.Lock()
			self := m.mu.self
			m.mu.Unlock()
			if err = store.Register(ctx, self); err != nil {
				store.Close()
			}
		}
		cancel()
		if err == nil {
			m.mu.Lock()
			old := m.mu.store
			m.mu.store = store
			m.mu.Unlock()
			old.Close()
			return
		}
		g.log.Warn("registering in etcd again", "err", err)
		select {
		case <-time.After(backoff):
		case <-g.ctx.Done():
		}
	}
}

// current returns the store in use.
func (m *member) current() *membership.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.store
}

// async runs an etcd write for the loop, bounded in time; failures are
// logged (the next state read shows what happened).
func (r *runner) async(what string, fn func(ctx context.Context, s *membership.Store) error) {
	g, m := r.g, r.g.mem
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
		defer cancel()
		if err := fn(ctx, m.current()); err != nil && g.ctx.Err() == nil {
			lvl := g.log.Warn
			if errors.Is(err, membership.ErrConflict) {
				lvl = g.log.Info
			}
			lvl("etcd: "+what, "err", err)
		}
	}()
}

func (m *member) markReady() { m.readyOnce.Do(func() { close(m.ready) }) }

// close releases what openDynamic set up, after the loop has stopped.
func (m *member) close() {
	m.closeOnce.Do(func() {
		m.wg.Wait()
		if m.abandon && m.client != nil && m.server == nil {
			m.client.Close()
		}
		if store := m.current(); store != nil {
			store.Close()
		}
		if m.client != nil && m.server == nil {
			m.client.Close()
		}
		if m.server != nil {
			m.server.Close()
		}
	})
}

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
		// Ask to join, and ask again if the request is gone (it hangs on
		// the lease, which may have been renewed).
		asked := slices.ContainsFunc(st.Joins, func(m membership.Member) bool { return m == ms.self })
		if now := time.Now(); !asked && now.After(ms.joinRetry) {
			ms.joinRetry = now.Add(max(4*r.g.cfg.SuspectTimeout, time.Second))
			self := ms.self
			r.async("join request", func(ctx context.Context, s *membership.Store) error {
				if err := s.Register(ctx, self); err != nil {
					return err
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
	// The lease is a second, coarse signal: a member whose registration is
	// gone (or names another incarnation) counts as suspected.
	for _, m := range st.Current.Members {
		if reg, ok := st.Registered[m.ID]; !ok || reg.Incarnation != m.Incarnation {
			in.Suspected[m.ID] = true
		}
	}
	d, err := membership.Decide(ms.self.ID, in)
	if err != nil {
		g.log.Error("view change", "epoch", v.rec.Epoch, "err", err)
		return
	}
	if d.Change && !r.wedged {
		r.wedge("view change under way")
	}
	if !r.wedged && accused(&st.Current, st.Suspects) {
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
	if v.donor != nil && allCaughtUp(&v.rec, st.CaughtUp) {
		v.donor.Close()
		v.donor = nil
	}
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
// holds (DESIGN rule 5).
func (r *runner) wedge(reason string) {
	if r.wedged || r.v == nil {
		return
	}
	g, v := r.g, r.v
	r.wedged, r.wedgedAt = true, g.cfg.Clock()
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
	rep := membership.Report{Epoch: v.rec.Epoch, Member: r.ms.self, Held: v.core.Held(), Delivered: v.core.Index()}
	// Whom it hears now: heartbeats of the last two intervals, when every
	// wedged member beats to all (older ones may predate a partition).
	since := max(r.wedgedAt, g.cfg.Clock()-2*int64(g.cfg.HeartbeatInterval))
	for _, rank := range v.det.Heard(since) {
		rep.Hears = append(rep.Hears, v.rec.Members[rank].ID)
	}
	g.log.Debug("final report", "epoch", v.rec.Epoch, "hears", rep.Hears)
	if r.change != nil {
		r.change.AddEvent("final report", trace.WithAttributes(attribute.Int("convoy.hears", len(rep.Hears))))
	}
	r.async("final report", func(ctx context.Context, s *membership.Store) error { return s.PutReport(ctx, rep) })
}

// suspect records a confirmed suspicion of member id in etcd.
func (r *runner) suspect(id NodeID, reason string) {
	epoch, by := r.v.rec.Epoch, r.ms.self.ID
	r.async("record suspicion", func(ctx context.Context, s *membership.Store) error {
		return s.Suspect(ctx, epoch, by, uint64(id), reason)
	})
}

// install moves from the current view to its successor rec (DESIGN rules
// 7–8). It returns false if this member left the views.
func (r *runner) install(rec membership.View) bool {
	g, old := r.g, r.v
	rank := rec.Rank(r.ms.self.ID)
	in := rank >= 0 && rec.Members[rank].Incarnation == r.ms.self.Incarnation
	if !r.wedged {
		// Possible only when this member's report was not needed: it is
		// not in rec.
		r.wedged = true
		old.core.Wedge()
	}
	// Snapshots of the ending view for joiners must finish before its
	// held deliveries are handed out; then the deliveries the core made
	// before it wedged come first.
	if r.snapshots > 0 {
		r.waitSnapshots()
		if !r.restoring {
			r.release()
		}
	}
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
		g.fail(fmt.Errorf("open view %d: %w", rec.Epoch, err))
		r.v = nil
		return false
	}
	r.v, r.wedged = v, false
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
	if r.wedged {
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

// enter starts this incarnation's first view, rec, in which it has rank.
func (r *runner) enter(rec *membership.View, rank int) bool {
	g := r.g
	v, err := g.openView(g.ctx, *rec, rank, g.cfg.Clock())
	if err != nil {
		g.fail(fmt.Errorf("open view %d: %w", rec.Epoch, err))
		return false
	}
	r.v, r.wedged = v, false
	g.mu.Lock()
	g.mu.epoch, g.mu.out = rec.Epoch, nil
	g.mu.Unlock()
	if v.broken != nil {
		r.wedge("cannot open the view: " + v.broken.Error())
	}
	g.m.views.Add(g.ctx, 1)
	g.m.epoch.Record(g.ctx, int64(rec.Epoch))
	joining := slices.Contains(rec.Joining, r.ms.self.ID)
	donors := donorsOf(rec, g.cfg.MaxDonors)
	g.log.Info("entered view", "epoch", rec.Epoch, "rank", rank, "members", len(rec.Members), "joining", joining, "donors", len(donors))
	if joining && g.cfg.State != nil && len(donors) > 0 {
		r.restoring = true
		r.fetch(v)
		return true
	}
	r.onView(publicView(rec, nil))
	if joining {
		r.caughtUp()
	}
	g.mem.markReady()
	return true
}

// donate serves this member's snapshot parts to the joiners of the view
// it just opened, if it is one of their donors. The parts are taken
// exactly at the end of the previous view (DESIGN rule 11): the view's
// deliveries are held back until the snapshots are done. They are taken
// on another goroutine, own part first, so that the loop goes on
// heartbeating meanwhile and the donor serves the first part while it
// takes the backup one.
func (r *runner) donate(v *view) {
	g, rec := r.g, &v.rec
	donors := donorsOf(rec, g.cfg.MaxDonors)
	i := slices.Index(donors, NodeID(r.ms.self.ID))
	if i < 0 || len(rec.Joining) == 0 || g.cfg.State == nil {
		return
	}
	parts := membership.DonorParts(i, len(donors))
	joiners := make([]rdma.NodeID, 0, len(rec.Joining))
	for _, id := range rec.Joining {
		joiners = append(joiners, rdma.NodeID(id))
	}
	var err error
	v.donor, err = membership.NewDonor(g.ctx, membership.DonorConfig{
		Endpoint: g.ep, Stream: transferStream(rec.Epoch), Joiners: joiners, Pending: parts, Of: len(donors), Logger: g.cfg.Logger,
	})
	if err != nil {
		g.log.Error("serving state to joiners", "epoch", rec.Epoch, "err", err)
		return
	}
	r.snapshots = len(parts)
	done := make(chan struct{})
	r.snapDone = done
	g.mem.wg.Add(1)
	go func() {
		defer g.mem.wg.Done()
		defer close(done)
		for _, p := range parts {
			data, err := membership.SnapshotParts(g.cfg.State, []int{p}, len(donors))
			g.post(event{kind: evSnapshot, v: v, from: p, parts: [][]byte{data[p]}, err: err})
		}
	}()
}

// snapshotted hands a part snapshotted for joiners to the view's donor;
// once all are taken, the deliveries held meanwhile go out.
func (r *runner) snapshotted(part int, data []byte, err error) {
	g, v := r.g, r.v
	if err != nil {
		g.log.Error("snapshot for joiners", "epoch", v.rec.Epoch, "part", part, "err", err)
	} else if err := v.donor.AddPart(part, data); err != nil {
		g.log.Error("serving state to joiners", "epoch", v.rec.Epoch, "part", part, "err", err)
	}
	if r.snapshots--; r.snapshots == 0 {
		r.snapDone = nil
		if !r.restoring {
			r.release()
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
		r.snapDone = nil
	}
	r.snapshots = 0
}

// fetch transfers this joiner's state from the donors of view v.
func (r *runner) fetch(v *view) {
	g := r.g
	cfg := membership.FetchConfig{
		Endpoint: g.ep, Stream: transferStream(v.rec.Epoch), Donors: donorsOf(&v.rec, g.cfg.MaxDonors),
		StallTimeout: g.cfg.TransferStall, Logger: g.cfg.Logger,
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
		readers := make([]io.Reader, len(parts))
		for i, p := range parts {
			readers[i] = bytes.NewReader(p)
		}
		if err = g.cfg.State.Restore(readers); err != nil {
			err = fmt.Errorf("restore: %w", err)
		}
	}
	if err != nil {
		// Without its state this member cannot take part: it drops out
		// (the others exclude it once it falls silent) and tries again.
		r.excluded(nil, fmt.Sprintf("state transfer for view %d failed: %v", r.v.rec.Epoch, err))
		return true
	}
	r.restoring = false
	r.onView(publicView(&r.v.rec, nil))
	r.release()
	r.caughtUp()
	g.mem.markReady()
	return true
}

// caughtUp marks this joiner as holding the group's state.
func (r *runner) caughtUp() {
	epoch, self := r.v.rec.Epoch, r.ms.self
	r.async("mark caught up", func(ctx context.Context, s *membership.Store) error { return s.MarkCaughtUp(ctx, epoch, self) })
}

// onView hands a view to the application.
func (r *runner) onView(v View) {
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
	r.v, r.wedged, r.pending, r.restoring, r.held = nil, false, nil, false, nil
	ex := View{Epoch: epoch, Excluded: true}
	if rec != nil {
		ex = publicView(rec, nil)
		ex.Excluded = true
	}
	r.onView(ex)
	r.sendTimes, r.sentBase = nil, 0
	out := fmt.Errorf("%w: view %d: %s", ErrExcluded, epoch, reason)
	if leaving {
		out = ErrLeft
	}
	g.mu.Lock()
	g.mu.epoch, g.mu.out = 0, out
	g.wakeAllLocked(out)
	g.mu.nextSeq = 1
	g.mu.inflight, g.mu.inflightBytes, g.mu.sending, g.mu.sendingBytes = 0, 0, 0, 0
	g.mu.delivered, g.mu.stable = 0, 0
	g.mu.Unlock()
	g.m.epoch.Record(g.ctx, 0)
	if leaving {
		m.leftOnce.Do(func() { close(m.left) })
		return
	}
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

// Leave takes this member out of the group gracefully: it asks for a view
// without it, waits until that view is installed (its messages sent so
// far are then delivered or reported lost), and closes the group.
func (g *Group) Leave(ctx context.Context) error {
	if g.mem == nil {
		return g.Close()
	}
	m := g.mem
	m.mu.Lock()
	m.mu.leaving = true
	m.mu.Unlock()
	m.mu.Lock()
	self := m.mu.self
	m.mu.Unlock()
	if err := m.current().RequestLeave(ctx, self); err != nil {
		return fmt.Errorf("convoy: leave: %w", err)
	}
	select {
	case <-m.left:
	case <-g.stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Close()
}
