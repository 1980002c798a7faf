package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// persistedSignal is the kind, in a control signal's top three bits, of a
// member's persisted index (the detector's kinds are 1 to 3): the other
// 61 bits are the highest delivery index it has on disk.
const persistedSignal = 4

// openLog opens the durable log, if configured.
func (g *Group) openLog(ctx context.Context) error {
	d := g.cfg.Durable
	if d == nil {
		return nil
	}
	var l durableLog
	var err error
	if g.cfg.test.openDisk != nil {
		l, err = g.cfg.test.openDisk(ctx)
	} else {
		l, err = persistence.Open(ctx, persistence.Options{Dir: d.Dir, FS: d.FS, Logger: g.cfg.Logger, MeterProvider: g.cfg.MeterProvider})
	}
	if err != nil {
		return fmt.Errorf("convoy: open the durable log: %w", err)
	}
	g.useLog(l)
	return nil
}

// useLog makes l the durable log; the loop hears of each sync through
// g.synced.
func (g *Group) useLog(l durableLog) {
	g.disk, g.synced = l, make(chan struct{}, 1)
	l.OnSynced(func(uint64) {
		select {
		case g.synced <- struct{}{}:
		default:
		}
	})
}

// durableBarrier returns the durable barrier of view rec. A joiner gets
// the state as of the view's start by transfer, from donors whose logs
// hold it, and a restart from the logs counts only members that caught
// up: up to the start, a joiner counts as persisted. Waiting for its own
// announcement instead would let a view change that overtakes a transfer
// stall the group: the joiner's log ends where the view it joined
// started, the messages of that view would never be durable in the next,
// and the next view's donors, which snapshot only once the messages
// before its start are durable, would never serve it (nor any joiner
// with it). It also spares a joiner's first announcement from being the
// only one.
func durableBarrier(rec *membership.View) *barrier.Durable {
	d := barrier.NewDurable(len(rec.Members))
	for _, id := range rec.Joining {
		if r := rec.Rank(id); r >= 0 {
			_ = d.Announce(r, rec.Start)
		}
	}
	return d
}

// logDelivery writes a delivery to the durable log and holds it until it
// is durable everywhere (a topic's: at every subscriber of the topic). A
// topic delivery follows group index after; pos is its position if it
// is in the log already (logged while held), else 0.
func (r *runner) logDelivery(d Delivery, after, pos uint64) {
	if d.Topic != "" {
		if pos == 0 {
			pos = r.appendTopic(d, after)
		}
		r.durq = append(r.durq, durItem{d: d, pos: pos, after: after})
		return
	}
	r.appendLog(d)
	r.durq = append(r.durq, durItem{d: d})
}

// appendLog writes a delivery to the durable log.
func (r *runner) appendLog(d Delivery) {
	g := r.g
	err := g.disk.Append(persistence.Entry{Index: d.Index, Epoch: d.Epoch, Sender: uint64(d.Sender), Seq: d.Seq, Payload: d.Payload})
	if err != nil && r.diskErr == nil {
		// A member that cannot persist stops acknowledging: its persisted
		// index stays put, and the loop ends (the group fails with the
		// error), so the others soon exclude it as silent rather than
		// wait for it.
		g.log.Error("durable log", "index", d.Index, "err", err)
		r.diskErr = err
	}
}

// durItem is a delivery waiting to be durable everywhere, or a view
// waiting behind such deliveries (views reach the application in order
// with the messages). In the held queue, logged says the delivery is in
// the durable log already. A topic delivery follows group index after
// in this member's order, and pos is its position among the log's topic
// entries (once logged).
type durItem struct {
	d          Delivery
	v          *View
	logged     bool
	after, pos uint64
}

// announcePersisted tells every member of the view how far this member's
// log is synced.
func (r *runner) announcePersisted() {
	g, v := r.g, r.v
	idx := g.disk.Synced()
	g.msgs.synced(idx)
	if v.dur != nil {
		_ = v.dur.Announce(v.self, max(idx, v.dur.Persisted(v.self)))
	}
	imm := persistedImm(idx)
	for rank := range v.ids {
		if rank != v.self {
			_ = v.net.signal(rank, imm)
		}
	}
	r.announceTopics()
	r.flushDurable()
}

// durableSignal reports whether control signal imm is durable
// delivery's (a persisted index, of the group or of a topic) rather than
// the detector's.
func durableSignal(imm uint64) bool {
	k := imm >> 61
	return k == persistedSignal || k == topicSignal
}

