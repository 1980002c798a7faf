package multicast

import "fmt"

// newSchedule returns rank's part of alg's schedule for a group of n ranks,
// rank 0 being the root. A group of one member has no receivers: its
// schedules take no steps. The root's firstSource is −1.
func newSchedule(alg Algorithm, n, rank int) (schedule, error) {
	if n < 1 || n > schedMaxMembers {
		return nil, fmt.Errorf("multicast: schedule for %d members, want 1 to %d", n, schedMaxMembers)
	}
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("multicast: rank %d out of range for a group of %d", rank, n)
	}
	switch alg {
	case BinomialPipeline:
		return newPipelineSchedule(n, rank), nil
	case Sequential:
		return sequentialSchedule{n: n, rank: rank}, nil
	case Chain:
		return chainSchedule{n: n, rank: rank}, nil
	case BinomialTree:
		return treeSchedule{n: n, rank: rank}, nil
	}
	return nil, fmt.Errorf("multicast: unknown algorithm %v", alg)
}

// schedMaxMembers bounds the group size so that step numbers and hypercube
// vertex numbers stay far from overflow.
const schedMaxMembers = 1 << 20
