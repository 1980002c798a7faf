package engine

import (
	"errors"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// refusingState is a member's state whose snapshots fail while refuse is
// set; called receives a value (if it has room) at each Snapshot call.
type refusingState struct {
	StateMachine
	refuse *atomic.Bool
	called chan struct{}
}

func (s refusingState) Snapshot(w io.Writer, part, of int) error {
	select {
	case s.called <- struct{}{}:
	default:
	}
	if s.refuse.Load() {
		return errors.New("snapshot refused by the test")
	}
	return s.StateMachine.Snapshot(w, part, of)
}

// TestDurableJoinerOvertaken: in a durable group, a view change overtakes
// a joiner's state transfer — the donors of the view that admitted it
// fail their snapshots, and another member crashes before the joiner has
// its state — so the joiner is a joiner again in the next view. Meanwhile
// the group's messages go on becoming durable and reaching the others'
// applications (they once waited until the joiner had its state: its log
// took nothing until then). In the next view, the donors snapshot and the
// joiner gets its state, without being excluded. (That view's durable
// barrier once counted the joiner as persisted where its log ended, at
// the first view's start: the previous view's messages never became
// durable, the donors, which snapshot only once they are, never served
// it, and each further view repeated it.)
func TestDurableJoinerOvertaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t)
		c.openTimeout = 2 * time.Minute
		disks := map[NodeID]*vfs.MemFS{1: vfs.NewMem(), 2: vfs.NewMem(), 3: vfs.NewMem(), 4: vfs.NewMem()}
		var refuse atomic.Bool
		called := make(chan struct{}, 1)
		opts := func(cfg *Config) {
			cfg.BeaconInterval = 5 * time.Millisecond
			cfg.Durable = &DurableConfig{Dir: "db", FS: disks[cfg.Self]}
			// The joiner waits for its donors for longer than the test
			// waits for it: it must get its state from the donors of the
			// next view, not by giving up and joining again.
			cfg.TransferStall = 10 * time.Minute
			cfg.State = refusingState{cfg.State, &refuse, called}
		}
		nodes := c.openAll(4, opts)
		stop := make(chan struct{})
		wg := c.load(stop, nodes[:3]...)
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		}()
		c.waitCount(nodes[0], 100)

		// Member 4 comes back with an empty disk: it joins and needs the
		// state by transfer, which the donors refuse.
		c.crash(4)
		disks[4] = vfs.NewMem()
		c.waitView(2, 3, nodes[:3]...)
		refuse.Store(true)
		type opened struct {
			n   *vsNode
			err error
		}
		res := make(chan opened, 1)
		go func() {
			n, err := c.open(4, 1, opts)
			res <- opened{n, err}
		}()
		select {
		case <-called:
		case <-time.After(time.Minute):
			t.Fatal("no donor took a snapshot for the joiner")
		}
		// The group's durable delivery goes on while the joiner waits for
		// its state: the joiner's log takes the view's messages at once,
		// only its application waits. Then the view changes before the
		// joiner has its state.
		c.waitCount(nodes[0], nodes[0].delivered()+200)
		c.crash(3)
		refuse.Store(false)
		r := <-res
		if r.err != nil {
			t.Fatalf("the joiner's Open: %v", r.err)
		}
		all := []*vsNode{nodes[0], nodes[1], r.n}
		c.waitMembers(3, all...)
		c.waitCount(r.n, 50)
		close(stop)
		wg.Wait()
		c.waitSameIndex(all...)
		c.check()
		sameState(t, all...)

		// It was admitted in an earlier view than the first it was shown.
		var first, admitted uint64
		r.n.mu.Lock()
		for _, e := range r.n.events {
			if e.view != nil && first == 0 {
				first = e.view.Epoch
			}
		}
		r.n.mu.Unlock()
		nodes[0].mu.Lock()
		for _, e := range nodes[0].events {
			if v := e.view; v != nil && admitted == 0 && v.Epoch > 2 && slices.Contains(v.Joined, 4) {
				admitted = v.Epoch
			}
		}
		nodes[0].mu.Unlock()
		if k := r.n.exclusions(); k != 0 {
			t.Errorf("the joiner was excluded %d times", k)
		}
		if admitted == 0 || admitted >= first {
			t.Errorf("the joiner was admitted in view %d and first shown view %d: no view change overtook its transfer", admitted, first)
		}

	})
}
