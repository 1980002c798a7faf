package memlog_test

import (
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/convoy-gcs/convoy/internal/memlog"
	"github.com/convoy-gcs/convoy/persistence"
)

// mustAppend appends entries from..to.
func mustAppend(t *testing.T, l *memlog.Log, from, to uint64) {
	t.Helper()
	if err := l.Append(entries(from, to)...); err != nil {
		t.Fatalf("Append(%d..%d): %v", from, to, err)
	}
}

func checkBounds(t *testing.T, l *memlog.Log, first, last, synced uint64) {
	t.Helper()
	if f, la, s := l.First(), l.Last(), l.Synced(); f != first || la != last || s != synced {
		t.Fatalf("First %d Last %d Synced %d, want %d %d %d", f, la, s, first, last, synced)
	}
}

// scanned returns the indexes Scan reads from 1 (or First) on.
func scanned(t *testing.T, l *memlog.Log) []uint64 {
	t.Helper()
	var got []uint64
	if err := l.Scan(ctx, l.First(), math.MaxUint64, func(e persistence.Entry) error {
		if describe(e) != describe(entryFor(e.Index)) {
			t.Fatalf("Scan read %s", describe(e))
		}
		got = append(got, e.Index)
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got
}

// TestSyncIsExplicit: appends wait for Sync, which runs OnSynced before
// it returns.
func TestSyncIsExplicit(t *testing.T) {
	l := memlog.New()
	var seen []uint64
	l.OnSynced(func(i uint64) { seen = append(seen, i) })
	mustAppend(t, l, 1, 3)
	mustAppend(t, l, 4, 4)
	checkBounds(t, l, 1, 4, 0)
	if n := l.Unsynced(); n != 4 {
		t.Fatalf("Unsynced %d, want 4 (one per entry)", n)
	}
	if _, err := l.Get(1); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Get of an entry not synced: %v", err)
	}
	if got := scanned(t, l); len(got) != 0 {
		t.Fatalf("Scan read %v before a sync", got)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, l, 1, 4, 4)
	if l.Unsynced() != 0 || len(seen) != 1 || seen[0] != 4 {
		t.Fatalf("after Sync: Unsynced %d, OnSynced saw %v", l.Unsynced(), seen)
	}
	// A sync with nothing to write is no sync.
	if err := l.Sync(); err != nil || len(seen) != 1 {
		t.Fatalf("Sync with nothing to write: %v, OnSynced saw %v", err, seen)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
}

// TestWaitersSync: a synchronous write, or WaitSynced for an appended
// index, syncs everything appended before it.
func TestWaitersSync(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(l *memlog.Log) error
	}{
		{"PutView", func(l *memlog.Log) error { return l.PutView(ctx, viewFor(1)) }},
		{"TrimBefore", func(l *memlog.Log) error { return l.TrimBefore(ctx, 2) }},
		{"SetSnapshot", func(l *memlog.Log) error { return l.SetSnapshot(ctx, 1, []byte("s")) }},
		{"WaitSynced", func(l *memlog.Log) error { return l.WaitSynced(ctx, 2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := memlog.New()
			var seen []uint64
			l.OnSynced(func(i uint64) { seen = append(seen, i) })
			mustAppend(t, l, 1, 5)
			if err := tc.wait(l); err != nil {
				t.Fatal(err)
			}
			if l.Synced() != 5 || l.Unsynced() != 0 || len(seen) != 1 || seen[0] != 5 {
				t.Fatalf("Synced %d, Unsynced %d, OnSynced saw %v; want 5, 0, [5]", l.Synced(), l.Unsynced(), seen)
			}
		})
	}
}

// TestWaitSyncedBlocks: WaitSynced for an index not appended yet waits
// for another goroutine's append and sync, or the log's failure or
// crash. (In a synctest bubble, synctest.Wait returns once the waiter is
// blocked.)
func TestWaitSyncedBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		then func(t *testing.T, l *memlog.Log)
		want error
	}{
		{"synced", func(t *testing.T, l *memlog.Log) {
			mustAppend(t, l, 1, 5)
			if err := l.Sync(); err != nil {
				t.Error(err)
			}
		}, nil},
		{"failed", func(t *testing.T, l *memlog.Log) {
			l.FailNextSync(nil)
			mustAppend(t, l, 1, 5)
			_ = l.Sync()
		}, persistence.ErrFailed},
		{"closed", func(_ *testing.T, l *memlog.Log) { _ = l.Close() }, persistence.ErrClosed},
		{"crashed", func(_ *testing.T, l *memlog.Log) { l.Crash(nil) }, persistence.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := memlog.New()
				errc := make(chan error, 1)
				go func() { errc <- l.WaitSynced(ctx, 5) }()
				synctest.Wait()
				select {
				case err := <-errc:
					t.Fatalf("WaitSynced returned %v before index 5 was appended", err)
				default:
				}
				tc.then(t, l)
				if err := <-errc; !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
					t.Fatalf("WaitSynced: %v, want %v", err, tc.want)
				}
			})
		})
	}
}

