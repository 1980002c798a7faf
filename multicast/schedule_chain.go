package multicast

// chainSchedule is the Chain algorithm: block b leaves rank r for rank r+1
// at step b + r, so a message of k blocks takes k + n − 2 steps.
type chainSchedule struct {
	n, rank int
}

func (s chainSchedule) steps(k int) int {
	if k < 1 || s.n < 2 {
		return 0
	}
	return k + s.n - 2
}

func (s chainSchedule) plan(k int, sends, recvs []op) ([]op, []op) {
	if k < 1 {
		return sends, recvs
	}
	r := s.rank
	if r > 0 {
		for b := 0; b < k; b++ {
			recvs = append(recvs, op{step: b + r - 1, peer: r - 1, block: b})
		}
	}
	if r < s.n-1 {
		for b := 0; b < k; b++ {
			sends = append(sends, op{step: b + r, peer: r + 1, block: b})
		}
	}
	return sends, recvs
}

func (s chainSchedule) firstSource() int { return s.rank - 1 }

func (s chainSchedule) peers() []int {
	var p []int
	if s.rank > 0 {
		p = append(p, s.rank-1)
	}
	if s.rank < s.n-1 {
		p = append(p, s.rank+1)
	}
	return p
}
