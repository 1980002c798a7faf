package memlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// ErrInjected is the cause of the failure FailNextSync plants when it is
// given none.
var ErrInjected = errors.New("memlog: injected sync failure")

// Log is an in-memory durable log of delivered messages, view records and
// member metadata, with persistence.Log's contract (see the package
// documentation for how it syncs and crashes). Its methods are safe for
// concurrent use. Errors wrap persistence's sentinel errors
// (persistence.ErrOutOfOrder, persistence.ErrNotFound, …).
type Log struct {
	// failed is closed when the log fails, as mu.err is set.
	failed chan struct{}
	// cbMu serialises the calls of the OnSynced function.
	cbMu sync.Mutex

	mu struct {
		sync.Mutex
		// The log holds [first, last]; it is empty iff first == last+1.
		// Invariant: first ≤ last+1 (but for an index near 1<<64, as
		// with persistence.Log).
		first, last uint64
		// synced is the highest index synced: last after every
		// successful sync.
		synced uint64
		// durable is the durable mark (SetDurable); img.mark is the one
		// last written.
		durable uint64
		// firstTopic, lastTopic and topicSynced are the positions of the
		// first topic entry kept, of the last appended and of the last
		// synced.
		firstTopic, lastTopic, topicSynced uint64
		// img is the durable state; pending are the writes not yet
		// synced, oldest first.
		img     image
		pending []write
		// failNext, if set, fails the next sync with something to write.
		failNext error
		// installs counts the InstallSnapshot calls.
		installs uint64
		err      error // non-nil once failed; wraps persistence.ErrFailed
		closed   bool  // closed, or crashed: nothing more is accepted
		onSynced func(index uint64)
		// wake, if non-nil, is closed (and cleared) when synced advances,
		// and on failure and close.
		wake chan struct{}
	}
}

// New returns an empty log: First is 1, Last and Synced are 0.
func New() *Log { return open(image{}) }

// open returns a log holding img, as persistence.Open recovers one:
// Synced is Last, and the durable mark the one written.
func open(img image) *Log {
	l := &Log{failed: make(chan struct{})}
	l.mu.img = img
	l.mu.first, l.mu.last = img.bounds()
	l.mu.synced = l.mu.last
	l.mu.durable = img.mark
	l.mu.firstTopic = 1
	if n := len(img.topics); n > 0 {
		l.mu.firstTopic, l.mu.lastTopic = img.topics[0].Pos, img.topics[n-1].Pos
	}
	l.mu.topicSynced = l.mu.lastTopic
	return l
}