// TestCrashKeepsPrefix: a crash keeps what was synced and the oldest of
// the unsynced writes, as many as chosen.
func TestCrashKeepsPrefix(t *testing.T) {
	for _, tc := range []struct {
		keep     int
		wantLast uint64
	}{{-3, 10}, {0, 10}, {1, 11}, {7, 17}, {10, 20}, {99, 20}} {
		l := memlog.New()
		mustAppend(t, l, 1, 10)
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, 11, 13)
		mustAppend(t, l, 14, 20)
		var asked int
		c := l.Crash(func(n int) int { asked = n; return tc.keep })
		if asked != 10 {
			t.Fatalf("keep was asked about %d unsynced writes, want 10", asked)
		}
		checkBounds(t, c, 1, tc.wantLast, tc.wantLast)
		if got := scanned(t, c); uint64(len(got)) != tc.wantLast {
			t.Fatalf("keep %d: the restarted log holds %v", tc.keep, got)
		}
		// The crashed log is closed.
		if err := l.Append(entryFor(21)); !errors.Is(err, persistence.ErrClosed) {
			t.Fatalf("Append to a crashed log: %v", err)
		}
	}
}

// TestCrashTwice: a log crashed again gives another, independent log.
func TestCrashTwice(t *testing.T) {
	l := memlog.New()
	mustAppend(t, l, 1, 4)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, 5, 8)
	none, all := l.Crash(nil), l.Crash(func(n int) int { return n })
	checkBounds(t, none, 1, 4, 4)
	checkBounds(t, all, 1, 8, 8)
	mustAppend(t, none, 5, 6)
	if err := none.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := all.TrimBefore(ctx, 3); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, none, 1, 6, 6)
	checkBounds(t, all, 3, 8, 8)
	if got := scanned(t, none); len(got) != 6 {
		t.Fatalf("one restart holds %v", got)
	}
	if got := scanned(t, all); len(got) != 6 || got[0] != 3 {
		t.Fatalf("the other holds %v", got)
	}
}

