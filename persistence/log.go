package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/metric"

	"github.com/convoy-gcs/convoy/membership/record"
)

// Errors returned by the log, for callers to test with errors.Is. Returned
// errors wrap them with the index or epoch concerned.
var (
	// ErrOutOfOrder: Append was given an entry whose index does not follow
	// the last one appended (or lies below the trim point of an empty log).
	ErrOutOfOrder = errors.New("persistence: entry out of order")
	// ErrNotFound: Get of an index that was never written or is not yet
	// synced; Snapshot when no snapshot was recorded.
	ErrNotFound = errors.New("persistence: not found")
	// ErrTrimmed: Get or Scan of an index below First, deleted by
	// TrimBefore.
	ErrTrimmed = errors.New("persistence: trimmed")
	// ErrCorrupt: a record failed its checksum or is malformed, or an entry
	// that must exist is missing (a gap). Returned by Get, Scan, Views,
	// Snapshot and Open; a corrupt record is never returned as data.
	ErrCorrupt = errors.New("persistence: corrupt record")
	// ErrFailed: a commit or fsync failed. The log acknowledges nothing
	// more: Synced stays where it was, and Append, WaitSynced, PutView,
	// TrimBefore and SetSnapshot return an error wrapping ErrFailed and
	// the cause.
	ErrFailed = errors.New("persistence: log failed")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("persistence: log closed")
	// ErrViewConflict: PutView of an epoch that already holds a different
	// view record (there is one view per epoch).
	ErrViewConflict = errors.New("persistence: different view for the same epoch")
	// ErrSnapshotStale: a snapshot's Commit after InstallSnapshot
	// replaced the log's contents since the snapshot was created: the
	// state it holds belongs to the log's former contents.
	ErrSnapshotStale = errors.New("persistence: snapshot of the log's former contents")
)

// Defaults for Options.
const (
	// DefaultMaxBatchBytes bounds one synced batch: large enough that an
	// fsync is amortised over thousands of small entries, small enough to
	// stay well below Pebble's large-batch threshold (half of
	// pebbleMemTableSize).
	DefaultMaxBatchBytes = 4 << 20
	// maxQueuedBytes is the backpressure bound: Append blocks while this
	// many bytes are queued or being committed.
	maxQueuedBytes = 64 << 20
	// pebbleMemTableSize keeps full-size batches on Pebble's normal path.
	pebbleMemTableSize = 64 << 20
)

// Options configure a Log. The zero value of every field but Dir is
// usable.
type Options struct {
	// Dir is the directory of the Pebble store; created if missing.
	Dir string
	// FS is the file system; nil means the OS file system.
	FS vfs.FS
	// MaxBatchBytes makes the writer commit once this many bytes are
	// pending (DefaultMaxBatchBytes if zero).
	MaxBatchBytes int
	// MaxDelay, if positive, makes an idle writer wait for company: it
	// commits once the oldest pending entry has waited this long (or
	// MaxBatchBytes are pending). Zero, the default, commits at once. Either
	// way, when a commit finishes and anything is pending, the next one
	// starts at once: while one fsync runs, the next batch accumulates, so
	// batches grow with the load without a timer. A delay is rarely worth
	// it: an idle Go program's timers fire up to a millisecond late, which
	// was measured to make a lone entry's sync take 1.3 ms instead of
	// 0.15 ms.
	MaxDelay time.Duration
	// Logger receives the log's messages (quiet at info level); nil
	// discards them.
	Logger *slog.Logger
	// MeterProvider receives the log's metrics; nil disables them.
	MeterProvider metric.MeterProvider
}

