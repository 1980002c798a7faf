package memlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// TestConformance runs each scenario on persistence.Log and on
// memlog.Log, with the same expectations. A persistence.Log syncs in the
// background, a memlog.Log when asked: a scenario waits for syncs with
// WaitSynced, which a memlog answers by syncing, before it looks at
// anything that depends on them, and leaves writes unsynced only in
// crashWith, which holds persistence.Log's syncs.
func TestConformance(t *testing.T) {
	for _, sc := range scenarios {
		for _, impl := range impls {
			t.Run(sc.name+"/"+impl.name, func(t *testing.T) {
				d := impl.open(t)
				defer func() { d.close() }()
				sc.run(&check{t: t, impl: impl.name, d: d})
			})
		}
	}
}

var ctx = context.Background()

var scenarios = []struct {
	name string
	run  func(c *check)
}{
	{"fresh", func(c *check) {
		c.bounds(1, 0, 0)
		c.durable(0)
		c.getErr(1, persistence.ErrNotFound)
		c.scan(1, math.MaxUint64, 1, 0)
		if _, _, err := c.l().Snapshot(); !errors.Is(err, persistence.ErrNotFound) {
			c.t.Fatalf("Snapshot of a fresh log: %v", err)
		}
		if vs, err := c.l().Views(ctx); err != nil || len(vs) != 0 {
			c.t.Fatalf("Views of a fresh log: %v, %v", vs, err)
		}
		if err := c.l().Err(); err != nil {
			c.t.Fatalf("Err of a fresh log: %v", err)
		}
		c.notFailed()
	}},
	{"append, get and scan", func(c *check) {
		c.append(1, 3)
		c.append(4, 4)
		c.append(5, 9)
		c.sync()
		c.bounds(1, 9, 9)
		for i := uint64(1); i <= 9; i++ {
			c.get(i)
		}
		c.getErr(0, persistence.ErrNotFound)
		c.getErr(10, persistence.ErrNotFound)
		c.scan(1, math.MaxUint64, 1, 9)
		c.scan(3, 5, 3, 5)
		c.scan(9, 9, 9, 9)
		c.scan(10, 20, 1, 0)
		c.scan(6, 2, 1, 0)
		// Scan stops at fn's error and returns it.
		stop := errors.New("stop")
		n := 0
		err := c.l().Scan(ctx, 1, 9, func(persistence.Entry) error {
			if n++; n == 4 {
				return stop
			}
			return nil
		})
		if err != stop || n != 4 {
			c.t.Fatalf("Scan with fn failing at the 4th entry: %v after %d", err, n)
		}
	}},
	{"payloads are copied once synced", func(c *check) {
		// Append may keep a payload until its entry is synced (the
		// persistence log's writer copies it into its batch then).
		e := entryFor(1)
		e.Payload = []byte("abc")
		if err := c.l().Append(e); err != nil {
			c.t.Fatal(err)
		}
		c.sync()
		e.Payload[0] = 'X'
		got, err := c.l().Get(1)
		if err != nil || string(got.Payload) != "abc" {
			c.t.Fatalf("Get(1) after the appended payload changed: %q, %v", got.Payload, err)
		}
		got.Payload[1] = 'Y'
		if again, _ := c.l().Get(1); string(again.Payload) != "abc" {
			c.t.Fatalf("Get(1) after a read payload changed: %q", again.Payload)
		}
		// An empty payload reads back as nil.
		if err := c.l().Append(persistence.Entry{Index: 2, Payload: []byte{}}); err != nil {
			c.t.Fatal(err)
		}
		c.sync()
		if got, err := c.l().Get(2); err != nil || got.Payload != nil {
			c.t.Fatalf("Get(2) of an empty payload: %#v, %v", got.Payload, err)
		}
	}},
	{"a fresh log starts anywhere", func(c *check) {
		c.append(1000, 1001)
		c.sync()
		c.bounds(1000, 1001, 1001)
		c.getErr(999, persistence.ErrTrimmed)
		c.get(1000)
	}},
	{"out of order", func(c *check) {
		c.appendErr(persistence.ErrOutOfOrder, 0)
		c.bounds(1, 0, 0)
		c.append(1, 2)
		c.appendErr(persistence.ErrOutOfOrder, 4)    // a gap
		c.appendErr(persistence.ErrOutOfOrder, 2)    // an overwrite
		c.appendErr(persistence.ErrOutOfOrder, 1, 2) // an overwrite
		c.appendErr(persistence.ErrOutOfOrder, 3, 5) // a gap inside the call: nothing is queued
		c.appendErr(persistence.ErrOutOfOrder, 4, 3)
		c.sync()
		c.bounds(1, 2, 2)
		c.append(3, 3)
		c.sync()
		c.scan(1, 3, 1, 3)
	}},
	{"synced and OnSynced", func(c *check) {
		seen := make(chan uint64, 100)
		c.l().OnSynced(func(i uint64) { seen <- i })
		c.append(1, 5)
		c.sync()
		c.bounds(1, 5, 5)
		// persistence.Log calls OnSynced after it wakes the waiters.
		var last uint64
		for last != 5 {
			select {
			case last = <-seen:
			case <-time.After(10 * time.Second):
				c.t.Fatalf("OnSynced reported %d, not 5", last)
			}
		}
		c.l().OnSynced(nil)
		c.append(6, 6)
		c.sync()
		c.bounds(1, 6, 6)
	}},
	{"WaitSynced", func(c *check) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := c.l().WaitSynced(done, 1); !errors.Is(err, context.Canceled) {
			c.t.Fatalf("WaitSynced of an index not appended, with a context done: %v", err)
		}
		if err := c.l().WaitSynced(done, 0); err != nil {
			c.t.Fatalf("WaitSynced(0): %v", err)
		}
		// A waiter for an index not yet appended wakes once it is
		// appended and synced.
		errc := make(chan error, 1)
		go func() { errc <- c.l().WaitSynced(ctx, 3) }()
		c.append(1, 3)
		c.sync()
		if err := <-errc; err != nil {
			c.t.Fatal(err)
		}
	}},
	{"view records", func(c *check) {
		views := []membership.View{
			{Epoch: 1, Members: members(1, 2, 3), Sent: []uint64{0, 0, 0}},
			{Epoch: 2, Members: members(1, 3), Cut: []membership.SenderCut{{ID: 1, Seq: 5}, {ID: 2}, {ID: 3, Seq: 7}}, Start: 12, Sent: []uint64{5, 7}},
			{Epoch: 300, Members: members(1, 3, 4), Start: 16, Sent: []uint64{7, 9, 0}, Joining: []uint64{4}, Recovered: true,
				Suffixes: []membership.Suffix{{ID: 4, From: 3, Donor: 1}}},
		}
		for _, i := range []int{2, 0, 1} { // Views sorts by epoch
			c.putView(views[i], nil)
		}
		c.putView(views[1], nil) // the same again
		other := views[1]
		other.Start++
		c.putView(other, persistence.ErrViewConflict)
		// Records compare as stored: an empty cut is no cut...
		same := views[0]
		same.Cut = []membership.SenderCut{}
		c.putView(same, nil)
		// ...but empty and missing Sent differ.
		differs := views[0]
		differs.Sent = nil
		c.putView(differs, persistence.ErrViewConflict)
		c.views(views)
		c.reopen()
		c.views(views)
		c.crashWith(func(durableLog) {})
		c.views(views)
	}},
	{"a view record syncs what was appended before it", func(c *check) {
		c.append(1, 5)
		c.putView(viewFor(1), nil)
		c.bounds(1, 5, 5)
		c.crashWith(func(durableLog) {})
		c.bounds(1, 5, 5)
		c.scan(1, 5, 1, 5)
	}},
	{"trim", func(c *check) {
		c.append(1, 100)
		c.sync()
		c.trim(40)
		check := func() {
			c.bounds(40, 100, 100)
			c.getErr(39, persistence.ErrTrimmed)
			c.scanErr(1, 100, persistence.ErrTrimmed)
			c.get(40)
			c.scan(40, 100, 40, 100)
		}
		check()
		c.trim(10) // below First: nothing changes
		check()
		c.reopen()
		check()
		c.crashWith(func(durableLog) {})
		check()
		c.appendErr(persistence.ErrOutOfOrder, 100)
		c.append(101, 101)
		c.sync()
		c.bounds(40, 101, 101)
	}},
	{"trim past the end", func(c *check) {
		c.append(1, 2)
		c.sync()
		c.trim(10)
		c.bounds(10, 9, 9)
		c.appendErr(persistence.ErrOutOfOrder, 9) // below the trim point
		c.crashWith(func(durableLog) {})
		c.bounds(10, 9, 9)
		c.appendErr(persistence.ErrOutOfOrder, 9)
		c.append(15, 20) // an empty log starts anywhere at or above First
		c.sync()
		c.bounds(15, 20, 20)
		c.getErr(14, persistence.ErrTrimmed)
		c.reopen()
		c.bounds(15, 20, 20)
		c.scan(15, 20, 15, 20)
	}},
	{"trim with entries not yet synced", func(c *check) {
		c.append(1, 10)
		c.trim(5) // syncs them, then trims
		c.bounds(5, 10, 10)
		c.crashWith(func(durableLog) {})
		c.bounds(5, 10, 10)
		c.scan(5, 10, 5, 10)
	}},
	{"snapshot records", func(c *check) {
		c.append(1, 50)
		c.setSnapshot(10, "first")
		c.setSnapshot(42, "meta")
		c.snapshot(42, "meta")
		c.bounds(1, 50, 50) // SetSnapshot trims nothing
		c.crashWith(func(durableLog) {})
		c.snapshot(42, "meta")
		c.setSnapshot(43, "")
		c.reopen()
		c.snapshot(43, "")
	}},
	{"install a snapshot above the log", func(c *check) {
		c.install(50, 80)
	}},
	{"install a snapshot inside the log", func(c *check) {
		c.install(50, 30)
	}},
	{"install a snapshot in an empty log", func(c *check) {
		c.install(0, 7)
	}},
	{"install an empty snapshot at 0", func(c *check) {
		c.append(1, 20)
		c.sync()
		if err := c.l().InstallSnapshot(ctx, 0, nil); err != nil {
			c.t.Fatal(err)
		}
		c.bounds(1, 0, 0)
		c.snapshot(0, "")
		c.crashWith(func(durableLog) {})
		c.bounds(1, 0, 0)
		c.snapshot(0, "")
		c.append(1, 3)
		c.sync()
		c.scan(1, 3, 1, 3)
	}},
	{"durable mark", func(c *check) {
		c.append(1, 50)
		c.l().SetDurable(30)
		c.l().SetDurable(20) // never goes back
		c.durable(30)
		c.putView(viewFor(1), nil) // writes it
		c.l().SetDurable(45)
		c.append(51, 51)
		c.sync() // appends alone do not write it
		c.durable(45)
		c.crashWith(func(durableLog) {})
		c.durable(30)
		c.l().SetDurable(45)
		c.reopen() // Close writes it
		c.durable(45)
		c.l().SetDurable(48)
		c.setSnapshot(5, "s") // and so do the other synchronous writes
		c.crashWith(func(durableLog) {})
		c.durable(48)
		c.l().SetDurable(49)
		c.trim(3)
		c.crashWith(func(durableLog) {})
		c.durable(49)
		// An installed snapshot sets it, lower or higher.
		if err := c.l().InstallSnapshot(ctx, 10, []byte("s")); err != nil {
			c.t.Fatal(err)
		}
		c.durable(10)
		c.crashWith(func(durableLog) {})
		c.durable(10)
	}},
	{"install a snapshot over a mark not yet written", func(c *check) {
		c.append(1, 50)
		c.sync()
		c.l().SetDurable(40)
		if err := c.l().InstallSnapshot(ctx, 10, []byte("s")); err != nil {
			c.t.Fatal(err)
		}
		c.durable(10)
		c.crashWith(func(durableLog) {})
		c.durable(10)
	}},
	{"a crash keeps exactly what was synced", func(c *check) {
		c.append(1, 50)
		c.sync()
		c.crashWith(func(l durableLog) {
			if err := l.Append(entries(51, 80)...); err != nil {
				c.t.Fatal(err)
			}
			l.SetDurable(50)
			if l.Synced() != 50 || l.Last() != 80 {
				c.t.Fatalf("with syncs held: Synced %d Last %d, want 50 80", l.Synced(), l.Last())
			}
			if _, err := l.Get(51); !errors.Is(err, persistence.ErrNotFound) {
				c.t.Fatalf("Get of an entry not synced: %v", err)
			}
		})
		c.bounds(1, 50, 50)
		c.durable(0)
		c.scan(1, math.MaxUint64, 1, 50)
		c.append(51, 52)
		c.sync()
		c.bounds(1, 52, 52)
		// And again, on the restarted log.
		c.crashWith(func(l durableLog) {
			if err := l.Append(entries(53, 60)...); err != nil {
				c.t.Fatal(err)
			}
		})
		c.bounds(1, 52, 52)
		c.scan(1, 52, 1, 52)
	}},
	{"a crash of a trimmed log that had grown past the trim point", func(c *check) {
		c.append(1, 5)
		c.trim(10)
		c.crashWith(func(l durableLog) {
			if err := l.Append(entries(12, 14)...); err != nil {
				c.t.Fatal(err)
			}
		})
		c.bounds(10, 9, 9)
	}},
	{"close syncs what was appended", func(c *check) {
		c.append(1, 30)
		c.reopen()
		c.bounds(1, 30, 30)
		c.scan(1, 30, 1, 30)
	}},
	{"after close", func(c *check) {
		c.append(1, 10)
		c.sync()
		l := c.l()
		if err := l.Close(); err != nil {
			c.t.Fatal(err)
		}
		if err := l.Close(); !errors.Is(err, persistence.ErrClosed) {
			c.t.Fatalf("second Close: %v", err)
		}
		for _, tc := range []struct {
			what string
			err  error
			want error
		}{
			{"Append", l.Append(entryFor(11)), persistence.ErrClosed},
			{"WaitSynced", l.WaitSynced(ctx, 11), persistence.ErrClosed},
			{"WaitSynced of a synced index", l.WaitSynced(ctx, 10), nil},
			{"Scan", l.Scan(ctx, 1, 10, func(persistence.Entry) error { return nil }), persistence.ErrClosed},
			{"Scan of an empty range", l.Scan(ctx, 11, 20, func(persistence.Entry) error { return nil }), nil},
			{"Scan below First", l.Scan(ctx, 0, 20, func(persistence.Entry) error { return nil }), persistence.ErrTrimmed},
			{"PutView", l.PutView(ctx, viewFor(1)), persistence.ErrClosed},
			{"TrimBefore", l.TrimBefore(ctx, 5), persistence.ErrClosed},
			{"SetSnapshot", l.SetSnapshot(ctx, 5, nil), persistence.ErrClosed},
			{"InstallSnapshot", l.InstallSnapshot(ctx, 5, nil), persistence.ErrClosed},
		} {
			if !errors.Is(tc.err, tc.want) || (tc.want == nil) != (tc.err == nil) {
				c.t.Errorf("%s after Close: %v, want %v", tc.what, tc.err, tc.want)
			}
		}
		c.getErr(5, persistence.ErrClosed)
		c.getErr(0, persistence.ErrNotFound)
		c.getErr(11, persistence.ErrNotFound)
		if _, err := l.Views(ctx); !errors.Is(err, persistence.ErrClosed) {
			c.t.Errorf("Views after Close: %v", err)
		}
		if _, _, err := l.Snapshot(); !errors.Is(err, persistence.ErrClosed) {
			c.t.Errorf("Snapshot after Close: %v", err)
		}
		c.bounds(1, 10, 10)
		if err := l.Err(); err != nil {
			c.t.Errorf("Err after Close: %v", err)
		}
		c.notFailed()
		c.reopen2()
		c.bounds(1, 10, 10)
	}},
	{"snapshot with parts", func(c *check) {
		big := persistence.SnapshotChunkBytes + 10
		c.append(1, 30)
		c.sync()
		c.writeParts(20, "a", 0, 5, big)
		check := func(index uint64, tag string, sizes ...int) {
			c.t.Helper()
			c.snapshot(index, "meta "+tag)
			c.parts(index, tag, sizes...)
		}
		check(20, "a", 0, 5, big)
		c.reopen()
		check(20, "a", 0, 5, big)
		// A crash while the next one is written, before its commit,
		// leaves this one; so does an abort.
		c.crashWith(func(l durableLog) { c.startParts(l, 25, "b", 7, big) })
		check(20, "a", 0, 5, big)
		w := c.startParts(c.l(), 25, "b", 7, big)
		if err := w.Abort(); err != nil {
			c.t.Fatal(err)
		}
		if err := w.Commit(ctx, []byte("meta b")); err == nil {
			c.t.Fatal("Commit after Abort: no error")
		}
		check(20, "a", 0, 5, big)
		// The next one replaces it, whole.
		c.writeParts(25, "c", 3)
		check(25, "c", 3)
		c.reopen()
		check(25, "c", 3)
		// SetSnapshot and InstallSnapshot record snapshots without parts.
		c.setSnapshot(26, "meta d")
		check(26, "d")
		c.writeParts(27, "e", 1, 2)
		c.install(0, 40)
		c.parts(40, "", []int{}...)
		// Attempts at one part: the first closed counts; an aborted one
		// and one closed later leave nothing.
		w, err := c.l().CreateSnapshot(ctx, 41, 1)
		if err != nil {
			c.t.Fatal(err)
		}
		a, _ := w.Part(0)
		b, _ := w.Part(0)
		_, _ = a.Write([]byte("aborted"))
		a.Abort()
		_, _ = b.Write(partContent("f", 0, 9))
		other, _ := w.Part(0)
		_, _ = other.Write([]byte("late"))
		if err := b.Close(); err != nil {
			c.t.Fatal(err)
		}
		if err := other.Close(); err == nil {
			c.t.Fatal("a second attempt closed: no error")
		}
		r, err := w.Reader(ctx)
		if err != nil || r.Index() != 41 || r.Meta() != nil {
			c.t.Fatalf("Reader before Commit: %v", err)
		}
		c.readParts(r, "f", 9)
		if err := w.Commit(ctx, []byte("meta f")); err != nil {
			c.t.Fatal(err)
		}
		check(41, "f", 9)
		c.reopen()
		check(41, "f", 9)
		// A snapshot created before InstallSnapshot replaced the log's
		// contents does not commit over it.
		w = c.startParts(c.l(), 60, "g", 4)
		if err := c.l().InstallSnapshot(ctx, 70, []byte("meta h")); err != nil {
			c.t.Fatal(err)
		}
		if err := w.Commit(ctx, []byte("meta g")); !errors.Is(err, persistence.ErrSnapshotStale) {
			c.t.Fatalf("Commit after InstallSnapshot: %v, want ErrSnapshotStale", err)
		}
		check(70, "h")
		c.reopen()
		check(70, "h")
	}},
	{"a waiter gets ErrClosed at Close", func(c *check) {
		errc := make(chan error, 1)
		go func() { errc <- c.l().WaitSynced(ctx, 5) }() // waiting by Close or not
		if err := c.l().Close(); err != nil {
			c.t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, persistence.ErrClosed) {
			c.t.Fatalf("WaitSynced across Close: %v", err)
		}
		c.reopen2()
	}},
}