// Append queues entries for writing, in final order: each Index must be
// the last appended plus one; the first may be any index ≥ First if the
// log is empty (fresh, or trimmed past its end). It returns at once,
// without waiting for a sync, and never blocks. Either all of es are
// queued or none. The log keeps copies of the payloads.
//
// Errors: persistence.ErrOutOfOrder, persistence.ErrClosed, or an error
// wrapping persistence.ErrFailed.
func (l *Log) Append(es ...persistence.Entry) error {
	if len(es) == 0 {
		return nil
	}
	ws := make([]write, len(es))
	for i := range es {
		if i > 0 && es[i].Index != es[i-1].Index+1 {
			return fmt.Errorf("%w: entry %d follows %d", persistence.ErrOutOfOrder, es[i].Index, es[i-1].Index)
		}
		ws[i] = write{kind: writeEntry, entry: es[i]}
		ws[i].entry.Payload = clone(es[i].Payload)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptingLocked(); err != nil {
		return err
	}
	idx := es[0].Index
	if empty := l.mu.first == l.mu.last+1; empty {
		if idx < l.mu.first {
			return fmt.Errorf("%w: entry %d is below the log's first index %d", persistence.ErrOutOfOrder, idx, l.mu.first)
		}
		l.mu.first = idx
	} else if idx != l.mu.last+1 {
		return fmt.Errorf("%w: entry %d does not follow the last entry %d", persistence.ErrOutOfOrder, idx, l.mu.last)
	}
	l.mu.last = es[len(es)-1].Index
	l.mu.pending = append(l.mu.pending, ws...)
	return nil
}

// acceptingLocked returns the error new writes get, if any.
// REQUIRES: l.mu.
func (l *Log) acceptingLocked() error {
	if l.mu.err != nil {
		return l.mu.err
	}
	if l.mu.closed {
		return persistence.ErrClosed
	}
	return nil
}

// Sync makes every write so far durable, as one fsync of a disk: Synced
// becomes Last and, if there was anything to write, the OnSynced function
// runs before Sync returns. It fails the log instead if FailNextSync
// planted a failure. Errors: persistence.ErrClosed, or an error wrapping
// persistence.ErrFailed.
func (l *Log) Sync() error {
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	wrote, err := l.syncLocked()
	l.mu.Unlock()
	l.notify(wrote)
	return err
}

// syncLocked applies every pending write to the durable state, or fails
// the log if a failure is planted, and reports whether it wrote anything
// (the caller then calls notify, without l.mu). REQUIRES: l.mu.
func (l *Log) syncLocked() (wrote bool, err error) {
	if l.mu.err != nil {
		return false, l.mu.err
	}
	if len(l.mu.pending) == 0 {
		return false, nil
	}
	if cause := l.mu.failNext; cause != nil {
		l.mu.failNext = nil
		l.failLocked(cause)
		return false, l.mu.err
	}
	for i := range l.mu.pending {
		l.mu.img.apply(&l.mu.pending[i])
	}
	clear(l.mu.pending)
	l.mu.pending = l.mu.pending[:0]
	l.mu.synced = l.mu.last
	l.mu.topicSynced = l.mu.lastTopic
	l.wakeLocked()
	return true, nil
}

// commitLocked queues w, which its caller waits for, and syncs the log.
// Like persistence.Log, it writes the durable mark with it if the mark
// moved since last written. REQUIRES: l.mu, and the log accepting writes.
func (l *Log) commitLocked(w write) (wrote bool, err error) {
	if !w.setMark && l.mu.durable != l.mu.img.mark {
		w.setMark, w.mark = true, l.mu.durable
	}
	l.mu.pending = append(l.mu.pending, w)
	return l.syncLocked()
}

// notify runs the OnSynced function after a sync that wrote something.
// It must be called without l.mu.
func (l *Log) notify(wrote bool) {
	if !wrote {
		return
	}
	l.cbMu.Lock()
	defer l.cbMu.Unlock()
	l.mu.Lock()
	fn, synced := l.mu.onSynced, l.mu.synced
	l.mu.Unlock()
	if fn != nil {
		fn(synced)
	}
}

// wakeLocked wakes the waiters of WaitSynced. REQUIRES: l.mu.
func (l *Log) wakeLocked() {
	if l.mu.wake != nil {
		close(l.mu.wake)
		l.mu.wake = nil
	}
}

// failLocked makes the log failed with cause: Synced never advances
// again, and every waiter is woken. REQUIRES: l.mu, and the log not
// failed.
func (l *Log) failLocked(cause error) {
	l.mu.err = fmt.Errorf("%w: %w", persistence.ErrFailed, cause)
	close(l.failed)
	l.wakeLocked()
}

// FailNextSync plants a failed fsync: the next sync that has anything to
// write (by Sync, a synchronous write, WaitSynced or Close) fails with
// cause (ErrInjected if nil) and writes nothing. The log then fails for
// good, as persistence.Log does: Synced stays where it was, Err and
// Failed report the failure, and every later write and WaitSynced return
// an error wrapping persistence.ErrFailed and cause. A second call before
// that sync replaces the cause; a call on a failed or closed log has no
// effect.
func (l *Log) FailNextSync(cause error) {
	if cause == nil {
		cause = ErrInjected
	}
	l.mu.Lock()
	l.mu.failNext = cause
	l.mu.Unlock()
}

// Unsynced returns how many writes wait for a sync, each appended entry
// counting as one: when it is 0, Sync has nothing to do.
func (l *Log) Unsynced() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.pending)
}

