package engine

import (
	"slices"
	"time"
)

// Status is a member's account of itself and its group (convoy.Status
// documents the fields).
type Status struct {
	Self                        NodeID
	Epoch                       uint64
	Rank                        int
	Members                     []Member
	Phase                       string
	Delivered, Durable          uint64
	Frontier, Barrier           uint64
	Lag                         time.Duration
	Held                        []uint64
	Buffered                    int
	InFlight, InFlightBytes     int
	WindowMessages, WindowBytes int
	Lease                       string
	Updated                     time.Time
}

// loopStatus is what the loop publishes of the state it owns, at each
// tick and as it enters and leaves views (runner.publish).
type loopStatus struct {
	rank              int
	phase             string
	frontier, barrier uint64
	held              []uint64
	buffered          int
	at                int64
}

// publish records the loop's state for Status.
func (r *runner) publish() {
	g := r.g
	s := loopStatus{rank: -1, phase: "active", at: g.cfg.Clock()}
	if r.vs != nil {
		s.phase = r.vs.Phase().String()
	}
	if v := r.v; v != nil {
		s.rank = v.self
		s.frontier, s.barrier = uint64(v.core.Frontier()), uint64(v.core.Barrier())
		s.held = v.core.Held()
		s.buffered = v.core.Buffered()
	}
	g.delivered.Store(r.applied)
	g.mu.Lock()
	g.mu.loop = s
	g.mu.Unlock()
}

// Status returns this member's account of itself and its group. The
// loop's part (phase, rank, frontiers, held messages) is as of its last
// tick, at most a beacon interval old while it runs; the rest is current.
func (g *Group) Status() Status {
	now := g.cfg.Clock()
	g.mu.Lock()
	l := g.mu.loop
	st := Status{
		Self:           g.cfg.Self,
		Phase:          l.phase,
		Rank:           -1,
		Durable:        g.mu.durable,
		Frontier:       l.frontier,
		Barrier:        l.barrier,
		Held:           slices.Clone(l.held),
		Buffered:       l.buffered,
		InFlight:       g.mu.inflight,
		InFlightBytes:  g.mu.inflightBytes,
		WindowMessages: g.cfg.WindowMessages,
		WindowBytes:    g.cfg.WindowBytes,
	}
	if l.at != 0 {
		st.Updated = time.Unix(0, l.at)
	}
	if st.Epoch = g.mu.epoch; st.Epoch != 0 {
		st.Rank = l.rank
		if g.mu.view.Epoch == st.Epoch && !g.mu.view.Excluded {
			st.Members = slices.Clone(g.mu.view.Members)
		}
	}
	switch {
	case g.mu.closed:
		st.Phase = "closed"
	case g.mu.err != nil:
		st.Phase = "failed"
	case st.Phase == "":
		st.Phase = "starting"
	}
	g.mu.Unlock()
	st.Delivered = g.delivered.Load()
	if st.Barrier != 0 && now > int64(st.Barrier) {
		st.Lag = time.Duration(now - int64(st.Barrier))
	}
	if g.mem != nil {
		st.Lease = g.mem.leaseState()
	}
	return st
}

// leaseState says whether this member holds its etcd registration:
// "held", "lost" (it registers again), or "withdrawn" (for good).
func (m *member) leaseState() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.withdrawn {
		return "withdrawn"
	}
	if m.mu.store == nil {
		return "lost"
	}
	select {
	case <-m.mu.store.Done():
		return "lost"
	default:
		return "held"
	}
}