// check drives one implementation's log through a scenario.
type check struct {
	t    *testing.T
	impl string
	d    disk
}

func (c *check) l() durableLog { return c.d.log() }

// sync waits until everything appended is synced.
func (c *check) sync() {
	c.t.Helper()
	if err := c.l().WaitSynced(ctx, c.l().Last()); err != nil {
		c.t.Fatalf("WaitSynced(%d): %v", c.l().Last(), err)
	}
}

func (c *check) reopen() {
	c.t.Helper()
	c.d.reopen()
}

// reopen2 opens again a log the scenario closed itself.
func (c *check) reopen2() {
	c.t.Helper()
	c.d.crashWith(func(durableLog) {})
}

func (c *check) crashWith(f func(durableLog)) {
	c.t.Helper()
	c.d.crashWith(f)
}

func (c *check) append(from, to uint64) {
	c.t.Helper()
	if err := c.l().Append(entries(from, to)...); err != nil {
		c.t.Fatalf("Append(%d..%d): %v", from, to, err)
	}
}

func (c *check) appendErr(want error, indexes ...uint64) {
	c.t.Helper()
	es := make([]persistence.Entry, len(indexes))
	for i, idx := range indexes {
		es[i] = entryFor(idx)
	}
	if err := c.l().Append(es...); !errors.Is(err, want) {
		c.t.Fatalf("Append(%v): %v, want %v", indexes, err, want)
	}
}

