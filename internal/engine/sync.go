package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/ordering"
)

// viewReadTimeout bounds one read of the current view for Syncs
// (viewReads): a Sync that waits longer fails with its context anyway,
// and the next ones need a read of their own.
const viewReadTimeout = 10 * time.Second

// syncResult is the loop's answer to a Sync: the index of the last
// message handed to the application, in view epoch.
type syncResult struct {
	index, epoch uint64
	err          error
}

// syncWaiter is one Sync waiting in the loop, in three steps, all within
// one view this member takes part in, not wedged, of epoch minEpoch or
// later:
//
//   - armed: ts is this member's receive frontier, at or after the call.
//     Every message that any member delivered normally in this view
//     before the call is stamped below it: atomic delivery of a message
//     needs every member's announced frontier above its stamp, and a
//     frontier only grows.
//   - passed: this member's delivery barrier is past ts, and its core has
//     delivered the messages below it, up to index target.
//   - the application has been handed up to target: the loop answers.
//
// A view change starts the waiter over in the next view. What the loop
// cannot know is whether the others have already gone on without it, and
// delivered the view's cut: Sync asks etcd (Group.confirmView).
type syncWaiter struct {
	minEpoch uint64
	armed    bool
	ts       uint64
	passed   bool
	target   uint64
	reply    chan<- syncResult
	// gone is closed once the caller stopped waiting (its context ended):
	// the waiter is dropped.
	gone <-chan struct{}
}

// Sync waits until this member has handed the application every message
// that any member delivered before the call, and returns the index of the
// last message handed then (convoy.Group.Sync documents it).
func (g *Group) Sync(ctx context.Context) (uint64, error) {
	if g.cfg.Mode != Atomic {
		return 0, fmt.Errorf("convoy: Sync in %v mode: %w", g.cfg.Mode, errors.ErrUnsupported)
	}
	var minEpoch uint64
	for {
		res, err := g.syncLoop(ctx, minEpoch)
		if err != nil {
			return 0, err
		}
		next, err := g.confirmView(ctx, res.epoch)
		if err != nil {
			return 0, err
		}
		if next == 0 {
			return res.index, nil
		}
		// The group has gone on to view next: what it delivered at the
		// change, this member delivers once it is in that view too (or
		// learns it was left out).
		minEpoch = next
	}
}

// syncLoop waits for the loop to pass a Sync barrier in a view of epoch
// minEpoch or later.
func (g *Group) syncLoop(ctx context.Context, minEpoch uint64) (syncResult, error) {
	reply := make(chan syncResult, 1)
	ev := event{kind: evSync, syncReply: reply, syncGone: ctx.Done(), imm: minEpoch}
	select {
	case g.events <- ev:
	case <-g.stop:
		return syncResult{}, ErrClosed
	case <-g.ctx.Done():
		return syncResult{}, g.ended()
	case <-ctx.Done():
		return syncResult{}, ctx.Err()
	}
	select {
	case res := <-reply:
		return res, res.err
	case <-g.stop:
		return syncResult{}, ErrClosed
	case <-g.ctx.Done():
		return syncResult{}, g.ended()
	case <-ctx.Done():
		return syncResult{}, ctx.Err()
	}
}

// confirmView reads the current view from etcd, after a Sync barrier
// passed in view epoch: if it is still epoch, no view change has
// delivered a cut of epoch anywhere, so the barrier holds, and it returns
// 0; otherwise it returns the epoch of the view the group is in. A group
// with fixed membership has no other view.
func (g *Group) confirmView(ctx context.Context, epoch uint64) (uint64, error) {
	if g.mem == nil {
		return 0, nil
	}
	cur, err := g.currentEpoch(ctx)
	if err != nil {
		return 0, fmt.Errorf("convoy: sync: %w", err)
	}
	if cur <= epoch {
		return 0, nil
	}
	return cur, nil
}

// viewReads shares etcd reads of the current view among concurrent
// Syncs: at most one read is in flight, and the Syncs that ask meanwhile
// share the next one, which starts after they asked — so each Sync's
// answer comes from a read that began after its barrier passed, as its
// confirmation needs.
type viewReads struct {
	sync.Mutex
	// next is the read the Syncs asking now wait for (nil: none asked
	// since the last one started); running says a goroutine reads.
	next    *viewRead
	running bool
	// closed refuses new reads once the group closes, which then waits
	// for wg.
	closed bool
	wg     sync.WaitGroup
}

