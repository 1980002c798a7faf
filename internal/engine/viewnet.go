package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

// viewNet carries one view's traffic for this member: the records it
// multicasts to the view, its records in the aggregation tree, and the
// signals on its control stream to each other member (the failure
// detector's, and durable delivery's persisted indexes). What arrives
// reaches the loop through the Group's received, sent and failed, and
// through the control streams' events (evSignal, evPersisted,
// evLinkDown).
//
// rdmaNet carries it over RDMC groups and queue pairs of the member's
// endpoint. The loop goroutine calls every method; none blocks for long
// (a multicast may wait for room in the group's queue).
type viewNet interface {
	// multicast sends a record frame to every member of the view, after
	// every frame multicast before it. The view's members receive it
	// through received; this member gets sent with the same frame once
	// every member has it.
	multicast(ctx context.Context, frame []byte) error
	// up sends an aggregation record to this member's parent in the
	// tree, down one to its children; children is how many it has.
	up(ctx context.Context, frame []byte) error
	down(ctx context.Context, frame []byte) error
	children() int
	// dial opens the control stream to rank r, closing the one open
	// before, if any; it reports whether the stream is open.
	dial(ctx context.Context, r int) bool
	// signal sends imm on the control stream to rank r; it fails with
	// errNoControl if none is open.
	signal(r int, imm uint64) error
	// close releases every group and stream. Nothing of the view reaches
	// the loop afterwards.
	close()
}

// errNoControl: no control stream to that member is open.
var errNoControl = errors.New("convoy: no control stream open")

// rdmaNet is a view's traffic over RDMC and queue pairs.
type rdmaNet struct {
	v *view
	// The multicast groups of this member in the view: data[j] is member
	// j's data group; upG and downG are this member's aggregation-tree
	// groups and treeIn the groups of its tree neighbours.
	data   []*multicast.Group
	upG    *multicast.Group
	downG  *multicast.Group
	treeIn []*multicast.Group
	// ctrl holds the control streams, by rank.
	ctrl []rdma.QueuePair
}

// Group ids: epoch, kind and the root's rank.
const (
	groupData = 0
	groupUp   = 1
	groupDown = 2
)

// openRDMANet opens view v's traffic on g's endpoint: the data group of
// every member and, with aggregation, the tree groups this member takes
// part in. It returns the net even with an error (a member of the view
// is gone, say): the control streams may still be opened, and close
// releases what was.
func (g *Group) openRDMANet(ctx context.Context, v *view) (viewNet, error) {
	n := &rdmaNet{v: v, ctrl: make([]rdma.QueuePair, len(v.ids))}
	return n, n.openGroups(ctx)
}

func (n *rdmaNet) groupID(kind, rank int) uint64 {
	return n.v.rec.Epoch<<16 | uint64(kind)<<14 | uint64(rank)
}

func (n *rdmaNet) idsOf(ranks ...int) []rdma.NodeID {
	out := make([]rdma.NodeID, len(ranks))
	for i, r := range ranks {
		out[i] = n.v.ids[r]
	}
	return out
}

func (n *rdmaNet) openGroups(ctx context.Context) error {
	v := n.v
	g := v.g
	size := len(v.ids)
	all := make([]int, size)
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
			ID: n.groupID(kind, root), Members: n.idsOf(ranks...), Root: v.ids[root],
			Algorithm: g.cfg.Algorithm, BlockBytes: g.cfg.BlockBytes, BatchBytes: g.cfg.test.batchBytes,
			MaxMessageBytes:   g.cfg.MaxMessageBytes + ordering.RecordHeaderBytes,
			MaxQueuedMessages: g.cfg.WindowMessages + 1<<14, // beacons ride along
			MaxQueuedBytes:    g.cfg.WindowBytes + 1<<24,
			Logger:            g.cfg.Logger, MeterProvider: g.cfg.MeterProvider,
		}, cb)
	}
	for j := range size {
		mg, err := open(groupData, j, all)
		if err != nil {
			return err
		}
		n.data = append(n.data, mg)
	}
	if g.cfg.FanOut < 2 || g.cfg.Mode == Unordered {
		return nil
	}
	tree, err := barrier.NewTree(v.self, size, g.cfg.FanOut)
	if err != nil {
		return err
	}
	children := tree.Children()
	if p := tree.Parent(); p >= 0 {
		if n.upG, err = open(groupUp, v.self, []int{v.self, p}); err != nil {
			return err
		}
		in, err := open(groupDown, p, append([]int{p}, siblings(p, size, g.cfg.FanOut)...))
		if err != nil {
			return err
		}
		n.treeIn = append(n.treeIn, in)
	}
	if len(children) > 0 {
		if n.downG, err = open(groupDown, v.self, append([]int{v.self}, children...)); err != nil {
			return err
		}
		for _, c := range children {
			in, err := open(groupUp, c, []int{c, v.self})
			if err != nil {
				return err
			}
			n.treeIn = append(n.treeIn, in)
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

func (n *rdmaNet) multicast(ctx context.Context, frame []byte) error {
	if n.v.self >= len(n.data) {
		return errors.New("convoy: the view's data group is not open")
	}
	return n.data[n.v.self].Send(ctx, frame)
}

func (n *rdmaNet) up(ctx context.Context, frame []byte) error {
	if n.upG == nil {
		return fmt.Errorf("convoy: rank %d has no parent in the aggregation tree", n.v.self)
	}
	return n.upG.Send(ctx, frame)
}

func (n *rdmaNet) down(ctx context.Context, frame []byte) error {
	if n.downG == nil {
		return fmt.Errorf("convoy: rank %d has no children in the aggregation tree", n.v.self)
	}
	return n.downG.Send(ctx, frame)
}

func (n *rdmaNet) children() int {
	if n.downG == nil {
		return 0
	}
	return n.downG.Size() - 1
}

func (n *rdmaNet) dial(ctx context.Context, r int) bool {
	v := n.v
	if qp := n.ctrl[r]; qp != nil {
		qp.Close()
		n.ctrl[r] = nil
	}
	qp, err := v.g.ep.Open(ctx, v.ids[r], controlStream(v.rec.Epoch), &ctrlHandler{v: v, rank: r})
	if err != nil {
		// The peer stays silent, which the detector notices.
		v.g.log.Info("control stream not opened", "peer", v.ids[r], "epoch", v.rec.Epoch, "err", err)
		return false
	}
	n.ctrl[r] = qp
	return true
}

func (n *rdmaNet) signal(r int, imm uint64) error {
	qp := n.ctrl[r]
	if qp == nil {
		return errNoControl
	}
	return qp.Signal(imm)
}

func (n *rdmaNet) close() {
	var all []*multicast.Group
	all = append(all, n.data...)
	for _, mg := range []*multicast.Group{n.upG, n.downG} {
		if mg != nil {
			all = append(all, mg)
		}
	}
	for _, mg := range append(all, n.treeIn...) {
		mg.Close()
	}
	for _, qp := range n.ctrl {
		if qp != nil {
			qp.Close()
		}
	}
}
