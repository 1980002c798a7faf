package multicast

import (
	"fmt"
	"math/bits"
	"slices"
	"testing"
)

var schedAlgorithms = []Algorithm{BinomialPipeline, Sequential, Chain, BinomialTree}

// schedCheckBlocks are the message sizes, in blocks, the checker runs every
// schedule with.
var schedCheckBlocks = []int{1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 100}

// TestScheduleCheck runs every algorithm for every group size up to 33 and
// checks the plans of all ranks together with schedCheck.
func TestScheduleCheck(t *testing.T) {
	for _, alg := range schedAlgorithms {
		for n := 1; n <= 33; n++ {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				ss := schedAll(t, alg, n)
				for _, k := range schedCheckBlocks {
					if err := schedCheck(alg, ss, k); err != nil {
						t.Fatalf("k=%d: %v", k, err)
					}
				}
			})
		}
	}
}

// TestScheduleCheckLarge spot-checks larger groups, around powers of two.
func TestScheduleCheckLarge(t *testing.T) {
	for _, alg := range schedAlgorithms {
		for _, n := range []int{63, 64, 65, 96, 127, 128, 129, 255, 256, 257} {
			ss := schedAll(t, alg, n)
			for _, k := range []int{1, 2, 3, 9, 17} {
				if err := schedCheck(alg, ss, k); err != nil {
					t.Fatalf("%v n=%d k=%d: %v", alg, n, k, err)
				}
			}
		}
	}
}

// TestScheduleEveryK checks, for every message size up to 64 blocks, that
// each rank's first receive comes from firstSource() (receivers post that
// buffer before they know k), and that peers() is exact: every rank it lists
// is used by some plan.
func TestScheduleEveryK(t *testing.T) {
	for _, alg := range schedAlgorithms {
		for n := 1; n <= 40; n++ {
			for r, s := range schedAll(t, alg, n) {
				used := map[int]bool{}
				var sends, recvs []op
				for k := 1; k <= 64; k++ {
					sends, recvs = s.plan(k, sends[:0], recvs[:0])
					if r > 0 && (len(recvs) == 0 || recvs[0].peer != s.firstSource()) {
						t.Fatalf("%v n=%d rank %d k=%d: first receives %v, firstSource() = %d", alg, n, r, k, recvs[:min(1, len(recvs))], s.firstSource())
					}
					for _, o := range sends {
						used[o.peer] = true
					}
					for _, o := range recvs {
						used[o.peer] = true
					}
				}
				for _, p := range s.peers() {
					if !used[p] {
						t.Errorf("%v n=%d rank %d: peers() = %v lists unused %d", alg, n, r, s.peers(), p)
					}
				}
			}
		}
	}
}

func TestNewScheduleErrors(t *testing.T) {
	for _, tc := range []struct {
		alg     Algorithm
		n, rank int
	}{
		{BinomialPipeline, 0, 0},
		{BinomialPipeline, -3, 0},
		{BinomialPipeline, 4, 4},
		{Chain, 4, -1},
		{Algorithm(42), 4, 1},
		{Sequential, schedMaxMembers + 1, 0},
	} {
		if _, err := newSchedule(tc.alg, tc.n, tc.rank); err == nil {
			t.Errorf("newSchedule(%v, %d, %d) succeeded", tc.alg, tc.n, tc.rank)
		}
	}
}

// TestSchedulePlanAppends checks that plan appends to the slices it is given
// and plans nothing for an empty message.
func TestSchedulePlanAppends(t *testing.T) {
	for _, alg := range schedAlgorithms {
		s, err := newSchedule(alg, 6, 1)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := s.plan(5, nil, nil)
		_, wantR := s.plan(5, nil, nil)
		pre := op{step: -7, peer: -7, block: -7}
		sends, recvs := s.plan(5, []op{pre}, []op{pre})
		if sends[0] != pre || recvs[0] != pre || !slices.Equal(sends[1:], want) || !slices.Equal(recvs[1:], wantR) {
			t.Errorf("%v: plan does not append", alg)
		}
		if sends, recvs := s.plan(0, nil, nil); len(sends)+len(recvs) != 0 || s.steps(0) != 0 {
			t.Errorf("%v: plan(0) = %v, %v", alg, sends, recvs)
		}
	}
}

func schedAll(t testing.TB, alg Algorithm, n int) []schedule {
	t.Helper()
	ss := make([]schedule, n)
	for r := range ss {
		s, err := newSchedule(alg, n, r)
		if err != nil {
			t.Fatal(err)
		}
		ss[r] = s
	}
	return ss
}

// schedWantSteps returns the number of steps alg must take for k blocks
// and n members: the formulas of RDMC §3 and appendix A. For the binomial
// pipeline it is optimal.
func schedWantSteps(alg Algorithm, n, k int) int {
	if n == 1 {
		return 0
	}
	switch alg {
	case BinomialPipeline:
		d := bits.Len(uint(n)) - 1
		if n == 1<<d {
			return k + d - 1
		}
		return k + d
	case Sequential:
		return k * (n - 1)
	case Chain:
		return k + n - 2
	case BinomialTree:
		return k * bits.Len(uint(n-1))
	}
	panic(alg)
}