// persistedImm encodes a persisted index as a control signal.
func persistedImm(idx uint64) uint64 { return uint64(persistedSignal)<<61 | idx&(1<<61-1) }

// persisted applies a member's persisted index, or its persisted index
// on a topic.
func (r *runner) persisted(from int, imm uint64) {
	if imm>>61 == topicSignal {
		r.topicPersistedFrom(from, imm)
		return
	}
	idx := imm & (1<<61 - 1)
	r.v.announced[from] = true
	if err := r.v.dur.Announce(from, max(idx, r.v.dur.Persisted(from))); err != nil {
		r.g.log.Warn("persisted index", "from", r.v.ids[from], "err", err)
		return
	}
	r.flushDurable()
}

// checkLag suspects the members whose persisted index trails too far.
func (r *runner) checkLag() {
	g, v := r.g, r.v
	if !g.dynamic() || r.ending() {
		return
	}
	bound := g.cfg.Durable.MaxLag
	for _, rank := range v.dur.Lagging(bound) {
		if rank == v.self || v.lagging[rank] || !v.announced[rank] {
			continue // (a member not heard from yet in this view is not behind)
		}
		if v.lagging == nil {
			v.lagging = make(map[int]bool)
		}
		v.lagging[rank] = true
		reason := fmt.Sprintf("persisted index %d lags by more than %d", v.dur.Persisted(rank), bound)
		g.log.Warn("member lags on disk", "peer", v.ids[rank], "epoch", v.rec.Epoch, "reason", reason)
		r.suspect(v.ids[rank], reason)
	}
}

// flushDurable hands out the deliveries every member has on disk.
func (r *runner) flushDurable() {
	if r.v == nil || r.v.dur == nil {
		return
	}
	b := r.v.dur.Barrier()
	r.g.durableUpTo(b)
	r.checkLag()
	if r.stateBusy() {
		return // the application's state must hold still meanwhile
	}
	limit := b
	if r.pendingDonate != nil {
		// Joiners get the state as of the view's start: hand out the
		// previous view's messages, then snapshot, then go on.
		limit = min(limit, r.v.rec.Start)
	}
	n := 0
	for ; n < len(r.durq); n++ {
		it := r.durq[n]
		if it.v != nil {
			r.onViewNow(*it.v)
			continue
		}
		if it.d.Topic != "" {
			if !r.topicDurable(it) {
				break
			}
		} else if it.d.Index > limit {
			break
		}
		r.handNow(it.d, it.d.Sender == r.g.cfg.Self)
	}
	if n > 0 {
		clear(r.durq[:n])
		r.durq = r.durq[n:]
	}
	if v := r.pendingDonate; v != nil && !r.durableBefore(v.rec.Start) {
		r.pendingDonate = nil
		r.donate(v)
		if r.pendingDonate == nil && !r.stateBusy() {
			// No snapshot holds the state (none is taken, or it reads a
			// checkpoint): what follows the view's start goes on now.
			r.flushDurable()
		}
	}
}

// durableBefore reports whether deliveries at or below index still wait
// in the durable queue.
func (r *runner) durableBefore(index uint64) bool {
	for _, it := range r.durq {
		switch {
		case it.v != nil:
		case it.d.Topic != "":
			return it.after < index
		default:
			return it.d.Index <= index
		}
	}
	return false
}

// ErrNotDurable is returned by WaitDurable in a group without durable
// delivery.
var ErrNotDurable = errors.New("convoy: delivery is not durable")

