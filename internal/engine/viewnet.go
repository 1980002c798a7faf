package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
	// publish sends a publish record frame on topic (from 1) to the
	// topic's subscribers, after every frame published before it on the
	// topics of the same subscriber set; as multicast, with the
	// subscribers for the members (sent at once if there are none).
	publish(ctx context.Context, topic int, frame []byte) error
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
	// j's data group; topicG[s] is this member's group for the topics of
	// subscriber set s (viewTopic.set), nil if the set holds only this
	// member, and topicIn the other members' that it subscribes to; upG
	// and downG are this member's aggregation-tree groups and treeIn the
	// groups of its tree neighbours.
	data    []*multicast.Group
	topicG  []*multicast.Group
	topicIn []*multicast.Group
	upG     *multicast.Group
	downG   *multicast.Group
	treeIn  []*multicast.Group
	// ctrl holds the control streams, by rank.
	ctrl []rdma.QueuePair
}

// Group ids: epoch, kind and the root's rank; a topic group's (kind
// groupTopic) add its subscriber set, in a range of their own (bit 59).
const (
	groupData  = 0
	groupUp    = 1
	groupDown  = 2
	groupTopic = 3
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

// topicGroupID is the id of rank's group for the topics of subscriber
// set set: epochs below 1<<35, sets below 1<<12 and ranks below 1<<12.
func (n *rdmaNet) topicGroupID(set, rank int) uint64 {
	return 1<<59 | (n.v.rec.Epoch&(1<<35-1))<<24 | uint64(set)<<12 | uint64(rank)
}

// TopicGroup reports whether a multicast group id is a view's group for
// the topics of one subscriber set, and which set (numbered as the view
// numbers its distinct subscriber sets, in the order of the topics that
// have them) and root rank.
func TopicGroup(id uint64) (set, root int, ok bool) {
	if id&(1<<59) == 0 {
		return 0, 0, false
	}
	return int(id>>12) & (1<<12 - 1), int(id) & (1<<12 - 1), true
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
		return n.open(ctx, kind, -1, root, ranks)
	}
	for j := range size {
		mg, err := open(groupData, j, all)
		if err != nil {
			return err
		}
		n.data = append(n.data, mg)
	}
	if err := n.openTopicGroups(ctx); err != nil {
		return err
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

// openTopicGroups opens the view's topic groups this member takes part
// in: for every subscriber set (the topics of one set share them), its
// own to the set, and every other member's if it is in the set. A
// topic's data thus crosses only the links of its publisher and
// subscribers.
func (n *rdmaNet) openTopicGroups(ctx context.Context) error {
	v := n.v
	n.topicG = make([]*multicast.Group, len(v.sets))
	for s, set := range v.sets {
		members := func(root int) []int {
			if slices.Contains(set, root) {
				return set
			}
			return append([]int{root}, set...)
		}
		if !slices.Equal(set, []int{v.self}) {
			mg, err := n.open(ctx, groupTopic, s, v.self, members(v.self))
			if err != nil {
				return err
			}
			n.topicG[s] = mg
		}
		if !slices.Contains(set, v.self) {
			continue
		}
		for j := range v.ids {
			if j == v.self {
				continue
			}
			mg, err := n.open(ctx, groupTopic, s, j, members(j))
			if err != nil {
				return err
			}
			n.topicIn = append(n.topicIn, mg)
		}
	}
	return nil
}

// open opens this member's part of the view's group of the given kind,
// with root and the members of ranks; set is a topic group's subscriber
// set (-1 for the other kinds).
func (n *rdmaNet) open(ctx context.Context, kind, set, root int, ranks []int) (*multicast.Group, error) {
	v := n.v
	g := v.g
	cb := multicast.Callbacks{Failed: func(err error) { g.failed(v, err) }}
	switch {
	case root != v.self:
		cb.Complete = func(msg []byte) { g.received(v, root, set, msg) }
	case kind == groupData || kind == groupTopic:
		cb.Complete = func(frame []byte) { g.sent(v, frame) }
	}
	id := n.groupID(kind, root)
	if kind == groupTopic {
		id = n.topicGroupID(set, root)
	}
	return multicast.NewGroup(ctx, g.ep, multicast.GroupConfig{
		ID: id, Members: n.idsOf(ranks...), Root: v.ids[root],
		Algorithm: g.cfg.Algorithm, BlockBytes: g.cfg.BlockBytes, BatchBytes: g.cfg.test.batchBytes,
		MaxMessageBytes:   g.cfg.MaxMessageBytes + ordering.RecordHeaderBytes + 4, // a publish record's topic
		MaxQueuedMessages: g.cfg.WindowMessages + 1<<14,                           // beacons ride along
		MaxQueuedBytes:    g.cfg.WindowBytes + 1<<24,
		Logger:            g.cfg.Logger, Metrics: g.m.multicast,
	}, cb)
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

func (n *rdmaNet) publish(ctx context.Context, topic int, frame []byte) error {
	v := n.v
	if topic <= 0 || topic > len(v.topics) {
		return fmt.Errorf("convoy: view %d has no topic %d", v.rec.Epoch, topic)
	}
	set := v.topics[topic-1].set
	if set < 0 || n.topicG[set] == nil {
		// Nobody else subscribes: it has reached every subscriber.
		v.g.sent(v, frame)
		return nil
	}
	return n.topicG[set].Send(ctx, frame)
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
	for _, mg := range n.topicG {
		if mg != nil {
			all = append(all, mg)
		}
	}
	all = append(all, n.topicIn...)
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
