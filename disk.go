package convoy

import (
	"context"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// durableLog is what the runtime needs of a durable log (Group.disk):
// exactly the methods of *persistence.Log it calls, with their contract
// (see persistence.Log for each). Production runs *persistence.Log; a
// whole-group simulation can run internal/memlog.Log instead, whose syncs
// and crashes it drives.
//
// The runtime calls these methods from its loop, at Open before the loop
// starts (the replay), from the application's goroutine in
// Group.Snapshot (SetSnapshot, TrimBefore), from the goroutine that
// serves a suffix transfer (WaitSynced, Scan) and from Group.Close
// (Close), so an implementation must be safe for concurrent use. The
// synchronous writes (PutView, TrimBefore, SetSnapshot, InstallSnapshot)
// and WaitSynced return only once their write is synced: the caller, the
// loop included, waits for the disk in them. Errors wrap persistence's
// sentinel errors (persistence.ErrNotFound, persistence.ErrFailed, …),
// which callers compare with errors.Is.
type durableLog interface {
	// Append queues entries in final order, without waiting for their
	// sync.
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
	// SetSnapshot and Snapshot write and read the snapshot record;
	// InstallSnapshot replaces the log's contents with a snapshot.
	SetSnapshot(ctx context.Context, index uint64, meta []byte) error
	Snapshot() (index uint64, meta []byte, err error)
	InstallSnapshot(ctx context.Context, index uint64, meta []byte) error
	// SetDurable raises the durable mark, Durable reads it.
	SetDurable(index uint64)
	Durable() uint64
	// Close writes what was queued and closes the log.
	Close() error
}

var _ durableLog = (*persistence.Log)(nil)