// Log is a durable log of delivered messages, view records and member
// metadata. Its methods are safe for concurrent use.
type Log struct {
	opts   Options
	db     *pebble.DB
	log    *slog.Logger
	m      *metrics
	kick   chan struct{} // wakes the writer; capacity 1
	done   chan struct{} // closed when the writer has exited
	synced atomic.Uint64 // highest index known fsynced; ≤ mu.last
	fsyncs atomic.Uint64 // synced batches committed (for tests)
	// syncedRaised, if set (tests), runs on the writer right after a
	// commit raised synced, before it wakes anyone: what a caller that
	// reads Synced without the lock may see then. It runs holding mu.
	syncedRaised func()
	// durable is the durable mark (SetDurable); durableWritten, owned by
	// the writer, is the mark its last batch recorded.
	durable        atomic.Uint64
	durableWritten uint64
	// topicSynced is the highest topic entry position known fsynced.
	topicSynced atomic.Uint64
	// batch is the writer goroutine's batch, reused from commit to commit
	// (nil until the first, and after a failed one).
	batch *pebble.Batch

	// failed is closed when the log fails, as mu.err is set.
	failed chan struct{}

	// viewMu serialises PutView, so its check for an existing record and
	// its write cannot interleave with another PutView.
	viewMu sync.Mutex
	// snapMu serialises the writes of the snapshot record (Commit,
	// SetSnapshot, InstallSnapshot) and ReadSnapshot's reads of it: each
	// deletes the chunks of the snapshot it replaces, whose generation is
	// snapGen (0: the snapshot has no chunks, or there is none).
	snapMu  sync.Mutex
	snapGen atomic.Uint64

	// dbMu guards the use of db against Close: readers hold it shared,
	// Close exclusively (Pebble panics on use after Close).
	dbMu     sync.RWMutex
	dbClosed bool // REQUIRES: dbMu

	mu struct {
		sync.Mutex
		// space is signalled when queued drops, and on failure and close.
		space sync.Cond
		// The log holds [first, last]; it is empty iff first == last+1.
		// Invariant: first ≥ 1, first ≤ last+1. A fresh log has first 1,
		// last 0; a log trimmed past its end has first t, last t-1.
		first, last uint64
		// firstTopic and lastTopic are the positions of the first topic
		// entry kept (TrimTopics) and of the last appended. Invariant:
		// firstTopic ≥ 1, firstTopic ≤ lastTopic+1.
		firstTopic, lastTopic uint64
		// pending are the writes not yet taken by the writer, in order.
		pending      []op
		pendingBytes int
		// urgent counts pending ops whose caller waits for their fsync.
		urgent int
		// oldest is when pending last became non-empty.
		oldest time.Time
		// queued is the size of pending plus the batch being committed.
		queued int
		// maxQueued is the backpressure bound (maxQueuedBytes; tests
		// lower it).
		maxQueued int
		// nextGen is the generation of the last snapshot created: each
		// writes its chunks under a generation of its own.
		nextGen uint64
		// installs counts the InstallSnapshot calls (made under snapMu
		// too).
		installs uint64
		// syncCh is closed and replaced whenever synced advances, and on
		// failure and close.
		syncCh   chan struct{}
		onSynced func(index uint64)
		err      error // non-nil once failed; wraps ErrFailed
		closing  bool  // Close was called: nothing new is accepted
		closed   bool  // the writer has drained and exited
	}
}

// op is one write for the writer.
type op struct {
	key, value []byte
	// entry, if isEntry, is an entry to write: the writer encodes it
	// straight into its batch (key and value are nil), so that its
	// payload is copied once, not once into a value and again into the
	// batch.
	entry   Entry
	isEntry bool
	// end, if set, makes op a DeleteRange [key, end).
	end []byte
	// index is the entry index this op makes durable, or for a trim the
	// index below which everything counts as durable; 0 for neither.
	// topicPos is the topic entry position it makes durable, or 0.
	index, topicPos uint64
	// done, if set, receives the op's outcome once its batch committed.
	done chan error
	// mark says the op writes the durable mark, as markAt: the batch
	// then carries no other value of it.
	mark   bool
	markAt uint64
	// written, if set, is called on the writer goroutine once the op's
	// batch is committed (nil), or with the error that failed the log
	// if it never will be. It must not block or call the log. A batch of
	// such ops only (snapshot chunks) is committed without a sync.
	written func(error)
}

func (o *op) size() int {
	if o.isEntry {
		return entrySize(&o.entry)
	}
	return len(o.key) + len(o.value) + len(o.end)
}