func (c *check) bounds(first, last, synced uint64) {
	c.t.Helper()
	if f, l, s := c.l().First(), c.l().Last(), c.l().Synced(); f != first || l != last || s != synced {
		c.t.Fatalf("First %d Last %d Synced %d, want %d %d %d", f, l, s, first, last, synced)
	}
}

func (c *check) durable(want uint64) {
	c.t.Helper()
	if got := c.l().Durable(); got != want {
		c.t.Fatalf("Durable %d, want %d", got, want)
	}
}

func (c *check) notFailed() {
	c.t.Helper()
	select {
	case <-c.l().Failed():
		c.t.Fatal("Failed is closed")
	default:
	}
}

func (c *check) get(index uint64) {
	c.t.Helper()
	e, err := c.l().Get(index)
	if err != nil {
		c.t.Fatalf("Get(%d): %v", index, err)
	}
	if got, want := describe(e), describe(entryFor(index)); got != want {
		c.t.Fatalf("Get(%d) = %s, want %s", index, got, want)
	}
}

func (c *check) getErr(index uint64, want error) {
	c.t.Helper()
	if _, err := c.l().Get(index); !errors.Is(err, want) {
		c.t.Fatalf("Get(%d): %v, want %v", index, err, want)
	}
}

// scan checks that Scan(from, to) reads exactly entries first..last.
func (c *check) scan(from, to, first, last uint64) {
	c.t.Helper()
	var got []string
	err := c.l().Scan(ctx, from, to, func(e persistence.Entry) error {
		got = append(got, describe(e))
		return nil
	})
	if err != nil {
		c.t.Fatalf("Scan(%d, %d): %v", from, to, err)
	}
	var want []string
	for i := first; i <= last; i++ {
		want = append(want, describe(entryFor(i)))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		c.t.Fatalf("Scan(%d, %d) read %d entries, want %d..%d:\n%v", from, to, len(got), first, last, got)
	}
}

