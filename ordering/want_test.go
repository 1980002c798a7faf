package ordering

import (
	"fmt"
	"testing"
)

// TestWant: in an idle group, the commit barrier passes a stamp a member
// asked for with Want within a few beacon gaps, where without Want it
// waits for the next idle beacons, a beacon interval later; once it has
// passed, the group goes back to the idle pace.
func TestWant(t *testing.T) {
	const interval, gap = 1_000_000, 10
	for _, fanOut := range []int{0, 2} {
		for _, want := range []bool{true, false} {
			t.Run(fmt.Sprintf("fanout=%d/want=%v", fanOut, want), func(t *testing.T) {
				c := newCluster(t, 5, Config{Mode: Atomic, BeaconInterval: interval, BeaconGap: gap, FanOut: fanOut}, nil)
				// Idle: every member beacons at the idle pace, until
				// this member's frontier is ahead of its barrier.
				core := c.cores[0]
				now := int64(0)
				for ; now < 5*interval || core.Barrier() >= core.Frontier(); now += interval / 4 {
					if now > 20*interval {
						t.Fatalf("idle: the barrier never trails the frontier (%d)", core.Frontier())
					}
					c.stabilize(now)
				}
				ts := core.Frontier()
				if want {
					core.Want(ts)
				}
				// A few gaps, far less than an interval: records go
				// out as members tick at their deadlines, and arrive at
				// once.
				end := now + 20*gap
				for ; now <= end; now += gap {
					c.stabilize(now)
				}
				passed := core.Barrier() >= ts
				if passed != want {
					t.Fatalf("after %d gaps: barrier %d, frontier asked for %d: passed = %v, want %v", 20, core.Barrier(), ts, passed, want)
				}
				for i, m := range c.cores {
					if d := m.Deadline(); d < now+interval/8 {
						t.Errorf("member %d: deadline %d at %d, want the idle pace (an interval of %d after its last record)", i, d, now, interval)
					}
				}
				if want {
					// Asking again for no more than before sends nothing.
					core.Want(ts)
					c.tick(0, now+gap)
					if n := len(c.links[[3]int{0, 1, 0}]); n != 0 {
						t.Errorf("a repeated Want multicast %d records", n)
					}
				}
			})
		}
	}
}

// TestWantUnordered: Want does nothing in Unordered mode, where there is
// no barrier to pass.
func TestWantUnordered(t *testing.T) {
	c := newCluster(t, 2, Config{Mode: Unordered, BeaconInterval: 1000, BeaconGap: 10}, nil)
	c.cores[0].Want(3)
	c.tick(0, 100)
	if n := len(c.links[[3]int{0, 1, 0}]); n != 0 {
		t.Fatalf("Unordered: Want multicast %d records", n)
	}
}
