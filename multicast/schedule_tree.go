package multicast

import "math/bits"

// treeSchedule is the BinomialTree algorithm: the whole message goes down a
// binomial tree in ⌈log2 n⌉ rounds of k steps. In round i every rank
// r < 2^i that holds the message sends it, block b at step i·k + b, to rank
// r + 2^i (if there is one). So rank r's parent is r minus its highest set
// bit, and it receives in round log2 of that bit.
type treeSchedule struct {
	n, rank int
}

// rounds returns ⌈log2 n⌉.
func (s treeSchedule) rounds() int { return bits.Len(uint(s.n - 1)) }

func (s treeSchedule) steps(k int) int {
	if k < 1 {
		return 0
	}
	return k * s.rounds()
}

func (s treeSchedule) plan(k int, sends, recvs []op) ([]op, []op) {
	if k < 1 {
		return sends, recvs
	}
	r := s.rank
	first := 0 // the round in which r starts sending
	if r > 0 {
		i := bits.Len(uint(r)) - 1
		for b := 0; b < k; b++ {
			recvs = append(recvs, op{step: i*k + b, peer: r - 1<<i, block: b})
		}
		first = i + 1
	}
	for i := first; r+1<<i < s.n; i++ {
		for b := 0; b < k; b++ {
			sends = append(sends, op{step: i*k + b, peer: r + 1<<i, block: b})
		}
	}
	return sends, recvs
}

func (s treeSchedule) firstSource() int {
	if s.rank == 0 {
		return -1
	}
	return s.rank - 1<<(bits.Len(uint(s.rank))-1)
}

func (s treeSchedule) peers() []int {
	var p []int
	first := 0
	if s.rank > 0 {
		p = append(p, s.firstSource())
		first = bits.Len(uint(s.rank))
	}
	for i := first; s.rank+1<<i < s.n; i++ {
		p = append(p, s.rank+1<<i)
	}
	return p
}