// viewRead is one read of the current view, shared by the Syncs that
// asked before it started.
type viewRead struct {
	done chan struct{}
	// epoch and err are set before done is closed.
	epoch uint64
	err   error
}

// currentEpoch returns the epoch of the group's current view, read from
// etcd after the call.
func (g *Group) currentEpoch(ctx context.Context) (uint64, error) {
	r := &g.viewReads
	r.Lock()
	if r.closed {
		r.Unlock()
		return 0, ErrClosed
	}
	b := r.next
	if b == nil {
		b = &viewRead{done: make(chan struct{})}
		r.next = b
		if !r.running {
			r.running = true
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				g.readViews()
			}()
		}
	}
	r.Unlock()
	select {
	case <-b.done:
		return b.epoch, b.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-g.stop:
		return 0, ErrClosed
	}
}

// closeViewReads waits for the reads in flight, after Close ended the
// group's context, and refuses later ones.
func (g *Group) closeViewReads() {
	g.viewReads.Lock()
	g.viewReads.closed = true
	g.viewReads.Unlock()
	g.viewReads.wg.Wait()
}

// readViews reads the current view for each batch of Syncs that asked,
// until none waits.
func (g *Group) readViews() {
	r := &g.viewReads
	for {
		r.Lock()
		b := r.next
		r.next = nil
		if b == nil {
			r.running = false
			r.Unlock()
			return
		}
		r.Unlock()
		if g.cfg.test.onViewRead != nil {
			g.cfg.test.onViewRead()
		}
		if s := g.mem.current(); s == nil {
			b.err = ErrNotMember
		} else {
			ctx, cancel := context.WithTimeout(g.ctx, viewReadTimeout)
			cur, err := s.Current(ctx)
			cancel()
			b.epoch, b.err = cur.Epoch, err
		}
		close(b.done)
	}
}

// ended is the error of a group whose context ended.
func (g *Group) ended() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.errDoneLocked(); err != nil {
		return err
	}
	return ErrClosed
}

// startSync begins a Sync in the loop, for a view of epoch minEpoch or
// later.
func (r *runner) startSync(minEpoch uint64, reply chan<- syncResult, gone <-chan struct{}) {
	if r.v == nil || r.vs != nil && !r.vs.Phase().InView() {
		reply <- syncResult{err: ErrNotMember}
		return
	}
	r.syncs = append(r.syncs, syncWaiter{minEpoch: minEpoch, reply: reply, gone: gone})
}

// checkSyncs moves the waiting Syncs on (see syncWaiter). The loop calls
// it once it has carried out what the ordering core had ready, so that
// the core's deliveries below its barrier are all out.
func (r *runner) checkSyncs() {
	if len(r.syncs) == 0 || r.v == nil || r.ending() || r.v.core.Wedged() || r.v.core.HasReady() {
		return
	}
	epoch := r.v.rec.Epoch
	barrier := uint64(r.v.core.Barrier())
	var want uint64 // the highest stamp a waiting Sync's barrier has not passed
	k := 0
	for _, w := range r.syncs {
		select {
		case <-w.gone:
			continue // nobody waits for it any more
		default:
		}
		if epoch >= w.minEpoch {
			if !w.armed {
				w.armed, w.ts = true, uint64(r.v.core.Frontier())
			}
			if !w.passed && barrier >= w.ts {
				w.passed, w.target = true, r.v.core.Index()
			}
			if !w.passed {
				want = max(want, w.ts)
			}
			if w.passed && r.applied >= w.target && !r.holding() {
				w.reply <- syncResult{index: r.applied, epoch: epoch}
				continue
			}
		}
		r.syncs[k] = w
		k++
	}
	clear(r.syncs[k:])
	r.syncs = r.syncs[:k]
	if want > 0 {
		// The others beacon for it at once: the barriers pass it in
		// about two message delays rather than at the idle pace. One ask
		// covers every lower stamp, and the core sends nothing for a
		// stamp it has asked for already.
		r.v.core.Want(ordering.Timestamp(want))
	}
}

// syncsAtView starts the waiting Syncs over in a view this member has
// just installed.
func (r *runner) syncsAtView() {
	for i := range r.syncs {
		r.syncs[i].armed, r.syncs[i].passed = false, false
	}
}

// endSyncs ends every waiting Sync with err.
func (r *runner) endSyncs(err error) {
	for _, w := range r.syncs {
		w.reply <- syncResult{err: err}
	}
	r.syncs = nil
}