// Open opens (creating if needed) the log in o.Dir and recovers its
// state: First, Last and Synced come from disk, and everything on disk is
// synced. It checks that the entries are contiguous and that the last one
// is intact, and reports a gap or a corrupt tail as ErrCorrupt. ctx
// bounds that scan (Pebble's own open is not interruptible).
func Open(ctx context.Context, o Options) (l *Log, err error) {
	if o.Dir == "" {
		return nil, errors.New("persistence: Options.Dir is empty")
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxDelay < 0 {
		return nil, fmt.Errorf("persistence: Options.MaxDelay %v is negative", o.MaxDelay)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(o.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("persistence: metrics: %w", err)
	}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	l = &Log{
		opts:   o,
		log:    o.Logger.With("component", "persistence", "dir", o.Dir),
		m:      m,
		kick:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		failed: make(chan struct{}),
	}
	l.mu.space.L = &l.mu
	l.mu.maxQueued = maxQueuedBytes
	l.mu.syncCh = make(chan struct{})

	popts := &pebble.Options{
		FS:           o.FS,
		Logger:       &pebbleLogger{log: l.log, fatal: l.fail},
		MemTableSize: pebbleMemTableSize,
	}
	if err := recoverFatal(func() (err error) {
		l.db, err = pebble.Open(o.Dir, popts)
		return err
	}); err != nil {
		return nil, fmt.Errorf("persistence: opening %s: %w", o.Dir, err)
	}
	if err := l.recover(ctx); err != nil {
		_ = recoverFatal(l.db.Close)
		return nil, err
	}
	go l.run()
	return l, nil
}

// recover reads the trim point and the entry range from disk.
func (l *Log) recover(ctx context.Context) error {
	trim, _, err := l.getMeta(metaTrim)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	first, last := max(trim, 1), max(trim, 1)-1

	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixEntry},
		UpperBound: []byte{prefixEntry + 1},
	})
	if err != nil {
		return fmt.Errorf("persistence: recovery: %w", err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("persistence: recovery: %w", err)
			}
		}
		index, ok := parseKey(prefixEntry, it.Key())
		switch {
		case !ok:
			return fmt.Errorf("%w: malformed entry key %x", ErrCorrupt, it.Key())
		case n == 1:
			if index < trim {
				return fmt.Errorf("%w: entry %d below the trim point %d", ErrCorrupt, index, trim)
			}
			first = index
		case index != last+1:
			return fmt.Errorf("%w: gap in the log: entry %d follows %d", ErrCorrupt, index, last)
		}
		last = index
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("persistence: recovery: %w", readErr(err))
	}
	if n > 0 {
		// The tail is what a crash could have damaged.
		if it.Last() {
			v, err := it.ValueAndErr()
			if err != nil {
				return fmt.Errorf("persistence: recovery: %w", readErr(err))
			}
			if _, err := decodeEntry(it.Key(), v); err != nil {
				return fmt.Errorf("%w: entry %d (last): %v", ErrCorrupt, last, err)
			}
		}
	}
	l.mu.first, l.mu.last = first, last
	l.synced.Store(last)
	mark, _, err := l.getMetaAt(prefixMark, metaDurable)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	l.durable.Store(mark)
	l.durableWritten = mark
	if err := l.recoverTopics(); err != nil {
		return err
	}
	if err := l.cleanSnapshots(); err != nil {
		return err
	}
	l.log.Debug("recovered", "first", first, "last", last, "entries", n)
	return nil
}

