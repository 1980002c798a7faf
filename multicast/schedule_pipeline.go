package multicast

import (
	"math/bits"
	"slices"
)

// pipelineSchedule is the BinomialPipeline algorithm of Ganesan and
// Seshadri as adapted by RDMC (RDMC appendix A and §3).
//
// # Hypercube
//
// The members sit on the 2^d vertices of a hypercube, d = ⌊log2 n⌋. Rank
// v < 2^d is the primary of vertex v; the e = n − 2^d ranks above are twins:
// rank v + 2^d − 1 shares vertex v for 1 ≤ v ≤ e. The root, vertex 0, is
// never paired. Step t uses dimension j = t mod d: vertex v trades with
// vertex v ^ 2^j.
//
// # Vertex schedule
//
// Seen from outside, a vertex behaves as one node that sends and receives at
// most one block per step. Vertex v ≠ 0 receives at step t ≤ k+d−2 from
// v ^ 2^j:
//
//   - if bit j of v is clear, block t − d (if t ≥ d): a block crossing
//     dimension j into the half of the cube that lacks it;
//   - if bit j of v is set, block min(t + i − d, k − 1) (if t + i ≥ d),
//     where i ∈ [1, d] is the distance from bit j up to the next set bit of
//     v, cyclically (i = d if j is the only one): a block still spreading
//     through the half-cube it was injected into.
//
// This is the schedule in which the root injects block b (the last block
// once b ≥ k) into vertex 2^(b mod d) at step b; the block then spreads over
// dimensions b+1, …, b+d−1 through the half-cube with bit b mod d set, and
// crosses dimension b mod d into the other half at step b + d. Its
// invariants, which the code below relies on:
//
//   - every vertex receives every block exactly once, block k−1 at its last
//     step with a set bit (the only one whose next set-bit step is past the
//     end), so the vertex schedule takes k + d − 1 steps;
//   - vertex v first receives at step h = its highest set bit, from
//     v − 2^h, and then at every step from d on;
//   - at step t vertex v sends (if its neighbour receives) the block it
//     received at its last set-bit step s < t, that is the last step s < t
//     with bit s mod d of v set. Blocks received at clear-bit steps are
//     never relayed by the vertex.
//
// # Paired vertices
//
// In a paired vertex one node is the vertex's receiver at each step, the
// other its sender; the receiver also passes its partner one block the
// partner lacks. The last invariant above fixes the roles: the node that
// received at set-bit step s must send during steps s+1 … s' (the next
// set-bit step), so the roles swap after every set-bit step and only then.
// The phase is chosen so that the primary receives the vertex's first block
// (at step h); that makes the first block of either node come from the same
// rank for every k:
//
//   - the primary of v first receives at step h from vertex v − 2^h, whose
//     primary (rank v − 2^h) received that vertex's first block at its
//     highest set-bit step, its last set-bit step before h, and so is its
//     sender at step h;
//   - the twin of v is the vertex's receiver from step h+1 up to its next
//     set-bit step, which is at least d, and the vertex receives nothing
//     between h and d: so for k ≥ 2 the twin first receives at step d, from
//     vertex v ^ 1, whose sender then is again its primary, rank v ^ 1.
//
// Intra-vertex forwarding: a block received at a clear-bit step t is passed
// to the partner at step t+1 (the receiver has not changed); a block
// received at set-bit step s is passed on at step s'+1, after the next
// set-bit step s', when its holder is again the receiver. So the partners
// differ by at most two blocks, one each way, and one extra step at the end
// (k + d steps in all) lets them exchange those.
//
// A one-block message has no step d in its vertex schedule, so the twin
// would first receive from its partner in the extra step. Instead, as in
// RDMC, the extra step then runs over dimension 0: the node of vertex
// v ^ 1 that holds block 0, rank v ^ 1, delivers it to the twin of v. Hence
// twins always first receive from rank v ^ 1 ("we adjusted the schedule to
// ensure that the first block each node receives always comes from the same
// relay", appendix A).
//
// Everything is computed locally from this rank's vertex and its d
// neighbours, in O(1) per step: plan costs O(k + d).
type pipelineSchedule struct {
	n, rank int
	d       int // hypercube dimension: 2^d ≤ n < 2^(d+1)
	v       int // this rank's vertex
}

func newPipelineSchedule(n, rank int) pipelineSchedule {
	d := bits.Len(uint(n)) - 1
	v := rank
	if rank >= 1<<d {
		v = rank - 1<<d + 1
	}
	return pipelineSchedule{n: n, rank: rank, d: d, v: v}
}

func (s pipelineSchedule) steps(k int) int {
	if k < 1 || s.n < 2 {
		return 0
	}
	if s.n == 1<<s.d {
		return k + s.d - 1
	}
	return k + s.d
}

