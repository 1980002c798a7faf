package convoy

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

// View is one view of a group: its epoch and members in rank order.
// Every member sees the same sequence of views, each in the same place
// among the deliveries (see Config.OnView).
type View struct {
	Epoch uint64
	// Start is the index of the last message delivered before the view;
	// its first message gets Start+1.
	Start   uint64
	Members []Member
	// Joined and Left list the members that came and went with this view.
	Joined, Left []NodeID
	// Excluded says that the group went on to view Epoch without this
	// member (it was suspected, or left): it delivers nothing more in
	// this incarnation. Unless it left, it rejoins as a new incarnation,
	// and before the next view it takes part in, its state is replaced by
	// transfer (StateMachine.Restore) or, in durable delivery when the
	// leader's log holds the entry its own log ends with, completed with
	// the messages it missed.
	Excluded bool
}

// view is one view's machinery on this member: its multicast groups, its
// ordering core and, in a view-managed group, its failure detector. The
// loop goroutine owns it.
type view struct {
	g    *Group
	rec  membership.View
	self int
	ids  []NodeID
	// The multicast groups of this member in the view: data[j] is member
	// j's data group; up and down are this member's aggregation-tree
	// groups and treeIn the groups of its tree neighbours.
	data   []*multicast.Group
	up     *multicast.Group
	down   *multicast.Group
	treeIn []*multicast.Group
	core   *ordering.Core
	// det and ctrl (queue pairs by rank) watch the neighbours; nil in a
	// group with fixed membership.
	det  *membership.Detector
	ctrl []rdma.QueuePair
	// ctrlRetry[r], if set, is when to open the control stream to rank r
	// again: its connection broke (see reopenControl).
	ctrlRetry []int64
	// donor serves this member's snapshot parts to the view's joiners.
	donor *membership.Donor
	// suffixDonors serve joiners the messages their logs miss.
	suffixDonors []*membership.Donor
	// dur tracks the members' persisted indexes in durable delivery;
	// lagging holds the ranks suspected of lagging on disk.
	dur       *barrier.Durable
	lagging   map[int]bool
	announced []bool // the ranks whose persisted index arrived in this view
	// broken is why the view's multicast groups could not all be opened.
	broken error
	// done is set once the view is closed: callbacks from its groups are
	// then ignored.
	done atomic.Bool
}

// Group ids: epoch, kind and the root's rank.
const (
	groupData = 0
	groupUp   = 1
	groupDown = 2
)

func (v *view) groupID(kind, rank int) uint64 {
	return v.rec.Epoch<<16 | uint64(kind)<<14 | uint64(rank)
}

func (v *view) idsOf(ranks ...int) []rdma.NodeID {
	out := make([]rdma.NodeID, len(ranks))
	for i, r := range ranks {
		out[i] = v.ids[r]
	}
	return out
}

// openView creates this member's machinery for view rec, in which it has
// rank self, at time now.
func (g *Group) openView(ctx context.Context, rec membership.View, self int, now int64) (*view, error) {
	v := &view{g: g, rec: rec, self: self}
	for _, m := range rec.Members {
		v.ids = append(v.ids, NodeID(m.ID))
	}
	core, err := ordering.NewCore(ordering.Config{
		Self: self, Members: len(rec.Members), Mode: g.cfg.Mode, Epoch: rec.Epoch, Start: rec.Start,
		BeaconInterval: g.cfg.BeaconInterval, BeaconGap: g.cfg.BeaconGap, FanOut: g.cfg.FanOut, MaxPayload: g.cfg.MaxMessageBytes,
		Plant: g.cfg.plant,
	}, now)
	if err != nil {
		return nil, err
	}
	v.core = core
	if err := v.openMulticast(ctx); err != nil {
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
	}
	return v, nil
}

// openMulticast creates the data group of every member and, with
// aggregation, the tree groups this member takes part in.
func (v *view) openMulticast(ctx context.Context) error {
	g := v.g
	n := len(v.ids)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	open := func(kind, root int, ranks []int) (*multicast.Group, error) {
		cb := multicast.Callbacks{Failed: func(err error) { g.failed(v, err) }}
		switch {
		case root != v.self:
			cb.Complete = func(msg []byte) { g.received(v, root, msg) }
		case kind == groupData:
			cb.Complete = func(frame []byte) { g.sent(v, frame) }
		}
		return multicast.NewGroup(ctx, g.ep, multicast.GroupConfig{
			ID: v.groupID(kind, root), Members: v.idsOf(ranks...), Root: v.ids[root],
			Algorithm: g.cfg.Algorithm, BlockBytes: g.cfg.BlockBytes,
			MaxMessageBytes:   g.cfg.MaxMessageBytes + ordering.RecordHeaderBytes,
			MaxQueuedMessages: g.cfg.WindowMessages + 1<<14, // beacons ride along
			MaxQueuedBytes:    g.cfg.WindowBytes + 1<<24,
			Logger:            g.cfg.Logger, MeterProvider: g.cfg.MeterProvider,
		}, cb)
	}
	for j := 0; j < n; j++ {
		mg, err := open(groupData, j, all)
		if err != nil {
			return err
		}
		v.data = append(v.data, mg)
	}
	if g.cfg.FanOut < 2 || g.cfg.Mode == Unordered {
		return nil
	}
	tree, err := barrier.NewTree(v.self, n, g.cfg.FanOut)
	if err != nil {
		return err
	}
	children := tree.Children()
	if p := tree.Parent(); p >= 0 {
		if v.up, err = open(groupUp, v.self, []int{v.self, p}); err != nil {
			return err
		}
		in, err := open(groupDown, p, append([]int{p}, siblings(p, n, g.cfg.FanOut)...))
		if err != nil {
			return err
		}
		v.treeIn = append(v.treeIn, in)
	}
	if len(children) > 0 {
		if v.down, err = open(groupDown, v.self, append([]int{v.self}, children...)); err != nil {
			return err
		}
		for _, c := range children {
			in, err := open(groupUp, c, []int{c, v.self})
			if err != nil {
				return err
			}
			v.treeIn = append(v.treeIn, in)
		}
	}
	return nil
}

// siblings returns the children of rank p in the tree.
func siblings(p, n, fanOut int) []int {
	t, err := barrier.NewTree(p, n, fanOut)
	if err != nil {
		return nil
	}
	return t.Children()
}

// close releases the view's groups and queue pairs. Callbacks still
// running are ignored from here on.
func (v *view) close() {
	if v == nil || v.done.Swap(true) {
		return
	}
	var all []*multicast.Group
	all = append(all, v.data...)
	for _, mg := range []*multicast.Group{v.up, v.down} {
		if mg != nil {
			all = append(all, mg)
		}
	}
	for _, mg := range append(all, v.treeIn...) {
		mg.Close()
	}
	if v.donor != nil {
		v.donor.Close()
	}
	for _, d := range v.suffixDonors {
		d.Close()
	}
	for _, qp := range v.ctrl {
		if qp != nil {
			qp.Close()
		}
	}
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
