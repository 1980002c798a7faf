package ordering

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Frontier aggregation (1Pipe §6.2.3): in the direct scheme every record a
// member multicasts carries its receive frontier to the N−1 others, so the
// frontier traffic a member sends grows with the group; through a tree of
// representatives a member sends frontiers only to its parent (up) and
// barriers only to its children (down), so that the fan-out, not the
// group size, bounds it.

const (
	loadInterval = time.Millisecond
	loadGap      = loadInterval / 8
	// loadIntervals are run; the first loadWarmup are not counted.
	loadIntervals = 10
	loadWarmup    = 2
)

// loadResult is the frontier-carrying traffic of one run: sent[k][i] is
// how many frontier messages member i sent during beacon interval k.
type loadResult struct {
	sent     [][]int
	up, down [][]int // the tree's share of sent, by direction
	records  [][]int // records multicast
	messages int     // application messages sent
	err      error   // from sameSequences
}

// maxCount returns the largest count over the measured intervals and members.
func maxCount(counts [][]int) int {
	m := 0
	for _, row := range counts[loadWarmup:] {
		for _, v := range row {
			m = max(m, v)
		}
	}
	return m
}

func meanCount(counts [][]int) float64 {
	sum, cells := 0, 0
	for _, row := range counts[loadWarmup:] {
		for _, v := range row {
			sum += v
			cells++
		}
	}
	return float64(sum) / float64(cells)
}

// runLoad runs n atomic members, idle but (if load) for a light steady
// load — one message per beacon interval, from each member in turn — for
// loadIntervals beacon intervals, ticking every member when its deadline
// comes, and counts the frontier messages each member sends per interval:
// in the direct scheme (fanOut 0) N−1 per record it multicasts, with
// aggregation its control records (up and down). It then lets every
// message be delivered. No record may be rejected.
func runLoad(t *testing.T, n, fanOut int, skew []int64, load bool) loadResult {
	t.Helper()
	cfg := Config{Mode: Atomic, BeaconInterval: loadInterval, BeaconGap: loadGap, FanOut: fanOut}
	c := newCluster(t, n, cfg, skew)
	var trace strings.Builder
	c.out = &trace
	iv := int64(loadInterval)
	res := loadResult{}
	for _, p := range []*[][]int{&res.sent, &res.up, &res.down, &res.records} {
		*p = make([][]int, loadIntervals)
		for k := range *p {
			(*p)[k] = make([]int, n)
		}
	}
	end := loadIntervals * iv
	nextSend := iv / 2
	if !load {
		nextSend = end
	}
	for at := int64(0); at < end; {
		if at >= nextSend {
			c.send(res.messages%n, at, strconv.Itoa(res.messages))
			res.messages++
			nextSend += iv
		}
		c.stabilize(at)
		k := int(at / iv)
		for _, line := range strings.Split(trace.String(), "\n") {
			var from int
			var rest string
			if _, err := fmt.Sscan(strings.TrimPrefix(line, "m"), &from, &rest); err != nil {
				continue
			}
			switch {
			case rest == "multicasts":
				res.records[k][from]++
				if fanOut == 0 {
					res.sent[k][from] += n - 1
				}
			case rest == "->" && strings.Contains(line, " up "):
				res.up[k][from]++
				res.sent[k][from]++
			case rest == "->" && strings.Contains(line, " down "):
				res.down[k][from]++
				res.sent[k][from]++
			}
		}
		trace.Reset()
		next := nextSend
		for i, core := range c.cores {
			next = min(next, core.Deadline()-c.skew[i])
		}
		at = max(at+1, next)
	}
	c.out = nil
	c.settle(end, end+10*iv)
	for i := range c.delivered {
		if r := c.cores[i].Stats().Rejected; r > 0 {
			t.Errorf("n=%d fan-out=%d: m%d rejected %d records", n, fanOut, i, r)
		}
		if len(c.delivered[i]) != res.messages {
			t.Errorf("n=%d fan-out=%d: m%d delivered %d of %d messages", n, fanOut, i, len(c.delivered[i]), res.messages)
		}
	}
	res.err = sameSequences(c.delivered)
	return res
}