// Synced returns the highest index synced: every entry up to it survives
// a crash. Only InstallSnapshot lowers it.
func (l *Log) Synced() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.synced
}

// WaitSynced waits until Synced() ≥ index. If the log holds index, it
// syncs the log at once (see Sync) rather than wait; otherwise it waits
// until another goroutine appends and syncs index. Errors: ctx's (only
// while it waits), persistence.ErrClosed, or an error wrapping
// persistence.ErrFailed.
func (l *Log) WaitSynced(ctx context.Context, index uint64) error {
	for {
		l.mu.Lock()
		if l.mu.synced >= index {
			l.mu.Unlock()
			return nil
		}
		if err := l.acceptingLocked(); err != nil {
			l.mu.Unlock()
			return err
		}
		if index <= l.mu.last && len(l.mu.pending) > 0 {
			wrote, err := l.syncLocked()
			l.mu.Unlock()
			l.notify(wrote)
			if err != nil {
				return err
			}
			continue
		}
		if l.mu.wake == nil {
			l.mu.wake = make(chan struct{})
		}
		ch := l.mu.wake
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// OnSynced registers fn (replacing any earlier one; nil removes it) to be
// called with the new Synced value after each sync that wrote anything.
// It runs in the goroutine that synced (the caller of Sync, of a
// synchronous write, of WaitSynced or of Close), before that call
// returns, never concurrently with itself, and must not call the log's
// writing methods or Sync.
func (l *Log) OnSynced(fn func(index uint64)) {
	l.mu.Lock()
	l.mu.onSynced = fn
	l.mu.Unlock()
}

// First returns the first index the log holds (after a trim, the trim
// point). The log is empty when Last() < First().
func (l *Log) First() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.first
}

// Last returns the last index appended, whether synced yet or not. It is
// First()-1 when the log is empty.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.last
}

// Err returns the error that failed the log (wrapping
// persistence.ErrFailed), or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// Failed returns a channel that is closed once the log has failed (Err
// then says why). It stays open if the log closes without failing.
func (l *Log) Failed() <-chan struct{} { return l.failed }