// readErr marks Pebble's corruption errors as ErrCorrupt.
func readErr(err error) error {
	if errors.Is(err, pebble.ErrCorruption) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// Append queues entries for writing, in final order: each Index must be
// the last appended plus one; the first may be any index ≥ First if the
// log is empty (fresh, or trimmed past its end). It returns once the
// entries are queued, without waiting for their fsync (see WaitSynced and
// OnSynced); it blocks while too many bytes are queued. Either all of es
// are queued or none. The log keeps each entry's Payload as it is, and
// copies it only when its writer takes the entry into a batch: the
// caller must not modify a Payload before its entry is synced.
//
// Errors: ErrOutOfOrder, ErrClosed, or an error wrapping ErrFailed.
func (l *Log) Append(es ...Entry) error {
	if len(es) == 0 {
		return nil
	}
	size, payload := 0, 0
	for i := range es {
		if i > 0 && es[i].Index != es[i-1].Index+1 {
			return fmt.Errorf("%w: entry %d follows %d", ErrOutOfOrder, es[i].Index, es[i-1].Index)
		}
		size += entrySize(&es[i])
		payload += len(es[i].Payload)
	}

	l.mu.Lock()
	for l.mu.queued > 0 && l.mu.queued+size > l.mu.maxQueued && l.mu.err == nil && !l.mu.closing {
		l.mu.space.Wait()
	}
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	idx := es[0].Index
	if empty := l.mu.first == l.mu.last+1; empty {
		if idx < l.mu.first {
			l.mu.Unlock()
			return fmt.Errorf("%w: entry %d is below the log's first index %d", ErrOutOfOrder, idx, l.mu.first)
		}
		l.mu.first = idx
	} else if idx != l.mu.last+1 {
		last := l.mu.last
		l.mu.Unlock()
		return fmt.Errorf("%w: entry %d does not follow the last entry %d", ErrOutOfOrder, idx, last)
	}
	l.mu.last = es[len(es)-1].Index
	// The ops go straight into the queue one by one (an op is large, and
	// a slice of them made for each call would cost an allocation per
	// delivery).
	for i := range es {
		l.pushLocked(op{entry: es[i], isEntry: true, index: es[i].Index})
	}
	l.kickWriter()
	l.mu.Unlock()

	l.m.entries.Add(int64(len(es)))
	l.m.bytes.Add(int64(payload))
	return nil
}

// acceptingLocked returns the error new writes get, if any.
// REQUIRES: l.mu.
func (l *Log) acceptingLocked() error {
	if l.mu.err != nil {
		return l.mu.err
	}
	if l.mu.closing {
		return ErrClosed
	}
	return nil
}

// enqueueLocked hands ops to the writer. REQUIRES: l.mu.
func (l *Log) enqueueLocked(ops ...op) {
	for i := range ops {
		l.pushLocked(ops[i])
	}
	l.kickWriter()
}

// pushLocked appends o to pending and counts it in the queue's
// bookkeeping; the caller kicks the writer once it has pushed its ops.
// REQUIRES: l.mu.
func (l *Log) pushLocked(o op) {
	if len(l.mu.pending) == 0 {
		l.mu.oldest = time.Now()
	}
	l.mu.pending = append(l.mu.pending, o)
	s := o.size()
	l.mu.pendingBytes += s
	l.mu.queued += s
	if o.done != nil {
		l.mu.urgent++
	}
}

// kickWriter wakes the writer if it waits.
func (l *Log) kickWriter() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// submit queues ops (the last of which carries done) and waits until
// they are committed and fsynced, or ctx ends (the write may then still
// happen).
func (l *Log) submit(ctx context.Context, ops ...op) error {
	done := make(chan error, 1)
	ops[len(ops)-1].done = done
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.enqueueLocked(ops...)
	l.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Synced returns the highest index known fsynced: every entry up to it
// survives a crash. It never decreases.
func (l *Log) Synced() uint64 { return l.synced.Load() }

// WaitSynced waits until Synced() ≥ index. Errors: ctx's, ErrClosed once
// the log is closed (after Close has written what was queued), or an
// error wrapping ErrFailed.
func (l *Log) WaitSynced(ctx context.Context, index uint64) error {
	for {
		if l.synced.Load() >= index {
			return nil
		}
		l.mu.Lock()
		if l.mu.err != nil {
			err := l.mu.err
			l.mu.Unlock()
			return err
		}
		if l.mu.closed {
			l.mu.Unlock()
			return ErrClosed
		}
		ch := l.mu.syncCh
		l.mu.Unlock()
		if l.synced.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// OnSynced registers fn (replacing any earlier one; nil removes it) to be
// called with the new Synced value after each synced batch. It runs on
// the writer goroutine, never concurrently with itself, and must not
// block or call into the log's writing methods: the next batch waits for
// it.
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

// Last returns the last index appended (whether synced yet or not); after
// Open, the last index on disk. It is First()-1 when the log is empty.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.last
}

// Err returns the error that failed the log (wrapping ErrFailed), or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// Failed returns a channel that is closed once the log has failed (Err
// then says why). It stays open if the log closes without failing.
func (l *Log) Failed() <-chan struct{} { return l.failed }

// fail makes the log failed with cause, once. Synced never advances
// again and every waiter is woken.
func (l *Log) fail(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err != nil {
		return
	}
	l.mu.err = fmt.Errorf("%w: %w", ErrFailed, cause)
	close(l.failed)
	close(l.mu.syncCh)
	l.mu.syncCh = make(chan struct{})
	l.mu.space.Broadcast()
	l.log.Error("log failed: nothing more is acknowledged", "synced", l.synced.Load(), "err", cause)
}

// Get returns the entry at index, verifying its checksum. Only synced
// entries are served. Errors: ErrTrimmed (index < First), ErrNotFound
// (never written, or not yet synced), ErrCorrupt (the record fails its
// checksum, or is missing though it should be there), ErrClosed.
func (l *Log) Get(index uint64) (Entry, error) {
	if index == 0 {
		return Entry{}, fmt.Errorf("%w: entry 0 (indexes start at 1)", ErrNotFound)
	}
	if first := l.First(); index < first {
		return Entry{}, fmt.Errorf("%w: entry %d (first is %d)", ErrTrimmed, index, first)
	}
	if synced := l.synced.Load(); index > synced {
		return Entry{}, fmt.Errorf("%w: entry %d (synced up to %d)", ErrNotFound, index, synced)
	}
	l.dbMu.RLock()
	defer l.dbMu.RUnlock()
	if l.dbClosed {
		return Entry{}, ErrClosed
	}
	k := makeKey(prefixEntry, index)
	v, c, err := l.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		if first := l.First(); index < first { // trimmed meanwhile
			return Entry{}, fmt.Errorf("%w: entry %d (first is %d)", ErrTrimmed, index, first)
		}
		return Entry{}, fmt.Errorf("%w: entry %d is missing", ErrCorrupt, index)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("persistence: reading entry %d: %w", index, readErr(err))
	}
	defer c.Close()
	e, err := decodeEntry(k, v)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: entry %d: %v", ErrCorrupt, index, err)
	}
	return e, nil
}

// scanRecords calls fn for every record under prefix from key from to
// key to (upper is the key after to), in order, decoding each with
// decode, which verifies its checksum. A key missing in the range is a
// gap: missing says what error it makes. what names the records in
// errors.
func scanRecords[T any](ctx context.Context, l *Log, prefix byte, what string, from, to uint64, upper []byte,
	decode func(key, value []byte) (T, error), fn func(T) error, missing func(next uint64) error) error {
	l.dbMu.RLock()
	defer l.dbMu.RUnlock()
	if l.dbClosed {
		return ErrClosed
	}
	it, err := l.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: makeKey(prefix, from),
		UpperBound: upper,
	})
	if err != nil {
		return fmt.Errorf("persistence: scan: %w", err)
	}
	defer it.Close()
	next := from
	for ok := it.First(); ok; ok = it.Next() {
		if (next-from)%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		if at, ok := parseKey(prefix, k); !ok || at != next {
			return missing(next)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("persistence: reading %s %d: %w", what, next, readErr(err))
		}
		e, err := decode(k, v)
		if err != nil {
			return fmt.Errorf("%w: %s %d: %v", ErrCorrupt, what, next, err)
		}
		if err := fn(e); err != nil {
			return err
		}
		next++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("persistence: scan at %s %d: %w", what, next, readErr(err))
	}
	if next <= to {
		return missing(next)
	}
	return nil
}