// schedXfer is one block transfer of the global schedule.
type schedXfer struct {
	step, from, to, block int
}

// schedCheck checks the plans of all ranks of one group, ss[r] being rank
// r's schedule, for a message of k blocks:
//
//   - every rank agrees on steps(k), which is schedWantSteps;
//   - each rank's sends and receives are in strictly increasing step order
//     (so at most one of each per step), within [0, steps(k)), with a
//     block in [0, k) and a peer in the group other than itself;
//   - sends and receives match pairwise: a sends b to c at step s if and
//     only if c receives b from a at step s;
//   - the root receives nothing and every other rank receives every block
//     exactly once;
//   - a rank sends only blocks it holds: the root holds all, others those
//     received at an earlier step;
//   - the last receive is at step steps(k) − 1 (no idle step at the end);
//   - each non-root rank's first receive comes from firstSource();
//   - peers() lists, once each, every peer in the plans.
func schedCheck(alg Algorithm, ss []schedule, k int) error {
	n := len(ss)
	steps := ss[0].steps(k)
	if want := schedWantSteps(alg, n, k); steps != want {
		return fmt.Errorf("steps(%d) = %d, want %d", k, steps, want)
	}
	sent := map[schedXfer]int{}
	recvd := map[schedXfer]int{}
	plans := make([][2][]op, n)
	lastRecv := -1
	for r, s := range ss {
		if got := s.steps(k); got != steps {
			return fmt.Errorf("rank %d: steps(%d) = %d, rank 0 says %d", r, k, got, steps)
		}
		sends, recvs := s.plan(k, nil, nil)
		plans[r] = [2][]op{sends, recvs}
		for dir, ops := range plans[r] {
			for i, o := range ops {
				if i > 0 && o.step <= ops[i-1].step {
					return fmt.Errorf("rank %d: ops %v then %v: not one per step in step order", r, ops[i-1], o)
				}
				if o.step < 0 || o.step >= steps || o.block < 0 || o.block >= k || o.peer < 0 || o.peer >= n || o.peer == r {
					return fmt.Errorf("rank %d: bad op %+v (steps %d)", r, o, steps)
				}
				if dir == 0 {
					sent[schedXfer{o.step, r, o.peer, o.block}]++
				} else {
					recvd[schedXfer{o.step, o.peer, r, o.block}]++
					lastRecv = max(lastRecv, o.step)
				}
			}
		}
		peers := s.peers()
		for i, p := range peers {
			if p < 0 || p >= n || p == r || (i > 0 && p == peers[i-1]) {
				return fmt.Errorf("rank %d: bad peers %v", r, peers)
			}
		}
		for _, ops := range plans[r] {
			for _, o := range ops {
				if !slices.Contains(peers, o.peer) {
					return fmt.Errorf("rank %d: peer %d of %+v not in peers() = %v", r, o.peer, o, peers)
				}
			}
		}
	}
	for x, c := range sent {
		if c != 1 || recvd[x] != 1 {
			return fmt.Errorf("transfer %+v sent %d times, received %d times", x, c, recvd[x])
		}
	}
	for x, c := range recvd {
		if sent[x] != c {
			return fmt.Errorf("transfer %+v received %d times, sent %d times", x, c, sent[x])
		}
	}
	if n > 1 && lastRecv != steps-1 {
		return fmt.Errorf("last receive at step %d, want %d", lastRecv, steps-1)
	}
	for r := range ss {
		sends, recvs := plans[r][0], plans[r][1]
		// held[b] is the step at which r got block b, −2 for never.
		held := make([]int, k)
		for b := range held {
			held[b] = -2
			if r == 0 {
				held[b] = -1
			}
		}
		if r == 0 && len(recvs) > 0 {
			return fmt.Errorf("root receives %+v", recvs[0])
		}
		for _, o := range recvs {
			if held[o.block] != -2 {
				return fmt.Errorf("rank %d receives block %d twice (steps %d and %d)", r, o.block, held[o.block], o.step)
			}
			held[o.block] = o.step
		}
		for b, s := range held {
			if s == -2 {
				return fmt.Errorf("rank %d never receives block %d", r, b)
			}
		}
		for _, o := range sends {
			if held[o.block] >= o.step {
				return fmt.Errorf("rank %d sends block %d at step %d, received at step %d", r, o.block, o.step, held[o.block])
			}
		}
		if r > 0 {
			if src := ss[r].firstSource(); recvs[0].peer != src {
				return fmt.Errorf("rank %d first receives %+v, firstSource() = %d", r, recvs[0], src)
			}
		}
	}
	return nil
}
