package multicast

import "fmt"

// Algorithm selects how a message's blocks travel from the root to the
// other members (RDMC §3).
type Algorithm int

const (
	// BinomialPipeline relays blocks along the edges of a hypercube so that
	// every member sends and receives one block per step (RDMC appendix A).
	// It is the default.
	BinomialPipeline Algorithm = iota
	// Sequential has the root send every block to every member in turn.
	Sequential
	// Chain relays every block down the member list, one hop per step.
	Chain
	// BinomialTree sends the whole message down a binomial tree, one
	// message-sized hop per round.
	BinomialTree
)

// String returns the name used on command lines: pipeline, sequential,
// chain or tree.
func (a Algorithm) String() string {
	switch a {
	case BinomialPipeline:
		return "pipeline"
	case Sequential:
		return "sequential"
	case Chain:
		return "chain"
	case BinomialTree:
		return "tree"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm is the inverse of String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range []Algorithm{BinomialPipeline, Sequential, Chain, BinomialTree} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("multicast: unknown algorithm %q (want pipeline, sequential, chain or tree)", s)
}

// op is one block transfer in a node's plan: at step, send block to (or
// receive it from) rank peer.
type op struct {
	step  int
	peer  int
	block int
}

// schedule is one rank's part of an algorithm's deterministic schedule for
// a group of n ranks, rank 0 being the root. It is computed locally: no node
// needs the global schedule.
type schedule interface {
	// steps returns the number of steps a message of k ≥ 1 blocks takes.
	steps(k int) int
	// plan appends this rank's sends and receives for a message of k ≥ 1
	// blocks to the given slices, each in step order, and returns them.
	plan(k int, sends, recvs []op) ([]op, []op)
	// firstSource returns the rank this rank receives the first block of
	// every message from, whatever k is (receivers post the buffer for it
	// before they know the size). Not meaningful for rank 0.
	firstSource() int
	// peers returns the ranks this rank ever sends to or receives from.
	peers() []int
}