// Get returns the entry at index. Only synced entries are served.
// Errors: persistence.ErrTrimmed (index < First), persistence.ErrNotFound
// (never written, or not yet synced), persistence.ErrClosed.
func (l *Log) Get(index uint64) (persistence.Entry, error) {
	if index == 0 {
		return persistence.Entry{}, fmt.Errorf("%w: entry 0 (indexes start at 1)", persistence.ErrNotFound)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if index < l.mu.first {
		return persistence.Entry{}, fmt.Errorf("%w: entry %d (first is %d)", persistence.ErrTrimmed, index, l.mu.first)
	}
	if index > l.mu.synced {
		return persistence.Entry{}, fmt.Errorf("%w: entry %d (synced up to %d)", persistence.ErrNotFound, index, l.mu.synced)
	}
	if l.mu.closed {
		return persistence.Entry{}, persistence.ErrClosed
	}
	e, ok := entryAt(l.mu.img.entries, index)
	if !ok {
		return persistence.Entry{}, fmt.Errorf("%w: entry %d is missing", persistence.ErrCorrupt, index)
	}
	e.Payload = clone(e.Payload)
	return e, nil
}

// Scan calls fn for every synced entry in [from, to], in index order; a
// to beyond Synced is clamped to it (so Scan(ctx, l.First(),
// math.MaxUint64, fn) reads everything durable). It reads the log as it
// was when called, and stops at fn's first error and returns it. fn may
// call the log. Errors: persistence.ErrTrimmed (from < First), ctx's,
// persistence.ErrClosed.
func (l *Log) Scan(ctx context.Context, from, to uint64, fn func(persistence.Entry) error) error {
	l.mu.Lock()
	first, synced, closed := l.mu.first, l.mu.synced, l.mu.closed
	es := l.mu.img.entries // see image: safe to read without l.mu
	l.mu.Unlock()
	if from < first {
		return fmt.Errorf("%w: entry %d (first is %d)", persistence.ErrTrimmed, from, first)
	}
	to = min(to, synced)
	if from > to {
		return nil
	}
	if closed {
		return persistence.ErrClosed
	}
	for i := from; ; i++ {
		if (i-from)%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e, ok := entryAt(es, i)
		if !ok {
			return fmt.Errorf("%w: entry %d is missing (gap)", persistence.ErrCorrupt, i)
		}
		e.Payload = clone(e.Payload)
		if err := fn(e); err != nil {
			return err
		}
		if i == to {
			return nil
		}
	}
}

// PutView records view record v (with its cut) and syncs the log before
// it returns (see Sync). Putting the same record again is a no-op;
// records are compared as persistence.Log stores them, in JSON. Errors:
// persistence.ErrViewConflict (a different record for v.Epoch exists),
// persistence.ErrClosed, or an error wrapping persistence.ErrFailed.
func (l *Log) PutView(ctx context.Context, v membership.View) error {
	val, err := json.Marshal(&v)
	if err != nil {
		return fmt.Errorf("memlog: encoding view %d: %w", v.Epoch, err)
	}
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return persistence.ErrClosed
	}
	if old, ok := l.mu.img.views[v.Epoch]; ok {
		l.mu.Unlock()
		if bytes.Equal(old, val) {
			return nil
		}
		return fmt.Errorf("%w: epoch %d", persistence.ErrViewConflict, v.Epoch)
	}
	err = l.acceptingLocked()
	var wrote bool
	if err == nil {
		wrote, err = l.commitLocked(write{kind: writeView, epoch: v.Epoch, data: val})
	}
	l.mu.Unlock()
	l.notify(wrote)
	if err != nil {
		return fmt.Errorf("memlog: view %d: %w", v.Epoch, err)
	}
	return nil
}