// Scan calls fn for every synced entry in [from, to], in index order,
// verifying each checksum; a to beyond Synced is clamped to it (so
// Scan(ctx, l.First(), math.MaxUint64, fn) reads everything durable). It
// stops at fn's first error and returns it. fn must not call Close.
// Errors: ErrTrimmed (from < First), ErrCorrupt (a corrupt record or a
// gap, naming the index), ctx's, ErrClosed.
func (l *Log) Scan(ctx context.Context, from, to uint64, fn func(Entry) error) error {
	if first := l.First(); from < first {
		return fmt.Errorf("%w: entry %d (first is %d)", ErrTrimmed, from, first)
	}
	to = min(to, l.synced.Load())
	if from > to {
		return nil
	}
	upper := []byte{prefixEntry + 1}
	if to < 1<<64-1 {
		upper = makeKey(prefixEntry, to+1)
	}
	return scanRecords(ctx, l, prefixEntry, "entry", from, to, upper, decodeEntry, fn, l.missing)
}

// missing reports entry index absent from a scan: trimmed meanwhile, or a
// gap.
func (l *Log) missing(index uint64) error {
	if first := l.First(); index < first {
		return fmt.Errorf("%w: entry %d (first is %d)", ErrTrimmed, index, first)
	}
	return fmt.Errorf("%w: entry %d is missing (gap)", ErrCorrupt, index)
}