func (c *check) scanErr(from, to uint64, want error) {
	c.t.Helper()
	if err := c.l().Scan(ctx, from, to, func(persistence.Entry) error { return nil }); !errors.Is(err, want) {
		c.t.Fatalf("Scan(%d, %d): %v, want %v", from, to, err, want)
	}
}

func (c *check) trim(index uint64) {
	c.t.Helper()
	if err := c.l().TrimBefore(ctx, index); err != nil {
		c.t.Fatalf("TrimBefore(%d): %v", index, err)
	}
}

func (c *check) putView(v membership.View, want error) {
	c.t.Helper()
	if err := c.l().PutView(ctx, v); !errors.Is(err, want) || (want == nil) != (err == nil) {
		c.t.Fatalf("PutView(epoch %d): %v, want %v", v.Epoch, err, want)
	}
}

// views checks that Views returns want (as stored: an empty cut reads
// back as none).
func (c *check) views(want []membership.View) {
	c.t.Helper()
	got, err := c.l().Views(ctx)
	if err != nil {
		c.t.Fatalf("Views: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		c.t.Fatalf("Views:\n%+v\nwant\n%+v", got, want)
	}
}

func (c *check) setSnapshot(index uint64, meta string) {
	c.t.Helper()
	if err := c.l().SetSnapshot(ctx, index, []byte(meta)); err != nil {
		c.t.Fatalf("SetSnapshot(%d): %v", index, err)
	}
}

// snapshot checks the snapshot record; an empty meta reads back as nil.
func (c *check) snapshot(index uint64, meta string) {
	c.t.Helper()
	i, m, err := c.l().Snapshot()
	if err != nil || i != index || string(m) != meta || (meta == "") != (m == nil) {
		c.t.Fatalf("Snapshot: %d %q %v, want %d %q", i, m, err, index, meta)
	}
}

// partContent is the content of part i of snapshot tag.
func partContent(tag string, i, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = tag[0] + byte(i*31+j*7)
	}
	return b
}