// TestAggregationControlTraffic runs the same light load over 4, 16 and 64
// members in the direct scheme and with aggregation through a tree of
// fan-out 4, and compares the frontier messages a member sends per beacon
// interval. Direct: N−1 per record multicast, growing with N. Aggregated:
// one up per change of the member's subtree minimum and one down per
// child per change of the barrier, independent of N. A member's frontier
// moves about once per beacon gap here, because members beacon every gap
// even when idle (see TestIdleBeaconRate); each move costs at most one up
// and fan-out downs, and the bound allows twice that: 2·(fan-out+1)
// control records per gap.
func TestAggregationControlTraffic(t *testing.T) {
	const fanOut = 4
	gapsPerInterval := int(loadInterval / loadGap)
	bound := 2 * (fanOut + 1) * gapsPerInterval
	sizes := []int{4, 16, 64}
	direct := make([]loadResult, len(sizes))
	tree := make([]loadResult, len(sizes))
	for i, n := range sizes {
		direct[i] = runLoad(t, n, 0, nil, true)
		tree[i] = runLoad(t, n, fanOut, nil, true)
		for _, r := range []loadResult{direct[i], tree[i]} {
			if r.err != nil {
				t.Errorf("n=%d: %v", n, r.err)
			}
		}
	}
	logLoadTable(t, sizes, fanOut, direct, tree)

	for i, n := range sizes {
		if d := maxCount(direct[i].sent); d < n-1 {
			t.Errorf("direct, n=%d: at most %d frontier messages per member per interval, want at least N−1 = %d", n, d, n-1)
		}
		if i > 0 && maxCount(direct[i].sent) <= maxCount(direct[i-1].sent) {
			t.Errorf("direct: %d frontier messages per member per interval at n=%d, %d at n=%d: want growth with N",
				maxCount(direct[i].sent), n, maxCount(direct[i-1].sent), sizes[i-1])
		}
		if a := maxCount(tree[i].sent); a > bound {
			t.Errorf("fan-out %d, n=%d: %d control records per member per interval, want at most 2·(fan-out+1)·%d = %d",
				fanOut, n, a, gapsPerInterval, bound)
		}
		// Below fan-out+1 members the root has fewer children than the
		// fan-out; from there on the count must not grow.
		if i > 0 && sizes[i-1] > fanOut && maxCount(tree[i].sent) > maxCount(tree[i-1].sent) {
			t.Errorf("fan-out %d: %d control records per member per interval at n=%d, %d at n=%d: want no growth with N",
				fanOut, maxCount(tree[i].sent), n, maxCount(tree[i-1].sent), sizes[i-1])
		}
	}
	last := len(sizes) - 1
	if a, d := maxCount(tree[last].sent), maxCount(direct[last].sent); a >= d {
		t.Errorf("n=%d: aggregation sends %d frontier messages per member per interval, direct %d", sizes[last], a, d)
	}
}

func logLoadTable(t *testing.T, sizes []int, fanOut int, direct, tree []loadResult) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "frontier messages per member per beacon interval (max / mean over members and intervals %d..%d):\n", loadWarmup, loadIntervals-1)
	fmt.Fprintf(&b, "%8s %16s %22s %10s %10s\n", "members", "direct", fmt.Sprintf("fan-out %d (up+down)", fanOut), "max up", "max down")
	for i, n := range sizes {
		fmt.Fprintf(&b, "%8d %8d / %5.1f %13d / %6.1f %10d %10d\n", n,
			maxCount(direct[i].sent), meanCount(direct[i].sent),
			maxCount(tree[i].sent), meanCount(tree[i].sent),
			maxCount(tree[i].up), maxCount(tree[i].down))
	}
	t.Log(b.String())
}

// TestAggregationControlTrafficSkewed is TestAggregationControlTraffic
// with the members' clocks skewed by up to a tenth of a beacon interval.
// Beacons then carry different promises, a member's frontier moves with
// many of the beacons it receives rather than once per round, and the
// tree forwards every move: the control traffic of a representative grows
// with N and exceeds the direct scheme's.
func TestAggregationControlTrafficSkewed(t *testing.T) {
	const fanOut = 4
	gapsPerInterval := int(loadInterval / loadGap)
	bound := 2 * (fanOut + 1) * gapsPerInterval
	sizes := []int{4, 16, 64}
	direct := make([]loadResult, len(sizes))
	tree := make([]loadResult, len(sizes))
	for i, n := range sizes {
		skew := make([]int64, n)
		for j := range skew {
			skew[j] = int64(j*7919) % (int64(loadInterval) / 10)
		}
		direct[i] = runLoad(t, n, 0, skew, true)
		tree[i] = runLoad(t, n, fanOut, skew, true)
		for _, r := range []loadResult{direct[i], tree[i]} {
			if r.err != nil {
				t.Errorf("n=%d, skewed clocks: %v", n, r.err)
			}
		}
	}
	logLoadTable(t, sizes, fanOut, direct, tree)
	for i, n := range sizes {
		if a := maxCount(tree[i].sent); a > bound {
			t.Errorf("fan-out %d, n=%d, skewed clocks: %d control records per member per interval, want at most %d", fanOut, n, a, bound)
		}
		if a, d := maxCount(tree[i].sent), maxCount(direct[i].sent); n > 2*fanOut && a >= d {
			t.Errorf("n=%d, skewed clocks: aggregation sends %d frontier messages per member per interval, direct %d", n, a, d)
		}
	}
}

// TestIdleBeaconRate: an idle member beacons once per beacon interval
// (Config.BeaconInterval, DefaultBeaconInterval); a shorter gap is for
// reacting to traffic. With nothing sent at all, every member nevertheless
// multicasts a record every BeaconGap: a peer's beacon raises the
// receiver's clock to the peer's promise (Core.step observes beacons as
// well as data stamps), which wantsBeacon takes for "a peer stamped at or
// above the last promise", and each reaction beacon triggers the next. In
// the direct scheme the frontier that each beacon raises ("frontier >
// announcedR") does the same.
func TestIdleBeaconRate(t *testing.T) {
	for _, fanOut := range []int{0, 4} {
		res := runLoad(t, 4, fanOut, nil, false)
		if r := maxCount(res.records); r > 1 {
			t.Errorf("fan-out %d: an idle member multicast up to %d records per beacon interval, want at most 1", fanOut, r)
		}
	}
}