// PutView records view record v (with its cut) and returns once it is
// fsynced: the group puts the record before it delivers any message of its
// cut, so a log that holds such a message holds the cut. Putting the same
// record again is a no-op. Errors: ErrViewConflict (a different record for
// v.Epoch exists), ErrCorrupt, ErrClosed, ctx's, or an error wrapping
// ErrFailed.
func (l *Log) PutView(ctx context.Context, v record.View) error {
	k, val, err := encodeView(&v)
	if err != nil {
		return err
	}
	l.viewMu.Lock()
	defer l.viewMu.Unlock()
	old, err := l.get(k)
	switch {
	case err == nil:
		if _, derr := decodeView(k, old); derr != nil {
			return fmt.Errorf("%w: view %d: %v", ErrCorrupt, v.Epoch, derr)
		}
		if bytes.Equal(old, val) {
			return nil
		}
		return fmt.Errorf("%w: epoch %d", ErrViewConflict, v.Epoch)
	case !errors.Is(err, ErrNotFound):
		return err
	}
	if err := l.submit(ctx, op{key: k, value: val}); err != nil {
		return fmt.Errorf("persistence: view %d: %w", v.Epoch, err)
	}
	return nil
}

// get returns a copy of the value at key k, or ErrNotFound.
func (l *Log) get(k []byte) ([]byte, error) {
	l.dbMu.RLock()
	defer l.dbMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	v, c, err := l.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("persistence: reading %x: %w", k, readErr(err))
	}
	defer c.Close()
	return append([]byte(nil), v...), nil
}

// Views returns every view record held, in epoch order. Errors:
// ErrCorrupt (naming the epoch), ctx's, ErrClosed.
func (l *Log) Views(ctx context.Context) ([]record.View, error) {
	l.dbMu.RLock()
	defer l.dbMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	it, err := l.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: []byte{prefixView},
		UpperBound: []byte{prefixView + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: views: %w", err)
	}
	defer it.Close()
	var vs []record.View
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("persistence: views: %w", readErr(err))
		}
		v, err := decodeView(it.Key(), val)
		if err != nil {
			epoch, _ := parseKey(prefixView, it.Key())
			return nil, fmt.Errorf("%w: view %d: %v", ErrCorrupt, epoch, err)
		}
		vs = append(vs, v)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("persistence: views: %w", readErr(err))
	}
	return vs, nil
}

// TrimBefore deletes every entry below index and returns once that is
// durable; First becomes index (if it was lower). Trimming past Last
// leaves an empty log whose next entry may have any index ≥ index.
// Errors: ErrClosed, ctx's, or an error wrapping ErrFailed.
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
	l.mu.Unlock()
	tk, tv := encodeMeta(metaTrim, index, nil)
	err := l.submit(ctx,
		op{key: makeKey(prefixEntry, 0), end: makeKey(prefixEntry, index)},
		op{key: tk, value: tv, index: index - 1},
	)
	if err != nil {
		return fmt.Errorf("persistence: trim before %d: %w", index, err)
	}
	return nil
}

// SetSnapshot records that the member's last snapshot is at index, with
// metadata meta and no parts (see CreateSnapshot for a snapshot with
// parts), and returns once that is durable; the chunks of the snapshot
// it replaces are deleted with it. Errors: ErrClosed, ctx's, or an error
// wrapping ErrFailed.
func (l *Log) SetSnapshot(ctx context.Context, index uint64, meta []byte) error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	k, v := encodeMeta(metaSnapshot, index, meta)
	if err := l.submit(ctx, append(l.dropSnapshotOps(), op{key: k, value: v})...); err != nil {
		return fmt.Errorf("persistence: snapshot %d: %w", index, err)
	}
	l.snapGen.Store(0)
	return nil
}

