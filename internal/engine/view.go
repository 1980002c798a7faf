package engine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/ordering"
)

// View is convoy.View, one view of a group: its epoch and members in
// rank order (see its documentation).
type View struct {
	Epoch        uint64
	Start        uint64
	Members      []Member
	Joined, Left []NodeID
	Excluded     bool
	Topics       []Topic
}

// view is one view's machinery on this member: its traffic (the
// multicast groups and control streams behind net), its ordering core
// and, in a view-managed group, its failure detector. The loop goroutine
// owns it.
type view struct {
	g    *Group
	rec  membership.View
	self int
	ids  []NodeID
	// opened is when this member opened the view, on its clock: its
	// messages are stamped later.
	opened int64
	// net carries the view's records and control signals.
	net  viewNet
	core *ordering.Core
	// topics are the view's topics by number (from 1) less one, topicIDs
	// their numbers by name; sets are their distinct non-empty subscriber
	// sets (viewTopic.set); pubs[t-1] are this member's messages on topic
	// t not yet held by every subscriber.
	topics   []viewTopic
	topicIDs map[string]int
	sets     [][]int
	pubs     []ownPubs
	// det watches the neighbours; nil in a group with fixed membership.
	// nbrs are their ranks, and nbrLag[i] how far neighbour nbrs[i]
	// trailed this member's receive frontier at its last heartbeat, in
	// nanoseconds.
	det    *membership.Detector
	nbrs   []int
	nbrLag []int64
	// ctrlRetry[r], if set, is when to open the control stream to rank r
	// again: its connection broke (see reopenControl).
	ctrlRetry []int64
	// transfers bounds this member's state and suffix transfers as a
	// joiner of the view: they reopen broken connections to their donors
	// until the view closes (endTransfers).
	transfers    context.Context
	endTransfers context.CancelFunc
	// stopFetches end the transfers a host runs (Group.startFetch) when
	// the view closes, as endTransfers ends those on goroutines.
	stopFetches []func()
	// donor serves this member's snapshot parts to the view's joiners,
	// since donorSince (on the clock); it reads some of them from
	// spills, released once it is done.
	donor      *membership.Donor
	donorSince int64
	spills     []*spill
	// sink receives this joiner's state, while it is transferred.
	sink stateSink
	// suffixDonors serve joiners the messages their logs miss, since
	// suffixDonorsSince.
	suffixDonors      []*membership.Donor
	suffixDonorsSince int64
	// dur tracks the members' persisted indexes in durable delivery;
	// lagging holds the ranks suspected of lagging on disk.
	dur       *barrier.Durable
	lagging   map[int]bool
	announced []bool // the ranks whose persisted index arrived in this view
	// tdur are the durable barriers of the topics this member subscribes
	// to, by topic number less one (nil for the others).
	tdur []*topicDur
	// broken is why the view's multicast groups could not all be opened.
	broken error
	// done is set once the view is closed: callbacks from its groups are
	// then ignored.
	done atomic.Bool
}

// openView creates this member's machinery for view rec, in which it has
// rank self, at time now.
func (g *Group) openView(ctx context.Context, rec membership.View, self int, now int64) (*view, error) {
	v := &view{g: g, rec: rec, self: self, opened: now}
	for _, m := range rec.Members {
		v.ids = append(v.ids, NodeID(m.ID))
	}
	topics, err := v.initTopics()
	if err != nil {
		return nil, err
	}
	for _, t := range v.topics {
		v.pubs = append(v.pubs, ownPubs{first: t.sent[self] + 1})
	}
	core, err := ordering.NewCore(ordering.Config{
		Self: self, Members: len(rec.Members), Mode: g.cfg.Mode, Epoch: rec.Epoch, Start: rec.Start,
		BeaconInterval: g.cfg.BeaconInterval, BeaconGap: g.cfg.BeaconGap, FanOut: g.cfg.FanOut, MaxPayload: g.cfg.MaxMessageBytes,
		Topics: topics, Plant: g.cfg.test.plant,
	}, now)
	if err != nil {
		return nil, err
	}
	v.core = core
	v.transfers, v.endTransfers = context.WithCancel(g.ctx) // close ends them
	openNet := g.openRDMANet
	if g.cfg.test.openNet != nil {
		openNet = g.cfg.test.openNet
	}
	if v.net, err = openNet(ctx, v); err != nil {
		if !g.dynamic() {
			v.close()
			return nil, err
		}
		// A member of the view is already gone: the view is born broken.
		// This member takes part only to end it (it wedges at once and
		// reports), so that the next view can leave the dead one out.
		v.broken = err
	}
	if g.dynamic() {
		if err := v.openDetector(now); err != nil {
			v.close()
			return nil, err
		}
	}
	if g.dynamic() || g.disk != nil {
		v.openControl(ctx)
	}
	if g.disk != nil {
		v.dur = durableBarrier(&rec)
		v.announced = make([]bool, len(v.ids))
		v.initTopicDurable()
	}
	return v, nil
}

// close releases the view's groups and queue pairs. Callbacks still
// running are ignored from here on.
func (v *view) close() {
	if v == nil || v.done.Swap(true) {
		return
	}
	if v.endTransfers != nil {
		v.endTransfers()
	}
	for _, stop := range v.stopFetches {
		stop()
	}
	if v.net != nil {
		v.net.close()
	}
	if v.donor != nil {
		v.donor.Close()
	}
	v.closeSpills()
	if v.sink != nil {
		v.sink.discard()
	}
	for _, d := range v.suffixDonors {
		d.Close()
	}
}

// closeSpills releases the parts the view's donor served from spills.
// REQUIRES: the donor is closed.
func (v *view) closeSpills() {
	for _, sp := range v.spills {
		sp.Close()
	}
	v.spills = nil
}

// publicView converts a view record for the application; prev is the
// view it follows (nil for the first this member sees).
func publicView(rec *membership.View, prev *membership.View) View {
	out := View{Epoch: rec.Epoch, Start: rec.Start}
	was := make(map[uint64]bool)
	if prev != nil {
		for _, m := range prev.Members {
			was[m.ID] = true
		}
	}
	for _, t := range rec.Topics {
		mode, _ := ordering.ParseMode(t.Mode)
		pt := Topic{Name: t.Name, Mode: mode}
		for _, id := range t.Subscribers {
			pt.Subscribers = append(pt.Subscribers, NodeID(id))
		}
		out.Topics = append(out.Topics, pt)
	}
	now := make(map[uint64]bool)
	for _, m := range rec.Members {
		now[m.ID] = true
		out.Members = append(out.Members, Member{ID: NodeID(m.ID), Addr: m.Addr})
		if prev != nil && !was[m.ID] {
			out.Joined = append(out.Joined, NodeID(m.ID))
		}
	}
	if prev != nil {
		for _, m := range prev.Members {
			if !now[m.ID] {
				out.Left = append(out.Left, NodeID(m.ID))
			}
		}
	}
	return out
}

func (v View) String() string { return fmt.Sprintf("view %d (%d members)", v.Epoch, len(v.Members)) }
