package barrier

import "fmt"

// Tree aggregates receive frontiers through a tree of representatives
// (1Pipe §6.2.3, host representatives): ranks form a complete tree of the
// given fan-out rooted at rank 0. Each member reports to its parent the
// minimum frontier of its subtree, once every child has reported; the root's
// subtree minimum is the commit barrier, which travels back down. A member
// thus exchanges control messages only with its parent and children.
//
// A Tree is one member's view: it is fed its own frontier, its children's
// reports and its parent's barrier, and says what to send.
type Tree struct {
	rank, n, fanOut int
	own             Timestamp
	children        []Timestamp // subtree minimum reported by each child
	reported        []bool
	sentUp          Timestamp // last subtree minimum sent to the parent
	upValid         bool
	barrier         Timestamp // last commit barrier learned (or computed)
	sentDown        Timestamp // last barrier sent to the children
}

// NewTree returns member rank's view of the tree over n members.
func NewTree(rank, n, fanOut int) (*Tree, error) {
	if fanOut < 2 {
		return nil, fmt.Errorf("barrier: fan-out %d, want at least 2", fanOut)
	}
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrUnknownMember, rank, n)
	}
	t := &Tree{rank: rank, n: n, fanOut: fanOut}
	nc := len(t.Children())
	t.children = make([]Timestamp, nc)
	t.reported = make([]bool, nc)
	return t, nil
}

// Parent returns the rank of this member's parent, or -1 at the root.
func (t *Tree) Parent() int {
	if t.rank == 0 {
		return -1
	}
	return (t.rank - 1) / t.fanOut
}

// Children returns the ranks of this member's children.
func (t *Tree) Children() []int {
	var cs []int
	for c := t.rank*t.fanOut + 1; c <= t.rank*t.fanOut+t.fanOut && c < t.n; c++ {
		cs = append(cs, c)
	}
	return cs
}

// SetOwn records this member's own receive frontier.
func (t *Tree) SetOwn(f Timestamp) { t.own = max(t.own, f) }

// Report records child rank's subtree minimum.
func (t *Tree) Report(child int, f Timestamp) error {
	i := child - (t.rank*t.fanOut + 1)
	if i < 0 || i >= len(t.children) {
		return fmt.Errorf("%w: rank %d is not a child of %d", ErrUnknownMember, child, t.rank)
	}
	if f < t.children[i] {
		return fmt.Errorf("%w: child %d subtree frontier %d after %d", ErrBackwards, child, f, t.children[i])
	}
	t.children[i], t.reported[i] = f, true
	return nil
}

// SetBarrier records the commit barrier sent down by the parent.
func (t *Tree) SetBarrier(from int, b Timestamp) error {
	if from != t.Parent() {
		return fmt.Errorf("%w: barrier from %d, parent of %d is %d", ErrUnknownMember, from, t.rank, t.Parent())
	}
	if b < t.barrier {
		return fmt.Errorf("%w: barrier %d after %d", ErrBackwards, b, t.barrier)
	}
	t.barrier = b
	return nil
}

// subtree returns the minimum frontier of this member's subtree, and
// whether every child has reported.
func (t *Tree) subtree() (Timestamp, bool) {
	m := t.own
	for i, f := range t.children {
		if !t.reported[i] {
			return 0, false
		}
		m = min(m, f)
	}
	return m, true
}

// Barrier returns the commit barrier as this member knows it.
func (t *Tree) Barrier() Timestamp {
	if t.rank == 0 {
		if m, ok := t.subtree(); ok {
			t.barrier = max(t.barrier, m)
		}
	}
	return t.barrier
}

// Sent returns the lowest value this member last sent up or down: the
// point below which its neighbours know what it knows.
func (t *Tree) Sent() Timestamp {
	v := Infinity
	if t.rank != 0 {
		v = t.sentUp
	}
	if len(t.children) > 0 {
		v = min(v, t.sentDown)
	}
	return v
}

// Pending reports whether Up or Down would return something now.
func (t *Tree) Pending() bool {
	if t.rank != 0 {
		if m, ok := t.subtree(); ok && (!t.upValid || m > t.sentUp) {
			return true
		}
	}
	return len(t.children) > 0 && t.Barrier() > t.sentDown
}

// Up returns the subtree minimum to send to the parent, if it changed
// since the last call that returned ok.
func (t *Tree) Up() (Timestamp, bool) {
	if t.rank == 0 {
		return 0, false
	}
	m, ok := t.subtree()
	if !ok || (t.upValid && m <= t.sentUp) {
		return 0, false
	}
	t.sentUp, t.upValid = m, true
	return m, true
}

// Down returns the barrier to send to the children, if it advanced since
// the last call that returned ok.
func (t *Tree) Down() (Timestamp, bool) {
	b := t.Barrier()
	if len(t.children) == 0 || b <= t.sentDown {
		return 0, false
	}
	t.sentDown = b
	return b, true
}
