package engine

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convoy-gcs/convoy/membership"
)

// TestReportAfterEtcdOutage: the survivors of a crash are cut off etcd
// for longer than a write to it is retried (asyncTimeout), so the final
// reports they write once wedged are given up. Whom they hear does not
// change meanwhile; once etcd is back, they find that it does not hold
// their reports, write them again, and the next view follows. (A report
// was once written again only when whom its member hears changed: the
// view change waited for the lost reports for good.)
func TestReportAfterEtcdOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t)
		nodes := c.openAll(3)
		c.sim.setCut(1, true)
		c.sim.setCut(2, true)
		c.crash(3)
		time.Sleep(asyncTimeout + 10*time.Second)
		c.sim.setCut(1, false)
		c.sim.setCut(2, false)
		c.waitView(2, 2, nodes[:2]...)
		for _, n := range nodes[:2] {
			// The survivors went on to view 2 together, not by way of
			// an exclusion and a join.
			if v, _ := n.lastView(); v.Epoch != 2 || n.exclusions() != 0 {
				t.Errorf("member %d: in view %d after %d exclusions, want view 2 and none", n.id, v.Epoch, n.exclusions())
			}
		}
		c.check()
	})
}

// TestCaughtUpMarkAfterEtcdOutage: a joiner gets its state while etcd
// refuses its caught-up mark for longer than a write to it is retried
// (asyncTimeout). Once etcd takes writes again, the joiner finds the
// mark missing and writes it again. (It was once written only once: the
// joiner stayed a joiner, counting towards no majority, in every view
// from then on.)
func TestCaughtUpMarkAfterEtcdOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t)
		var refuse atomic.Bool
		refuse.Store(true)
		c.sim.refusePut = func(id NodeID, key []byte) bool {
			return refuse.Load() && id == 4 && bytes.Contains(key, []byte("/caughtup/"))
		}
		nodes := c.openAll(3)
		joiner, err := c.open(4, 3)
		if err != nil {
			t.Fatal(err)
		}
		c.waitMembers(4, append(nodes, joiner)...)
		marked := func() bool {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			st, err := nodes[0].g.mem.current().State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.CaughtUp[4]
		}
		time.Sleep(asyncTimeout + 10*time.Second)
		if marked() {
			t.Fatal("the joiner's caught-up mark landed while etcd refused it")
		}
		refuse.Store(false)
		deadline := time.Now().Add(time.Minute)
		for !marked() {
			if time.Now().After(deadline) {
				t.Fatal("the joiner's caught-up mark was not written again")
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.check()
	})
}

// TestReportWrites follows the writes of a member's final reports:
// whether its latest report is lost (no write of it, or of a later
// one, under way or acknowledged).
func TestReportWrites(t *testing.T) {
	self := membership.Member{ID: 1, Incarnation: 7}
	rep := func(epoch, seq uint64) membership.Report {
		return membership.Report{Epoch: epoch, Member: self, Seq: seq}
	}
	refused := errors.New("refused")
	var w reportWrites
	steps := []struct {
		op   string // start, ok (done, made), fail (done, given up)
		rep  membership.Report
		lost membership.Report // asked of lost after the step
		want bool
	}{
		{"start", rep(3, 1), rep(3, 1), false},
		{"fail", rep(3, 1), rep(3, 1), true},
		{"start", rep(3, 2), rep(3, 2), false},
		{"start", rep(3, 3), rep(3, 3), false},
		{"ok", rep(3, 3), rep(3, 3), false},
		{"fail", rep(3, 2), rep(3, 3), false},  // an earlier write failing does not matter
		{"start", rep(3, 4), rep(3, 4), false}, // write 3 landed, write 4 is under way
		{"fail", rep(3, 4), rep(3, 4), true},
		{"start", rep(4, 1), rep(4, 1), false}, // the next view's report
		{"fail", rep(3, 5), rep(4, 1), false},  // the old view's writes do not count
		{"ok", rep(4, 1), rep(4, 1), false},
		{"ok", rep(4, 1), rep(5, 1), true}, // a report never written is lost
	}
	for i, s := range steps {
		switch s.op {
		case "start":
			w.start(s.rep)
		case "ok":
			w.done(s.rep, nil)
		case "fail":
			w.done(s.rep, refused)
		}
		if got := w.lost(s.lost); got != s.want {
			t.Errorf("step %d (%s seq %d of view %d): lost(seq %d of view %d) = %v, want %v",
				i, s.op, s.rep.Seq, s.rep.Epoch, s.lost.Seq, s.lost.Epoch, got, s.want)
		}
	}
}
