package vsproc

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/internal/vscheck"
)

// TestPartition: a minority partition cannot install a view.
//
// Five members run under load, each in its own network namespace on an
// emulated switch, talking TCP over the switch; etcd runs as a process of
// its own on a sixth host. nftables on the switch then cuts the members
// into {1, 2} and {3, 4, 5}, while both sides still reach etcd:
//
//   - the majority {3, 4, 5} installs a view without 1 and 2 and goes on
//     delivering;
//   - the minority installs no view of its own and delivers nothing
//     beyond the cut of the view that excluded it: in its old incarnation
//     nothing in that view or later, and in any new incarnation (it may
//     learn of its exclusion from etcd and ask to rejoin) nothing at all
//     while the partition lasts.
//
// Once the partition heals, 1 and 2 rejoin as new incarnations with the
// group's state, the five converge to one view and end with equal state
// checksums, and every history passes internal/vscheck. Over the whole
// run, no view consists of minority members only, and every view holds a
// majority of the members of the view before it.
func TestPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes in network namespaces; skipped with -short")
	}
	if err := netns.CheckPartition(); err != nil {
		t.Skip(err)
	}
	n := newNetwork(t, 5)
	c := newCluster(t, n.endpoints)
	ps := c.startAllOn(n, 5)
	minority, majority := ps[:2], ps[2:]
	for _, p := range ps {
		c.waitDelivered(p, loadMessages)
	}

	n.partition(t, ids(minority), ids(majority))
	c.waitFor("the majority to install a view without the minority", func() bool {
		for _, p := range majority {
			for _, m := range minority {
				if p.firstViewWithout(m.id) == 0 {
					return false
				}
			}
		}
		return true
	})
	excluding := majority[0].firstViewWithout(minority[0].id)
	for _, p := range majority {
		c.waitMore(p, loadMessages)
	}
	for _, p := range minority {
		if err := p.refresh(); err != nil {
			t.Fatal(err)
		}
		if later := deliveredAfterFirst(p); later > 0 {
			t.Errorf("%v delivered %d messages in a later incarnation while partitioned from the majority", p, later)
		}
		t.Logf("%v while partitioned: %d incarnations, told of exclusion by views %v", p, len(p.histories()), p.exclusions())
	}

	n.heal(t)
	c.waitFor("the minority to rejoin as new incarnations and deliver", func() bool {
		for _, p := range minority {
			h := p.histories()
			if len(h) < 2 || countDeliveries(h[len(h)-1]) < loadMessages {
				return false
			}
		}
		return true
	})
	c.waitMembers(ps, 1, 2, 3, 4, 5)
	c.finish(ps)

	views := vscheck.Views(c.allHistories())
	cut, ok := views[excluding]
	if !ok {
		t.Fatalf("no history holds view %d, which excluded the minority", excluding)
	}
	for _, p := range minority {
		checkNothingBeyond(t, p, cut)
	}
	checkMajorities(t, views, ids(minority))
}

// ids returns the members' ids.
func ids(ps []*proc) []uint64 {
	out := make([]uint64, len(ps))
	for i, p := range ps {
		out[i] = p.id
	}
	return out
}

// deliveredAfterFirst returns how many messages p delivered in its
// incarnations after the first.
func deliveredAfterFirst(p *proc) int {
	n := 0
	for _, h := range p.histories()[1:] {
		n += countDeliveries(h)
	}
	return n
}

// allHistories returns every incarnation's history, keyed as in
// checkHistories.
func (c *cluster) allHistories() map[string][]vscheck.Event {
	all := make(map[string][]vscheck.Event)
	for _, p := range c.procs {
		for i, h := range p.histories() {
			all[fmt.Sprintf("member %d incarnation %d", p.id, i+1)] = h
		}
	}
	return all
}

// checkNothingBeyond verifies that p's first incarnation, cut off from
// the group by view excluding, installed no view from excluding on and
// delivered no message beyond its start.
func checkNothingBeyond(t *testing.T, p *proc, excluding vscheck.View) {
	t.Helper()
	for _, ev := range p.histories()[0] {
		switch {
		case ev.View != nil && ev.View.Epoch >= excluding.Epoch:
			t.Errorf("%v, incarnation 1: installed view %d %v, at or after view %d that excluded it", p, ev.View.Epoch, ev.View.Members, excluding.Epoch)
		case ev.Delivery != nil && (ev.Delivery.Epoch >= excluding.Epoch || ev.Delivery.Index > excluding.Start):
			t.Errorf("%v, incarnation 1: delivered index %d in view %d, beyond the cut (start %d) of view %d that excluded it", p, ev.Delivery.Index, ev.Delivery.Epoch, excluding.Start, excluding.Epoch)
			return
		}
	}
}

// checkMajorities verifies the sequence of views: no epoch is missing, no
// view consists of minority members only, and each view holds more than
// half of the members of the view before it.
func checkMajorities(t *testing.T, views map[uint64]vscheck.View, minority []uint64) {
	t.Helper()
	epochs := slices.Sorted(maps.Keys(views))
	for i, e := range epochs {
		v := views[e]
		onlyMinority := true
		for _, m := range v.Members {
			if !slices.Contains(minority, m) {
				onlyMinority = false
			}
		}
		if onlyMinority {
			t.Errorf("view %d %v holds minority members only", e, v.Members)
		}
		if i == 0 {
			continue
		}
		prev := views[epochs[i-1]]
		if prev.Epoch != e-1 {
			t.Errorf("no history installed the views between %d and %d", prev.Epoch, e)
			continue
		}
		kept := 0
		for _, m := range v.Members {
			if slices.Contains(prev.Members, m) {
				kept++
			}
		}
		if 2*kept <= len(prev.Members) {
			t.Errorf("view %d %v keeps %d of the %d members of view %d %v: no majority", e, v.Members, kept, len(prev.Members), prev.Epoch, prev.Members)
		}
	}
	t.Logf("%d views, epochs %d to %d", len(epochs), epochs[0], epochs[len(epochs)-1])
}
