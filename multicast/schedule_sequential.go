package multicast

// sequentialSchedule is the Sequential algorithm: the root sends every block
// to rank 1, then every block to rank 2, and so on, one block per step. Rank
// r ≥ 1 receives block b from the root at step (r−1)·k + b.
type sequentialSchedule struct {
	n, rank int
}

func (s sequentialSchedule) steps(k int) int {
	if k < 1 {
		return 0
	}
	return k * (s.n - 1)
}

func (s sequentialSchedule) plan(k int, sends, recvs []op) ([]op, []op) {
	if k < 1 {
		return sends, recvs
	}
	if s.rank == 0 {
		for r := 1; r < s.n; r++ {
			for b := 0; b < k; b++ {
				sends = append(sends, op{step: (r-1)*k + b, peer: r, block: b})
			}
		}
		return sends, recvs
	}
	for b := 0; b < k; b++ {
		recvs = append(recvs, op{step: (s.rank-1)*k + b, peer: 0, block: b})
	}
	return sends, recvs
}

func (s sequentialSchedule) firstSource() int {
	if s.rank == 0 {
		return -1
	}
	return 0
}

func (s sequentialSchedule) peers() []int {
	if s.rank != 0 {
		return []int{0}
	}
	p := make([]int, 0, s.n-1)
	for r := 1; r < s.n; r++ {
		p = append(p, r)
	}
	return p
}
