package membership

// Neighbours returns the ranks adjacent to rank when the n ranks of a view
// are placed on a two-dimensional generalized hypercube (CubicRing §3.2,
// BCube(m, 1)): rank r sits at (r / m, r % m) with m = ⌈√n⌉, and its
// neighbours are the ranks that share one of its coordinates. Every member
// thus has about 2√n neighbours, and any two neighbours of a member share
// further neighbours that can confirm a suspicion about it. Small groups
// (n ≤ 4) are fully connected.
func Neighbours(n, rank int) []int {
	if rank < 0 || rank >= n {
		return nil
	}
	var out []int
	if n <= 4 {
		for r := 0; r < n; r++ {
			if r != rank {
				out = append(out, r)
			}
		}
		return out
	}
	m := side(n)
	row, col := rank/m, rank%m
	for c := 0; c < m; c++ {
		if r := row*m + c; c != col && r < n {
			out = append(out, r)
		}
	}
	for w := 0; w < m; w++ {
		if r := w*m + col; w != row && r < n {
			out = append(out, r)
		}
	}
	// With n > 4 every rank has at least two neighbours: a rank alone in
	// the last row has at least two column-mates above it.
	return out
}

// side returns ⌈√n⌉.
func side(n int) int {
	m := 1
	for m*m < n {
		m++
	}
	return m
}