// Views returns every view record held, in epoch order. Errors: ctx's,
// persistence.ErrClosed.
func (l *Log) Views(ctx context.Context) ([]membership.View, error) {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil, persistence.ErrClosed
	}
	epochs := slices.Sorted(maps.Keys(l.mu.img.views))
	vals := make([][]byte, len(epochs))
	for i, e := range epochs {
		vals[i] = l.mu.img.views[e]
	}
	l.mu.Unlock()
	var vs []membership.View
	for i, val := range vals {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var v membership.View
		if err := json.Unmarshal(val, &v); err != nil {
			return nil, fmt.Errorf("%w: view %d: %v", persistence.ErrCorrupt, epochs[i], err)
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// TrimBefore deletes every entry below index and syncs the log before it
// returns (see Sync); First becomes index (if it was lower). Trimming
// past Last leaves an empty log whose next entry may have any index ≥
// index. Errors: persistence.ErrClosed, or an error wrapping
// persistence.ErrFailed.
func (l *Log) TrimBefore(ctx context.Context, index uint64) error {
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	if index <= l.mu.first {
		l.mu.Unlock()
		return nil
	}
	l.mu.first = index
	if l.mu.last < index-1 {
		l.mu.last = index - 1
	}
	wrote, err := l.commitLocked(write{kind: writeTrim, index: index})
	l.mu.Unlock()
	l.notify(wrote)
	if err != nil {
		return fmt.Errorf("memlog: trim before %d: %w", index, err)
	}
	return nil
}

// SetSnapshot records that the member's last snapshot is at index, with
// metadata meta (copied) and no parts, and syncs the log before it
// returns (see Sync). Errors: persistence.ErrClosed, or an error wrapping
// persistence.ErrFailed.
func (l *Log) SetSnapshot(ctx context.Context, index uint64, meta []byte) error {
	l.mu.Lock()
	err := l.acceptingLocked()
	var wrote bool
	if err == nil {
		wrote, err = l.commitLocked(write{kind: writeSnapshot, index: index, data: clone(meta)})
	}
	l.mu.Unlock()
	l.notify(wrote)
	if err != nil {
		return fmt.Errorf("memlog: snapshot %d: %w", index, err)
	}
	return nil
}

// Snapshot returns the last recorded snapshot index and its metadata.
// Errors: persistence.ErrNotFound (none recorded), persistence.ErrClosed.
func (l *Log) Snapshot() (index uint64, meta []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return 0, nil, fmt.Errorf("memlog: snapshot: %w", persistence.ErrClosed)
	}
	if !l.mu.img.hasSnap {
		return 0, nil, fmt.Errorf("memlog: snapshot: %w", persistence.ErrNotFound)
	}
	return l.mu.img.snapAt, clone(l.mu.img.snapMeta), nil
}

// InstallSnapshot replaces the log's contents with a snapshot at index,
// in one write that a crash keeps whole or not at all, and syncs the log
// before it returns (see Sync): every entry is deleted, the snapshot
// (index, meta) is recorded and the trim point set past it, so that the
// next entry may have any index above index. Synced and the durable mark
// (in memory and as written) become index. Errors:
// persistence.ErrClosed, or an error wrapping persistence.ErrFailed.
func (l *Log) InstallSnapshot(ctx context.Context, index uint64, meta []byte) error {
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.mu.first, l.mu.last = index+1, index
	l.mu.installs++
	wrote, err := l.commitLocked(write{kind: writeInstall, index: index, data: clone(meta), setMark: true, mark: index})
	if err == nil {
		l.mu.synced, l.mu.durable = index, index
	}
	l.mu.Unlock()
	l.notify(wrote)
	if err != nil {
		return fmt.Errorf("memlog: install snapshot %d: %w", index, err)
	}
	return nil
}

// SetDurable records that the entries up to index are durable beyond
// this log (the group's own sense: on every member's disk). The mark
// only grows; it is written with the next synchronous write (PutView,
// SetSnapshot, TrimBefore, InstallSnapshot) and at Close, so after a
// crash Durable may return an earlier mark, never a later one.
func (l *Log) SetDurable(index uint64) {
	l.mu.Lock()
	l.mu.durable = max(l.mu.durable, index)
	l.mu.Unlock()
}

// Durable returns the durable mark (SetDurable), as written before a
// crash and raised since.
func (l *Log) Durable() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.durable
}

// Close syncs what was written (and the durable mark, if it moved),
// unless the log failed, and closes the log: waiters get
// persistence.ErrClosed, and so do later writes. It returns the failure
// if that last sync fails, nil otherwise; calling it again returns
// persistence.ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return persistence.ErrClosed
	}
	var wrote bool
	var err error
	if l.mu.err == nil {
		if l.mu.durable != l.mu.img.mark {
			l.mu.pending = append(l.mu.pending, write{kind: writeMark, setMark: true, mark: l.mu.durable})
		}
		wrote, err = l.syncLocked()
	}
	l.mu.closed = true
	l.wakeLocked()
	l.mu.Unlock()
	l.notify(wrote)
	return err
}