// TestFailNextSync: a planted fsync error fails the log for good, as
// persistence.Log fails; the writes it did not acknowledge may still
// survive a crash, each synchronous write whole.
func TestFailNextSync(t *testing.T) {
	l := memlog.New()
	mustAppend(t, l, 1, 10)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("disk on fire")
	l.FailNextSync(cause)
	// A sync with nothing to write does not use it.
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Failed():
		t.Fatal("failed before a sync with anything to write")
	default:
	}
	mustAppend(t, l, 11, 15)
	l.SetDurable(12)
	err := l.PutView(ctx, viewFor(1))
	if !errors.Is(err, persistence.ErrFailed) || !errors.Is(err, cause) {
		t.Fatalf("PutView at the planted failure: %v", err)
	}
	if err := l.Err(); !errors.Is(err, persistence.ErrFailed) || !errors.Is(err, cause) {
		t.Fatalf("Err: %v", err)
	}
	select {
	case <-l.Failed():
	default:
		t.Fatal("Failed is not closed")
	}
	checkBounds(t, l, 1, 15, 10)
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"Append", l.Append(entryFor(16))},
		{"Sync", l.Sync()},
		{"WaitSynced", l.WaitSynced(ctx, 11)},
		{"PutView", l.PutView(ctx, viewFor(2))},
		{"TrimBefore", l.TrimBefore(ctx, 5)},
		{"SetSnapshot", l.SetSnapshot(ctx, 5, nil)},
		{"InstallSnapshot", l.InstallSnapshot(ctx, 5, nil)},
	} {
		if !errors.Is(tc.err, persistence.ErrFailed) || !errors.Is(tc.err, cause) {
			t.Errorf("%s on a failed log: %v", tc.what, tc.err)
		}
	}
	// What was acknowledged stays readable; nothing more is.
	if err := l.WaitSynced(ctx, 10); err != nil {
		t.Fatalf("WaitSynced of a synced index: %v", err)
	}
	if got := scanned(t, l); len(got) != 10 {
		t.Fatalf("Scan of a failed log read %v", got)
	}
	if _, err := l.Get(11); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Get of an unacknowledged entry: %v", err)
	}
	if vs, err := l.Views(ctx); err != nil || len(vs) != 0 {
		t.Fatalf("Views after a failed PutView: %v, %v", vs, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close of a failed log: %v", err)
	}

	// A crash keeps the entries, then the view record with the durable
	// mark it carried, whole.
	if n := l.Unsynced(); n != 6 {
		t.Fatalf("Unsynced %d, want 6 (5 entries, 1 view record)", n)
	}
	for keep, want := range []struct {
		last, mark uint64
		views      int
	}{{10, 0, 0}, {11, 0, 0}, {15, 0, 0}, {15, 12, 1}} {
		c := l.Crash(func(int) int { return []int{0, 1, 5, 6}[keep] })
		vs, err := c.Views(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Last() != want.last || c.Durable() != want.mark || len(vs) != want.views || c.Err() != nil {
			t.Fatalf("crash keeping %d: Last %d Durable %d, %d views, Err %v; want %d %d %d, nil",
				[]int{0, 1, 5, 6}[keep], c.Last(), c.Durable(), len(vs), c.Err(), want.last, want.mark, want.views)
		}
	}
}

// TestFailedInstallSnapshot: an installed snapshot whose sync failed
// survives a crash whole or not at all.
func TestFailedInstallSnapshot(t *testing.T) {
	l := memlog.New()
	mustAppend(t, l, 1, 10)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.FailNextSync(nil)
	if err := l.InstallSnapshot(ctx, 30, []byte("s")); !errors.Is(err, memlog.ErrInjected) {
		t.Fatalf("InstallSnapshot at the planted failure: %v", err)
	}
	old, installed := l.Crash(nil), l.Crash(func(n int) int { return n })
	checkBounds(t, old, 1, 10, 10)
	if _, _, err := old.Snapshot(); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Snapshot without the install: %v", err)
	}
	checkBounds(t, installed, 31, 30, 30)
	if i, meta, err := installed.Snapshot(); err != nil || i != 30 || string(meta) != "s" || installed.Durable() != 30 {
		t.Fatalf("with the install: Snapshot %d %q %v, Durable %d", i, meta, err, installed.Durable())
	}
}

// TestCloseFailure: Close reports the failure of its own sync.
func TestCloseFailure(t *testing.T) {
	l := memlog.New()
	mustAppend(t, l, 1, 3)
	l.FailNextSync(nil)
	if err := l.Close(); !errors.Is(err, persistence.ErrFailed) || !errors.Is(err, memlog.ErrInjected) {
		t.Fatalf("Close at the planted failure: %v", err)
	}
	if err := l.Close(); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	checkBounds(t, l.Crash(nil), 1, 0, 0)
}