// startParts writes the parts of snapshot tag (of the given sizes) at
// index, without committing it.
func (c *check) startParts(l durableLog, index uint64, tag string, sizes ...int) persistence.SnapshotWriter {
	c.t.Helper()
	w, err := l.CreateSnapshot(ctx, index, len(sizes))
	if err != nil {
		c.t.Fatalf("CreateSnapshot(%d): %v", index, err)
	}
	for i, size := range sizes {
		pw, err := w.Part(i)
		if err != nil {
			c.t.Fatal(err)
		}
		if _, err := pw.Write(partContent(tag, i, size)); err != nil {
			c.t.Fatal(err)
		}
		if err := pw.Close(); err != nil {
			c.t.Fatal(err)
		}
	}
	return w
}

// writeParts writes and commits snapshot tag, with metadata "meta tag".
func (c *check) writeParts(index uint64, tag string, sizes ...int) {
	c.t.Helper()
	if err := c.startParts(c.l(), index, tag, sizes...).Commit(ctx, []byte("meta "+tag)); err != nil {
		c.t.Fatalf("Commit(%d): %v", index, err)
	}
}

// parts checks the parts of the log's snapshot.
func (c *check) parts(index uint64, tag string, sizes ...int) {
	c.t.Helper()
	r, err := c.l().ReadSnapshot()
	if err != nil || r.Index() != index {
		c.t.Fatalf("ReadSnapshot: %v, want the snapshot at %d", err, index)
	}
	c.readParts(r, tag, sizes...)
}