// Crash returns the log as a restart after a crash of the machine would
// find it, and leaves l closed, as by Close but writing nothing (its
// waiters get persistence.ErrClosed). The new log holds everything l
// synced and, of the n writes it did not (each entry one write, each
// synchronous write one), the oldest keep(n): a write-ahead log loses a
// suffix. keep's answer is taken as 0 if negative and n if above; a nil
// keep keeps none. The new log's Synced is its Last, its durable mark the
// last one written, and it has no OnSynced function and no planted
// failure. Crash may be called again, on a closed or crashed log too,
// with another choice.
func (l *Log) Crash(keep func(unsynced int) int) *Log {
	l.mu.Lock()
	l.mu.closed = true
	l.wakeLocked()
	img := l.mu.img.clone()
	// Nothing changes pending once the log is closed.
	pending := l.mu.pending
	l.mu.Unlock()
	n := 0
	if keep != nil {
		n = min(max(keep(len(pending)), 0), len(pending))
	}
	for i := range pending[:n] {
		img.apply(&pending[i])
	}
	return open(img)
}

// entryAt returns the entry at index in es, contiguous entries.
func entryAt(es []persistence.Entry, index uint64) (persistence.Entry, bool) {
	if len(es) == 0 || index < es[0].Index || index-es[0].Index >= uint64(len(es)) {
		return persistence.Entry{}, false
	}
	return es[index-es[0].Index], true
}

// clone copies p, as persistence.Log's records do: an empty p reads back
// as nil.
func clone(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return bytes.Clone(p)
}

// AppendTopic queues topic entries for writing, as
// persistence.Log.AppendTopic does: each Pos must be LastTopic plus one.
// It returns at once, without waiting for a sync, and never blocks. The
// log keeps copies of the payloads. Errors: persistence.ErrOutOfOrder,
// persistence.ErrClosed, or an error wrapping persistence.ErrFailed.
func (l *Log) AppendTopic(es ...persistence.TopicEntry) error {
	if len(es) == 0 {
		return nil
	}
	ws := make([]write, len(es))
	for i := range es {
		if i > 0 && es[i].Pos != es[i-1].Pos+1 {
			return fmt.Errorf("%w: topic entry %d follows %d", persistence.ErrOutOfOrder, es[i].Pos, es[i-1].Pos)
		}
		ws[i] = write{kind: writeTopic, topic: es[i]}
		ws[i].topic.Payload = clone(es[i].Payload)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptingLocked(); err != nil {
		return err
	}
	if es[0].Pos != l.mu.lastTopic+1 {
		return fmt.Errorf("%w: topic entry %d does not follow the last topic entry %d", persistence.ErrOutOfOrder, es[0].Pos, l.mu.lastTopic)
	}
	l.mu.lastTopic = es[len(es)-1].Pos
	l.mu.pending = append(l.mu.pending, ws...)
	return nil
}

// TopicSynced returns the position of the last topic entry synced.
func (l *Log) TopicSynced() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.topicSynced
}

// LastTopic returns the position of the last topic entry appended (0:
// none).
func (l *Log) LastTopic() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.lastTopic
}

// FirstTopic returns the position of the first topic entry kept, as
// persistence.Log.FirstTopic does.
func (l *Log) FirstTopic() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.firstTopic
}

// ScanTopics calls fn for every synced topic entry kept from position
// from on, in order. It stops at fn's first error and returns it.
// Errors: ctx's, persistence.ErrClosed.
func (l *Log) ScanTopics(ctx context.Context, from uint64, fn func(persistence.TopicEntry) error) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return persistence.ErrClosed
	}
	topics := l.mu.img.topics
	l.mu.Unlock()
	for _, e := range topics {
		if e.Pos < from {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		e.Payload = clone(e.Payload)
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// TrimTopics deletes the topic entries up to position through, at most
// the last synced and never the last one, with the next sync, as
// persistence.Log.TrimTopics does. Errors: persistence.ErrClosed, or an
// error wrapping persistence.ErrFailed.
func (l *Log) TrimTopics(through uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptingLocked(); err != nil {
		return err
	}
	through = min(through, l.mu.topicSynced, l.mu.lastTopic-1)
	if l.mu.lastTopic == 0 || through < l.mu.firstTopic {
		return nil
	}
	l.mu.pending = append(l.mu.pending, write{kind: writeTopicTrim, index: through})
	l.mu.firstTopic = through + 1
	return nil
}
