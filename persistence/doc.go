// Package persistence is Convoy's durable log: a Pebble-backed record of
// the messages a member delivered, keyed by the global delivery index,
// together with the view records (with their cuts), member metadata, and
// the member's last snapshot of the application's state, in chunks.
//
// It is the storage half of durable mode: messages are appended only in
// final order, each member announces the highest index it has fsynced
// (Synced), and a message is reported durable once every member of the
// view has fsynced it. View records are fsynced before any message of
// their cut is delivered, and after a total failure the group restarts
// from the log holding the highest (epoch, index).
//
// # Usage
//
//	l, err := persistence.Open(ctx, persistence.Options{Dir: dir})
//	if err != nil { ... }
//	defer l.Close()
//	l.OnSynced(func(index uint64) { announcePersistedFrontier(index) })
//	if err := l.Append(persistence.Entry{Index: 1, Epoch: 1, Sender: 7, Seq: 1, Payload: p}); err != nil { ... }
//	if err := l.WaitSynced(ctx, 1); err != nil { ... }
//
// A snapshot streams in and out, a chunk at a time:
//
//	w, err := l.CreateSnapshot(ctx, index, 1) // one part
//	pw, err := w.Part(0)
//	err = state.WriteTo(pw) // any size: Write blocks while chunks are in flight
//	err = pw.Close()
//	err = w.Commit(ctx, nil) // durable; the previous snapshot's chunks go
//	r, err := l.ReadSnapshot()
//	err = state.ReadFrom(r.Part(0))
//
// # Implementation notes
//
// Keys are one prefix byte followed by a big-endian uint64: 'e' and the
// delivery index for entries, 'v' and the epoch for view records, 'm' and
// a small number for metadata, 'd' for the durable mark. A snapshot's
// state is kept as chunks of at most SnapshotChunkBytes under 'c', the
// snapshot's generation, the part's stream and the chunk's number
// (CreateSnapshot, ReadSnapshot; snapshot.go describes the layout). Every
// value starts with a CRC-32C (Castagnoli) checksum over the key and the
// rest of the value, and a format byte, so a record moved to another key
// or damaged on disk is detected on read and reported as ErrCorrupt; it
// is never served as data.
//
// Group commit: Append only encodes and queues; one writer goroutine owns
// every write to Pebble. It takes everything pending (up to
// Options.MaxBatchBytes), commits it as one batch with pebble.Sync, then
// advances Synced and wakes waiters. While one fsync runs the next batch
// accumulates, so under load every fsync covers many entries, and an idle
// log commits a lone entry at once (Options.MaxDelay can make it wait for
// company instead). Writes that must be durable before their call returns
// (PutView, TrimBefore, SetSnapshot, a snapshot's Commit) travel through
// the same queue, in order with the entries, and are committed without
// any delay. A snapshot's chunks travel through it too, a few at a time
// per snapshot (so that a snapshot of any size takes a few megabytes of
// memory); a batch of chunks alone is committed without an fsync, and
// the snapshot's Commit, which comes after them, syncs them.
//
// A failed commit or fsync makes the log failed for good (the fsyncgate
// lesson: after a failed fsync the page cache cannot be trusted): Synced
// never advances again and every later call reports an error wrapping
// ErrFailed. Pebble reports such failures through its logger's Fatalf;
// this package turns a Fatalf on the writer goroutine into that failure.
// A Fatalf on one of Pebble's own background goroutines (for instance a
// failed MANIFEST sync during a flush) still panics, as Pebble requires
// that Fatalf not return.
package persistence
