package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A power cut stops every member of a simulated durable group at one
// instant in the middle of its disk writes, as a power failure of the
// whole group would. A crash-all crashes the members at an instant the
// simulation picks, when every goroutine waits: an fsync takes no time on
// the bubble's clock, so every log then holds only synced writes, and
// every member's log holds the same entries. A power cut instead strikes
// when a chosen member starts an fsync of its write-ahead log: every disk
// keeps what it synced and a random share of the rest, the member whose
// fsync was cut all of its writes, and no fsync anywhere
// completes until every member is dead, so nothing the members learn
// afterwards was made durable after the cut. The members then restart on
// the disks as the cut left them, the chosen one last, once the others
// had the time to restart the group without it: its log may hold entries
// beyond the others', which it must not hand to its application
// (plant.ReplayBeyondDurable).

// powerCut is a power cut under way: armed until the chosen member's
// next fsync of its write-ahead log, which takes the disks.
type powerCut struct {
	member NodeID
	fired  chan struct{} // closed once the disks are taken
	thaw   chan struct{} // closed once every member is dead
	taken  bool
	disks  map[NodeID]*vfs.MemFS // every disk as the cut left it
}

// powerSwitch is the errorfs injector on member id's disk: it lets the
// power cut strike in the member's fsync, and holds every fsync while a
// cut is under way. It injects no error.
type powerSwitch struct {
	r    *simRun
	id   NodeID
	disk *vfs.MemFS
}

func (p powerSwitch) String() string { return fmt.Sprintf("power switch of member %d", p.id) }

func (p powerSwitch) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	r := p.r
	r.mu.Lock()
	cut := r.cut
	if cut == nil {
		r.mu.Unlock()
		return nil
	}
	// Only the running incarnation of the member, whose disk is the
	// current one, cuts the power.
	if !cut.taken && p.id == cut.member && r.disks[p.id] == p.disk && strings.HasSuffix(op.Path, ".log") {
		cut.taken = true
		cut.disks = make(map[NodeID]*vfs.MemFS, len(r.disks))
		for _, id := range slices.Sorted(maps.Keys(r.disks)) {
			keep := r.rng.IntN(101)
			if id == cut.member {
				keep = 100 // the writes this fsync was to make durable reached the disk
			}
			cut.disks[id] = r.disks[id].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: r.rng})
		}
		close(cut.fired)
	}
	taken := cut.taken
	r.mu.Unlock()
	if taken {
		<-cut.thaw
	}
	return nil
}

// powerCut carries out fault f, a power cut struck by the member f names,
// in a group of n: if that member starts no fsync within a second, it is
// a crash of every member instead.
func (r *simRun) powerCut(f simFault, n int, undo *sync.WaitGroup) {
	cut := &powerCut{member: f.who[0][0], fired: make(chan struct{}), thaw: make(chan struct{})}
	r.mu.Lock()
	r.cut = cut
	r.mu.Unlock()
	select {
	case <-cut.fired:
	case <-time.After(time.Second):
	case <-r.ended:
	}
	c := r.c
	r.mu.Lock()
	if !cut.taken {
		r.cut = nil
		r.mu.Unlock()
		r.t.Logf("%v: member %d started no fsync: every member crashes instead", f, cut.member)
		live := c.live()
		for _, nd := range live {
			r.crash(nd.id, false)
		}
		r.restartAll(live, f.lasts, 0, n, undo)
		return
	}
	live := c.live()
	for _, nd := range live {
		r.dead[nd] = true
	}
	r.mu.Unlock()
	for _, nd := range live {
		c.crashLinks(nd.id)
	}
	r.mu.Lock()
	for _, nd := range live {
		r.disks[nd.id] = cut.disks[nd.id]
	}
	r.cut = nil
	r.mu.Unlock()
	close(cut.thaw)
	for _, nd := range live {
		c.crash(nd.id)
	}
	r.restartAll(live, f.lasts, cut.member, n, undo)
}

// restartAll restarts the members of live, crashed, after d, like a
// process supervisor, and last, if it is one of them, once the others
// are back and d more has passed.
func (r *simRun) restartAll(live []*vsNode, d time.Duration, last NodeID, n int, undo *sync.WaitGroup) {
	undo.Add(1)
	go func() {
		defer undo.Done()
		if !r.wait(d) {
			return
		}
		var wg sync.WaitGroup
		late := false
		for _, nd := range live {
			if nd.id == last {
				late = true
				continue
			}
			wg.Go(func() { r.restart(nd.id, n) })
		}
		wg.Wait()
		if late && r.wait(d) {
			r.restart(last, n)
		}
	}()
}
