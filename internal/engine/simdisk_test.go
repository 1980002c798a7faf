package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/internal/memlog"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// simDisk is a member's disk in a simulation whose durable logs are held
// in memory (internal/memlog) instead of Pebble on a crashable file
// system: the log syncs an fsync's time after a write, and a crash keeps
// what was synced and the oldest of the rest, as many as the seed draws.
// Pebble keeps objects in process-wide pools that must not cross from
// one synctest bubble to another; a run whose disks are all simDisks
// runs no Pebble, so that seeds can run side by side.
type simDisk struct {
	// fsync is how long a sync takes after the write that asks for it.
	fsync time.Duration
	// after schedules a sync: time.AfterFunc, or the deterministic
	// simulation's scheduler.
	after func(d time.Duration, f func())

	mu sync.Mutex
	// log is the log a member opening now finds: the running
	// incarnation's, or what its crash left.
	log *memlog.Log
}

func newSimDisk(fsync time.Duration) *simDisk {
	return &simDisk{fsync: fsync, log: memlog.New(), after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// open opens the log for a member starting on this disk (Config.openDisk).
// The log left by the previous incarnation, which has ended, is closed
// (or crashed): the member finds all it wrote.
func (d *simDisk) open(context.Context) (durableLog, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = d.log.Crash(func(unsynced int) int { return unsynced })
	return &syncingLog{Log: d.log, fsync: d.fsync, after: d.after}, nil
}

// crash stops the running incarnation's log as a crash of the machine
// would (its later writes fail), and leaves for the next one what was
// synced and the oldest keep(n) of the n writes that were not.
func (d *simDisk) crash(keep func(unsynced int) int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = d.log.Crash(keep)
}

// wipe replaces the disk by an empty one; the running incarnation's log
// stops as in a crash.
func (d *simDisk) wipe() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log.Crash(nil)
	d.log = memlog.New()
}

// views returns the view records synced on the disk, or false if the log
// is closed (its member crashed).
func (d *simDisk) views(ctx context.Context) ([]membership.View, bool, error) {
	d.mu.Lock()
	l := d.log
	d.mu.Unlock()
	vs, err := l.Views(ctx)
	if errors.Is(err, persistence.ErrClosed) {
		return nil, false, nil
	}
	return vs, true, err
}

// syncingLog is a memlog.Log that syncs itself like persistence.Log's
// group commit: a write waits at most fsync for the sync that makes it
// durable, and the writes made meanwhile share it.
type syncingLog struct {
	*memlog.Log
	fsync time.Duration
	after func(d time.Duration, f func())

	mu  sync.Mutex
	due bool // a sync is scheduled
}

func (l *syncingLog) Append(es ...persistence.Entry) error {
	err := l.Log.Append(es...)
	if err == nil {
		l.syncSoon()
	}
	return err
}

func (l *syncingLog) AppendTopic(es ...persistence.TopicEntry) error {
	err := l.Log.AppendTopic(es...)
	if err == nil {
		l.syncSoon()
	}
	return err
}

// syncSoon schedules a sync in fsync's time, unless one is scheduled.
func (l *syncingLog) syncSoon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.due {
		return
	}
	l.due = true
	l.after(l.fsync, func() {
		l.mu.Lock()
		l.due = false
		l.mu.Unlock()
		_ = l.Log.Sync() // fails only once the log is closed or crashed
	})
}
