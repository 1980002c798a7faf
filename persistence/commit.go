package persistence

import (
	"context"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// run is the writer goroutine: the only one that writes to Pebble. It
// commits everything pending as one synced batch whenever the group
// commit policy says so (see take), until the log is closed or fails.
func (l *Log) run() {
	defer close(l.done)
	defer func() {
		if l.batch != nil {
			_ = l.batch.Close()
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// busy: the last commit just finished; whatever accumulated during it
	// goes at once.
	busy := false
	// spare is the last batch's ops, cleared: take makes it the next
	// queue, so that the queue does not grow anew from nothing for every
	// batch.
	var spare []op
	for {
		ops, wait, stop := l.take(busy, spare)
		switch {
		case stop:
			l.writeMark()
			return
		case ops != nil:
			l.commit(ops)
			clear(ops)
			spare = ops[:0]
			busy = true
			continue
		}
		busy = false
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-l.kick:
				timer.Stop()
			case <-timer.C:
			}
		} else {
			<-l.kick
		}
	}
}

// take decides what to do next: a batch of ops to commit now, or how long
// to wait for more (0: until kicked), or to stop. The writer commits when
// anything is pending, unless Options.MaxDelay asks an idle writer to
// wait: then when the previous commit just finished (busy), someone waits
// for an fsync (PutView and the like), MaxBatchBytes are pending, the
// oldest pending op has waited MaxDelay, or the log is closing. A batch
// holds at most about MaxBatchBytes. A batch that takes the whole queue
// leaves spare, an empty slice the writer no longer uses, as the new one.
func (l *Log) take(busy bool, spare []op) (ops []op, wait time.Duration, stop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err != nil {
		// Failed: refuse everything still pending.
		for _, o := range l.mu.pending {
			if o.done != nil {
				o.done <- l.mu.err
			}
			if o.written != nil {
				o.written(l.mu.err)
			}
		}
		l.mu.pending, l.mu.pendingBytes, l.mu.urgent = nil, 0, 0
		return nil, 0, true
	}
	if len(l.mu.pending) == 0 {
		return nil, 0, l.mu.closing
	}
	if l.opts.MaxDelay > 0 && !busy && !l.mu.closing && l.mu.urgent == 0 && l.mu.pendingBytes < l.opts.MaxBatchBytes {
		if w := l.opts.MaxDelay - time.Since(l.mu.oldest); w > 0 {
			return nil, w, false
		}
	}
	n, size := 0, 0
	for n < len(l.mu.pending) && (n == 0 || size < l.opts.MaxBatchBytes) {
		o := &l.mu.pending[n]
		size += o.size()
		if o.done != nil {
			l.mu.urgent--
		}
		n++
	}
	ops = l.mu.pending[:n:n]
	if n == len(l.mu.pending) {
		l.mu.pending = spare
	} else {
		l.mu.pending = l.mu.pending[n:]
		l.mu.oldest = time.Now()
	}
	l.mu.pendingBytes -= size
	return ops, 0, false
}

// commit writes ops as one batch with pebble.Sync (without, for a batch
// of snapshot chunks only), then advances Synced, wakes waiters and
// answers requests; on failure it fails the log.
func (l *Log) commit(ops []op) {
	// One batch, reset and reused, so that its buffer is too: a batch
	// made for each commit would allocate a new one, growing to the
	// batch's size, each time (Pebble keeps none beyond a megabyte).
	if l.batch == nil {
		l.batch = l.db.NewBatch(pebble.WithMaxRetainedSizeBytes(2 * l.opts.MaxBatchBytes))
	}
	b := l.batch
	size, entries := 0, 0
	var synced, topicSynced uint64
	for i := range ops {
		o := &ops[i]
		size += o.size()
		switch {
		case o.isEntry:
			d := b.SetDeferred(keyLen, entryValueLen(&o.entry))
			putEntry(d.Key, d.Value, &o.entry)
			_ = d.Finish()
			o.entry.Payload = nil // the batch holds it now
			entries++
		case o.end != nil:
			_ = b.DeleteRange(o.key, o.end, nil)
		default:
			_ = b.Set(o.key, o.value, nil)
			if o.done == nil && o.written == nil {
				entries++
			}
		}
		synced = max(synced, o.index)
		topicSynced = max(topicSynced, o.topicPos)
	}
	// The durable mark rides along only with batches that someone waits
	// for (view records, snapshots, trims) and with the last one at
	// Close: it only needs to be roughly current (a restart holds back the
	// entries beyond it until the group confirms them), and any rewrite
	// of a key among a stream of appends was measured to cost a tenth of
	// the throughput or more.
	// A batch that writes the mark itself (an installed snapshot's) must
	// not have it overwritten by the older one held here.
	urgent, marked, chunks := false, false, true
	for i := range ops {
		urgent = urgent || ops[i].done != nil
		chunks = chunks && ops[i].written != nil
		if ops[i].mark {
			marked, l.durableWritten = true, ops[i].markAt
		}
	}
	if d := l.durable.Load(); urgent && !marked && d != l.durableWritten {
		k, v := encodeMetaAt(prefixMark, metaDurable, d, nil)
		_ = b.Set(k, v, nil)
		l.durableWritten = d
	}
	// Snapshot chunks alone need no fsync: the snapshot's commit syncs
	// them with it, and until then nothing counts on them.
	opts := pebble.Sync
	if chunks {
		opts = pebble.NoSync
	}
	start := time.Now()
	err := recoverFatal(func() error { return b.Commit(opts) })
	if err != nil {
		// A batch whose commit hit a Fatalf may be in any state: leave it
		// to the garbage collector.
		l.batch = nil
		l.fail(err)
		for i := range ops {
			if ops[i].done != nil {
				ops[i].done <- l.Err()
			}
			if ops[i].written != nil {
				ops[i].written(l.Err())
			}
		}
		return
	}
	b.Reset()
	if chunks {
		l.mu.Lock()
		l.mu.queued -= size
		l.mu.space.Broadcast()
		l.mu.Unlock()
		for i := range ops {
			ops[i].written(nil)
		}
		return
	}
	l.fsyncs.Add(1)
	ctx := context.Background()
	l.m.fsyncs.Add(ctx, 1)
	l.m.batchSize.Record(ctx, int64(entries))
	l.m.syncLatency.Record(ctx, time.Since(start).Seconds())

	l.mu.Lock()
	l.mu.queued -= size
	// The topic entries' mark moves first: Synced and WaitSynced read
	// synced without the lock, and a caller that sees an entry synced
	// must see the topic entries queued before it synced too.
	if topicSynced > l.topicSynced.Load() {
		l.topicSynced.Store(topicSynced)
	}
	if synced > l.synced.Load() {
		l.synced.Store(synced)
		if l.syncedRaised != nil {
			l.syncedRaised()
		}
		close(l.mu.syncCh)
		l.mu.syncCh = make(chan struct{})
	}
	fn := l.mu.onSynced
	l.mu.space.Broadcast()
	l.mu.Unlock()
	for i := range ops {
		if ops[i].done != nil {
			ops[i].done <- nil
		}
		if ops[i].written != nil {
			ops[i].written(nil)
		}
	}
	if fn != nil {
		fn(l.synced.Load())
	}
}

// writeMark writes the durable mark if it moved since last written, as
// the writer stops (Close), unless the log failed.
func (l *Log) writeMark() {
	d := l.durable.Load()
	if d == l.durableWritten || l.Err() != nil {
		return
	}
	k, v := encodeMetaAt(prefixMark, metaDurable, d, nil)
	b := l.db.NewBatch()
	_ = b.Set(k, v, nil)
	if err := recoverFatal(func() error { return b.Commit(pebble.Sync) }); err != nil {
		l.fail(err)
		return
	}
	_ = b.Close()
	l.durableWritten = d
}