func (c *check) readParts(r persistence.SnapshotReader, tag string, sizes ...int) {
	c.t.Helper()
	if r.Parts() != len(sizes) {
		c.t.Fatalf("snapshot %d has %d parts, want %d", r.Index(), r.Parts(), len(sizes))
	}
	for i, size := range sizes {
		got, err := io.ReadAll(r.Part(i))
		if err != nil || r.Size(i) != int64(size) || !bytes.Equal(got, partContent(tag, i, size)) {
			c.t.Fatalf("snapshot %d part %d: %d bytes (size %d), %v; want %d bytes of %q", r.Index(), i, len(got), r.Size(i), err, size, tag)
		}
	}
}

// install appends 1..last, installs a snapshot at snap and checks the
// log before and after a crash and a reopen.
func (c *check) install(last, snap uint64) {
	c.t.Helper()
	if last > 0 {
		c.append(1, last)
	}
	if err := c.l().InstallSnapshot(ctx, snap, []byte("state")); err != nil {
		c.t.Fatal(err)
	}
	check := func() {
		c.t.Helper()
		c.bounds(snap+1, snap, snap)
		c.durable(snap)
		c.getErr(snap, persistence.ErrTrimmed)
		c.snapshot(snap, "state")
		c.appendErr(persistence.ErrOutOfOrder, snap)
	}
	check()
	c.crashWith(func(durableLog) {})
	check()
	c.reopen()
	check()
	c.append(snap+1, snap+20)
	c.sync()
	c.scan(snap+1, snap+20, snap+1, snap+20)
}