// TestInstallSnapshotMark: the durable mark written with an installed
// snapshot is the snapshot's index, whatever mark SetDurable set since
// the last one written.
func TestInstallSnapshotMark(t *testing.T) {
	for _, snap := range []uint64{0, 10, 80} {
		l := memlog.New()
		mustAppend(t, l, 1, 50)
		l.SetDurable(40)
		if err := l.InstallSnapshot(ctx, snap, nil); err != nil {
			t.Fatal(err)
		}
		if c := l.Crash(nil); c.Durable() != snap {
			t.Fatalf("snapshot at %d: Durable %d after a crash", snap, c.Durable())
		}
	}
}

// TestConcurrentUse runs appenders, syncers, readers and waiters at once
// (for -race).
func TestConcurrentUse(t *testing.T) {
	l := memlog.New()
	const n = 2000
	var mu sync.Mutex
	next := uint64(1)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				if i > n {
					mu.Unlock()
					return
				}
				next++
				err := l.Append(entryFor(i))
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if i%13 == 0 {
					if err := l.Sync(); err != nil {
						t.Error(err)
						return
					}
				}
				if i%97 == 0 {
					if err := l.WaitSynced(ctx, i); err != nil {
						t.Error(err)
						return
					}
					if _, err := l.Get(i); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			from := l.First()
			err := l.Scan(ctx, from, math.MaxUint64, func(e persistence.Entry) error {
				if describe(e) != describe(entryFor(e.Index)) {
					t.Errorf("Scan read %s", describe(e))
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		if err := l.WaitSynced(ctx, n); err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() {
		for i := uint64(1); i <= 5; i++ {
			if err := l.SetSnapshot(ctx, i, []byte("s")); err != nil {
				t.Error(err)
			}
			l.SetDurable(i)
		}
	})
	// The last waiter needs a sync after the last append.
	for l.Last() < n {
		if err := l.WaitSynced(ctx, l.Last()); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := scanned(t, l); len(got) != n {
		t.Fatalf("read %d entries, want %d", len(got), n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: indexes at the ends of the range give errors or odd
// bounds, as with persistence.Log, never a panic.
func TestBadInput(t *testing.T) {
	l := memlog.New()
	mustAppend(t, l, math.MaxUint64-1, math.MaxUint64)
	if err := l.Append(entryFor(math.MaxUint64), entryFor(0)); !errors.Is(err, persistence.ErrOutOfOrder) {
		t.Fatalf("Append across the end of the range: %v", err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint64{0, 1, math.MaxUint64 - 1, math.MaxUint64} {
		_, _ = l.Get(i)
	}
	_ = l.Scan(ctx, 0, math.MaxUint64, func(persistence.Entry) error { return nil })
	_ = l.Scan(ctx, math.MaxUint64, math.MaxUint64, func(persistence.Entry) error { return nil })
	if err := l.TrimBefore(ctx, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if err := l.InstallSnapshot(ctx, math.MaxUint64, nil); err != nil {
		t.Fatal(err)
	}
	_ = l.Append(entryFor(0))
	c := l.Crash(func(n int) int { return n })
	_, _ = c.Get(1)
	_ = c.Scan(ctx, c.First(), math.MaxUint64, func(persistence.Entry) error { return nil })
}

// BenchmarkAppendSync appends 100-byte entries one by one, syncing after
// every eighth, as a simulated member's durable delivery does.
func BenchmarkAppendSync(b *testing.B) {
	l := memlog.New()
	p := make([]byte, 100)
	b.ReportAllocs()
	for i := range uint64(b.N) {
		if err := l.Append(persistence.Entry{Index: i + 1, Epoch: 1, Payload: p}); err != nil {
			b.Fatal(err)
		}
		if i%8 == 7 {
			if err := l.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