func (s pipelineSchedule) plan(k int, sends, recvs []op) ([]op, []op) {
	if k < 1 || s.n < 2 {
		return sends, recvs
	}
	c := pipelineCube{n: s.n, d: s.d, k: k, last: k + s.d - 2}
	x, v := s.rank, s.v
	paired := c.paired(v)
	for t := 0; t <= c.last; t++ {
		u := v ^ 1<<(t%c.d)
		if b := c.recvBlock(v, t); b >= 0 && x == c.receiver(v, t) {
			recvs = append(recvs, op{step: t, peer: c.sender(u, t), block: b})
		}
		if b := c.recvBlock(u, t); b >= 0 && x == c.sender(v, t) {
			sends = append(sends, op{step: t, peer: c.receiver(u, t), block: b})
		}
		if paired && t > 0 {
			if b := c.forward(v, t); b >= 0 {
				sends, recvs = c.intra(x, v, t, b, sends, recvs)
			}
		}
	}
	if s.n == 1<<s.d {
		return sends, recvs
	}
	// The extra step.
	t := c.last + 1
	switch {
	case k == 1:
		// Dimension 0 carries block 0 from each vertex's primary (or only
		// node) to the twin of the neighbouring vertex.
		u := v ^ 1
		if x >= 1<<c.d {
			recvs = append(recvs, op{step: t, peer: u, block: 0})
		} else if c.paired(u) {
			sends = append(sends, op{step: t, peer: c.twin(u), block: 0})
		}
	case paired:
		// The receiver forwards as in any step; the sender returns the
		// block of the last set-bit step, which the receiver lacks.
		if b := c.forward(v, t); b >= 0 {
			sends, recvs = c.intra(x, v, t, b, sends, recvs)
		}
		if b := c.recvBlock(v, c.lastSet(v, t)); b >= 0 {
			r, snd := c.receiver(v, t), c.sender(v, t)
			if x == snd {
				sends = append(sends, op{step: t, peer: r, block: b})
			} else {
				recvs = append(recvs, op{step: t, peer: snd, block: b})
			}
		}
	}
	return sends, recvs
}

func (s pipelineSchedule) firstSource() int {
	switch {
	case s.rank == 0:
		return -1
	case s.rank >= 1<<s.d:
		return s.v ^ 1
	}
	return s.v - 1<<(bits.Len(uint(s.v))-1)
}

func (s pipelineSchedule) peers() []int {
	if s.n < 2 {
		return nil
	}
	c := pipelineCube{n: s.n, d: s.d}
	var p []int
	if c.paired(s.v) {
		if s.rank == s.v {
			p = append(p, c.twin(s.v))
		} else {
			p = append(p, s.v)
		}
	}
	for j := range s.d {
		u := s.v ^ 1<<j
		p = append(p, u)
		if c.paired(u) {
			p = append(p, c.twin(u))
		}
	}
	slices.Sort(p)
	return p
}

// pipelineCube answers questions about the vertex schedule of one message.
type pipelineCube struct {
	n    int // members, ≥ 2
	d    int // dimension, ≥ 1
	k    int // blocks in the message, ≥ 1
	last int // last step of the vertex schedule: k + d − 2
}

// paired reports whether vertex v holds two nodes.
func (c pipelineCube) paired(v int) bool { return v > 0 && c.twin(v) < c.n }

// twin returns the rank of vertex v's second node, if it has one.
func (c pipelineCube) twin(v int) int { return v + 1<<c.d - 1 }

// recvBlock returns the block vertex v receives from v ^ 2^(t mod d) at
// step t, or −1 for none.
func (c pipelineCube) recvBlock(v, t int) int {
	if v == 0 || t < 0 || t > c.last {
		return -1
	}
	j := t % c.d
	if v>>j&1 == 0 {
		if t < c.d {
			return -1
		}
		return t - c.d // < k − 1 since t ≤ k + d − 2
	}
	// i: distance from bit j up to v's next set bit, cyclically. Rotating
	// v right by j+1 puts bit j+1 at bit 0 and bit j at bit d−1, so the
	// result is non-zero.
	r := (j + 1) % c.d
	rot := (v>>r | v<<(c.d-r)) & (1<<c.d - 1)
	i := bits.TrailingZeros(uint(rot)) + 1
	b := t + i - c.d
	if b < 0 {
		return -1
	}
	return min(b, c.k-1)
}

// lastSet returns the last step s < t at which bit s mod d of vertex v ≠ 0
// is set, or −1 if there is none.
func (c pipelineCube) lastSet(v, t int) int {
	j := t % c.d
	base := t - j
	if low := v & (1<<j - 1); low != 0 {
		return base + bits.Len(uint(low)) - 1
	}
	s := base - c.d + bits.Len(uint(v)) - 1
	if s < 0 {
		return -1
	}
	return s
}

// receiver returns the rank that receives vertex v's inbound block at step
// t; the other node of a paired vertex is its sender. The roles swap after
// every step whose bit of v is set, and the primary receives at v's highest
// set-bit step, where the vertex receives its first block: the parity of
// the set-bit steps before t, less the popcount(v) − 1 before that step.
func (c pipelineCube) receiver(v, t int) int {
	if !c.paired(v) {
		return v
	}
	j := t % c.d
	w := bits.OnesCount(uint(v))
	flips := t/c.d*w + bits.OnesCount(uint(v&(1<<j-1)))
	if (flips-w+1)&1 == 0 {
		return v
	}
	return c.twin(v)
}

// sender returns the rank that sends vertex v's outbound block at step t:
// the node that is not its receiver.
func (c pipelineCube) sender(v, t int) int {
	if !c.paired(v) {
		return v
	}
	if r := c.receiver(v, t); r != v {
		return v
	}
	return c.twin(v)
}

// forward returns the block that paired vertex v's receiver passes to its
// sender at step t ≥ 1, or −1 for none: the block received at step t−1 if
// that was a clear-bit step (same receiver), else the block received at the
// set-bit step before t−1 (the receiver is back to the node that got it).
func (c pipelineCube) forward(v, t int) int {
	p := t - 1
	if v>>(p%c.d)&1 == 0 {
		return c.recvBlock(v, p)
	}
	return c.recvBlock(v, c.lastSet(v, p))
}

// intra appends rank x's part in paired vertex v's forwarding of block b
// from its receiver to its sender at step t.
func (c pipelineCube) intra(x, v, t, b int, sends, recvs []op) ([]op, []op) {
	r, s := c.receiver(v, t), c.sender(v, t)
	if x == r {
		return append(sends, op{step: t, peer: s, block: b}), recvs
	}
	return sends, append(recvs, op{step: t, peer: r, block: b})
}