// SetDurable records that the entries up to index are durable beyond
// this log (the group's own sense: on every member's disk). The mark
// only grows; it is written with the next synchronous write (PutView,
// SetSnapshot, TrimBefore, InstallSnapshot) and at Close, so after a
// crash Durable may return an earlier mark, never a later one.
func (l *Log) SetDurable(index uint64) {
	for {
		cur := l.durable.Load()
		if index <= cur || l.durable.CompareAndSwap(cur, index) {
			return
		}
	}
}

// Durable returns the durable mark (SetDurable), as recovered at Open and
// raised since.
func (l *Log) Durable() uint64 { return l.durable.Load() }

// InstallSnapshot replaces the log's contents with a snapshot at index:
// in one durable batch every entry and the previous snapshot's chunks
// are deleted, the snapshot (index, meta, no parts) is recorded and the
// trim point set past it, so that the next entry may have any index
// above index. A member whose state came from elsewhere (a transfer)
// continues its log this way; a crash leaves either the old log or the
// new one. Synced and the durable mark become index. Errors: ErrClosed,
// ctx's, or an error wrapping ErrFailed.
func (l *Log) InstallSnapshot(ctx context.Context, index uint64, meta []byte) error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	if err := l.acceptingLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.mu.first, l.mu.last = index+1, index
	l.mu.installs++
	l.mu.Unlock()
	// Until the batch below commits, no other batch may write a mark
	// beyond the snapshot's: it would outlive a crash with the old log.
	if index < l.durable.Load() {
		l.durable.Store(index)
	}
	sk, sv := encodeMeta(metaSnapshot, index, meta)
	tk, tv := encodeMeta(metaTrim, index+1, nil)
	// The mark follows the snapshot (an installed state is the group's).
	// The topic entries stay: they are this member's, numbered apart.
	dk, dv := encodeMetaAt(prefixMark, metaDurable, index, nil)
	err := l.submit(ctx, append(l.dropSnapshotOps(),
		op{key: makeKey(prefixEntry, 0), end: makeKey(prefixEntry+1, 0)},
		op{key: sk, value: sv},
		op{key: tk, value: tv, index: index},
		op{key: dk, value: dv, mark: true, markAt: index},
	)...)
	if err != nil {
		return fmt.Errorf("persistence: install snapshot %d: %w", index, err)
	}
	l.snapGen.Store(0)
	// Entries queued before are written by now (batches commit in
	// order): the synced index is the snapshot's, lower or higher.
	l.mu.Lock()
	l.synced.Store(index)
	l.mu.Unlock()
	l.durable.Store(index)
	return nil
}

// Snapshot returns the last recorded snapshot index and its metadata.
// Errors: ErrNotFound (none recorded), ErrCorrupt, ErrClosed.
func (l *Log) Snapshot() (index uint64, meta []byte, err error) {
	return l.getMeta(metaSnapshot)
}

func (l *Log) getMeta(id uint64) (uint64, []byte, error) {
	return l.getMetaAt(prefixMeta, id)
}

func (l *Log) getMetaAt(prefix byte, id uint64) (uint64, []byte, error) {
	k := makeKey(prefix, id)
	v, err := l.get(k)
	if err != nil {
		return 0, nil, fmt.Errorf("persistence: metadata %d: %w", id, err)
	}
	n, data, err := decodeMeta(k, v)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: metadata %d: %v", ErrCorrupt, id, err)
	}
	return n, data, nil
}

// Close writes and fsyncs what was queued (unless the log failed), stops
// the writer and closes the store. Waiters then get ErrClosed. Calling it
// again returns ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closing {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.closing = true
	l.mu.space.Broadcast()
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	<-l.done

	l.mu.Lock()
	l.mu.closed = true
	close(l.mu.syncCh)
	l.mu.syncCh = make(chan struct{})
	l.mu.Unlock()

	l.m.close()
	l.dbMu.Lock()
	defer l.dbMu.Unlock()
	l.dbClosed = true
	if err := recoverFatal(l.db.Close); err != nil {
		return fmt.Errorf("persistence: closing: %w", err)
	}
	return nil
}

// recoverFatal runs f, turning a Fatalf panic of Pebble's (see
// pebbleLogger) into an error.
func recoverFatal(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*fatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()
	return f()
}