// WaitDurable waits until every message up to global index index is on the
// disk of every member of the view (every member has announced a synced
// index at least that high): it then survives the crash of every member.
// It returns ErrNotDurable without Config.Durable, and the group's error
// if it ends first.
func (g *Group) WaitDurable(ctx context.Context, index uint64) error {
	if g.disk == nil {
		return ErrNotDurable
	}
	g.mu.Lock()
	if g.mu.durable >= index {
		g.mu.Unlock()
		return nil
	}
	if err := g.errDoneLocked(); err != nil {
		g.mu.Unlock()
		return err
	}
	ch := make(chan struct{})
	g.mu.durWaiters = append(g.mu.durWaiters, durWaiter{index: index, done: ch})
	g.mu.Unlock()
	select {
	case <-ch:
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.mu.durable >= index {
			return nil
		}
		return g.errDoneLocked()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// durWaiter waits in WaitDurable.
type durWaiter struct {
	index uint64
	done  chan struct{}
}

// durableUpTo records that everything up to b is durable everywhere and
// wakes the waiters it satisfies.
func (g *Group) durableUpTo(b uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b <= g.mu.durable {
		return
	}
	g.mu.durable = b
	g.disk.SetDurable(b)
	keep := g.mu.durWaiters[:0]
	for _, w := range g.mu.durWaiters {
		if w.index <= b {
			close(w.done)
		} else {
			keep = append(keep, w)
		}
	}
	g.mu.durWaiters = keep
}

// wakeDurableLocked releases every WaitDurable when the group ends.
func (g *Group) wakeDurableLocked() {
	for _, w := range g.mu.durWaiters {
		close(w.done)
	}
	g.mu.durWaiters = nil
}

// durableLog is what the runtime needs of a durable log (Group.disk):
// exactly the methods of *persistence.Log it calls, with their contract
// (see persistence.Log for each). Production runs *persistence.Log; a
// whole-group simulation can run internal/memlog.Log instead, whose syncs
// and crashes it drives.
//
// The runtime calls these methods from its loop, at Open before the loop
// starts (the replay), from the application's goroutine in Group.Snapshot
// (CreateSnapshot and the writer's methods, TrimBefore), from the
// transport's goroutines as a joiner receives its state (the snapshot
// writer's parts), from the goroutine that installs it (the writer's
// Reader, Commit and Abort, First, TrimBefore), from the goroutine that
// serves a suffix transfer (WaitSynced, Scan) and from Group.Close
// (Close), so an implementation must be safe for concurrent use. The
// synchronous writes (PutView, TrimBefore, InstallSnapshot, a snapshot's
// Commit) and WaitSynced return only once their write is synced: the
// caller, the loop included, waits for the disk in them. Errors wrap
// persistence's sentinel errors (persistence.ErrNotFound,
// persistence.ErrFailed, …), which callers compare with errors.Is.
type durableLog interface {
	// Append queues entries in final order, without waiting for their
	// sync. It may keep their payloads until they are synced: nobody
	// modifies a delivery's payload.
	Append(es ...persistence.Entry) error
	// Synced is the highest index synced; OnSynced's fn runs after each
	// sync, and WaitSynced waits until Synced reaches index.
	Synced() uint64
	OnSynced(fn func(index uint64))
	WaitSynced(ctx context.Context, index uint64) error
	// First and Last bound the entries the log holds.
	First() uint64
	Last() uint64
	// Err and Failed report a failed write or sync, after which the log
	// acknowledges nothing more.
	Err() error
	Failed() <-chan struct{}
	// Get and Scan read synced entries.
	Get(index uint64) (persistence.Entry, error)
	Scan(ctx context.Context, from, to uint64, fn func(persistence.Entry) error) error
	// PutView and Views write and read the view records.
	PutView(ctx context.Context, v membership.View) error
	Views(ctx context.Context) ([]membership.View, error)
	// TrimBefore deletes the entries below index.
	TrimBefore(ctx context.Context, index uint64) error
	// CreateSnapshot writes a snapshot of the state, in parts, and
	// ReadSnapshot reads the snapshot back; Snapshot reads its record
	// only; InstallSnapshot replaces the log's contents with a snapshot.
	CreateSnapshot(ctx context.Context, index uint64, parts int) (persistence.SnapshotWriter, error)
	ReadSnapshot() (persistence.SnapshotReader, error)
	Snapshot() (index uint64, meta []byte, err error)
	InstallSnapshot(ctx context.Context, index uint64, meta []byte) error
	// SetDurable raises the durable mark, Durable reads it.
	SetDurable(index uint64)
	Durable() uint64
	// AppendTopic queues topic entries, numbered apart from the entries;
	// TopicSynced, FirstTopic and LastTopic are their Synced, First and
	// Last; ScanTopics reads the synced ones; TrimTopics deletes a
	// prefix of them with the next sync.
	AppendTopic(es ...persistence.TopicEntry) error
	TopicSynced() uint64
	FirstTopic() uint64
	LastTopic() uint64
	ScanTopics(ctx context.Context, from uint64, fn func(persistence.TopicEntry) error) error
	TrimTopics(through uint64) error
	// Close writes what was queued and closes the log.
	Close() error
}

var _ durableLog = (*persistence.Log)(nil)
