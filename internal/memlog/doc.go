// Package memlog is an in-memory durable log for whole-group simulations:
// it keeps persistence.Log's contract (the same methods, validation,
// errors and crash guarantees) but starts no goroutine, does no I/O and
// reads no clock. The simulation decides when the disk syncs, when it
// fails and what a crash leaves behind, all from its seed.
//
//	l := memlog.New()
//	l.OnSynced(func(index uint64) { announcePersistedFrontier(index) })
//	_ = l.Append(persistence.Entry{Index: 1, Epoch: 1, Payload: p})
//	_ = l.Sync() // the fsync completes now: Synced() == 1
//	_ = l.Append(persistence.Entry{Index: 2, Epoch: 1, Payload: q})
//	l2 := l.Crash(func(unsynced int) int { return 0 }) // entry 2 is lost
//
// # Syncs
//
// Group commit is explicit. Append only buffers; Sync, called by whoever
// drives the log at the time of its choosing, makes every write so far
// durable at once, advances Synced to Last and runs the OnSynced
// function in the caller's goroutine before it returns. The writes whose
// caller waits for their fsync in persistence.Log (PutView, TrimBefore,
// SetSnapshot, InstallSnapshot, a snapshot's Commit) sync the log
// themselves before they return, as does WaitSynced for an index already appended: a caller that
// waits for the disk gets it at once. WaitSynced for an index not yet
// appended blocks until another goroutine appends and syncs it, its
// context ends, or the log fails or closes. The log is safe for
// concurrent use.
//
// # Crashes and disk faults
//
// Crash returns the log as a restart after a crash would find it:
// everything synced, plus the oldest writes of those not yet synced, as
// many as the caller chooses (a write-ahead log loses a suffix). Each
// entry (and topic entry) is one write, and so is each synchronous write, whole: a crash
// keeps a view record, a trim or an installed snapshot entirely or not
// at all. FailNextSync plants an fsync error: the next sync that has
// anything to write fails, and the log fails for good as persistence.Log
// does (see persistence.ErrFailed). Its unsynced writes are then neither
// acknowledged nor readable, and a Crash may still keep some of them, as
// a failed fsync may have written part of the data.
//
// # Differences from persistence.Log
//
//   - Append never blocks: there is no bound on the writes waiting for a
//     sync. The simulation bounds them by syncing.
//   - A synchronous write and WaitSynced for an appended index do not
//     consult their context: their sync happens at once.
//   - No record is ever damaged: persistence.ErrCorrupt would only
//     report a bug of this package.
//   - A snapshot's parts (CreateSnapshot) are held in memory as they are
//     written, not handed to the disk in chunks: before its Commit, a
//     snapshot is nothing a crash could keep any of.
//   - There are no metrics and no logging.
package memlog
