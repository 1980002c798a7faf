package persistence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/membership/record"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// payloadFor is the deterministic payload of entry index: its length
// varies from 0 to 199 bytes.
func payloadFor(index uint64) []byte {
	n := int(index*7919) % 200
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(index>>(8*(i%8))) ^ byte(i)
	}
	return p
}

func entryFor(index uint64) Entry {
	return Entry{Index: index, Epoch: 1 + index/1000, Sender: index % 5, Seq: index / 5, Payload: payloadFor(index)}
}

// checkEntry fails unless e is exactly entryFor(e.Index).
func checkEntry(t testing.TB, index uint64, e Entry) {
	t.Helper()
	want := entryFor(index)
	if e.Index != want.Index || e.Epoch != want.Epoch || e.Sender != want.Sender || e.Seq != want.Seq || string(e.Payload) != string(want.Payload) {
		t.Fatalf("entry %d: got %+v, want %+v", index, e, want)
	}
}

func openLog(t testing.TB, fs vfs.FS, dir string) *Log {
	t.Helper()
	l, err := Open(context.Background(), Options{Dir: dir, FS: fs})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// appendRange appends [from, to] in calls of 1..maxPer entries.
func appendRange(t testing.TB, l *Log, rng *rand.Rand, from, to uint64, maxPer int) {
	t.Helper()
	for i := from; i <= to; {
		n := uint64(1 + rng.IntN(maxPer))
		if i+n-1 > to {
			n = to - i + 1
		}
		es := make([]Entry, n)
		for j := range es {
			es[j] = entryFor(i + uint64(j))
		}
		if err := l.Append(es...); err != nil {
			t.Fatalf("Append(%d..%d): %v", i, i+n-1, err)
		}
		i += n
	}
}

func scanAll(t testing.TB, l *Log, from, to uint64) {
	t.Helper()
	next := from
	err := l.Scan(context.Background(), from, to, func(e Entry) error {
		checkEntry(t, next, e)
		next++
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%d, %d): %v", from, to, err)
	}
	if next != to+1 {
		t.Fatalf("Scan(%d, %d) stopped at %d", from, to, next)
	}
}

func TestRoundTrip(t *testing.T) {
	const n = 10000
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}{
		{"disk", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }},
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "db" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := tc.fs(t)
			l := openLog(t, fs, dir)
			if f, la, s := l.First(), l.Last(), l.Synced(); f != 1 || la != 0 || s != 0 {
				t.Fatalf("fresh log: First %d Last %d Synced %d, want 1 0 0", f, la, s)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			appendRange(t, l, rng, 1, n, 40)
			if err := l.WaitSynced(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			for i := uint64(1); i <= n; i++ {
				e, err := l.Get(i)
				if err != nil {
					t.Fatalf("Get(%d): %v", i, err)
				}
				checkEntry(t, i, e)
			}
			scanAll(t, l, 1, n)
			scanAll(t, l, 4321, 4400)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			l = openLog(t, fs, dir)
			defer l.Close()
			if f, la, s := l.First(), l.Last(), l.Synced(); f != 1 || la != n || s != n {
				t.Fatalf("after reopen: First %d Last %d Synced %d, want 1 %d %d", f, la, s, n, n)
			}
			scanAll(t, l, 1, n)
			// to beyond Synced is clamped.
			var count int
			if err := l.Scan(context.Background(), 1, math.MaxUint64, func(Entry) error { count++; return nil }); err != nil || count != n {
				t.Fatalf("Scan to MaxUint64: %d entries, %v", count, err)
			}
			// The log continues where it stopped.
			appendRange(t, l, rng, n+1, n+100, 10)
			if err := l.WaitSynced(context.Background(), n+100); err != nil {
				t.Fatal(err)
			}
			scanAll(t, l, n-5, n+100)
		})
	}
}

func TestGroupCommit(t *testing.T) {
	const n = 20000
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	l, err := Open(context.Background(), Options{Dir: t.TempDir(), MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var notified []uint64
	var nmu sync.Mutex
	all := make(chan struct{})
	var allOnce sync.Once
	l.OnSynced(func(i uint64) {
		nmu.Lock()
		notified = append(notified, i)
		nmu.Unlock()
		if i == n {
			allOnce.Do(func() { close(all) })
		}
	})
	for i := uint64(1); i <= n; i++ {
		if err := l.Append(entryFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WaitSynced(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	fsyncs := l.fsyncs.Load()
	t.Logf("%d entries in %d synced batches", n, fsyncs)
	if fsyncs == 0 || fsyncs >= n/10 {
		t.Fatalf("%d fsyncs for %d single-entry appends: group commit does not group", fsyncs, n)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Sum
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int64(p.Count)
				}
			}
		}
	}
	if got["convoy.persistence.appended.entries"] != n || got["convoy.persistence.batch.entries"] != n ||
		got["convoy.persistence.fsyncs"] != int64(fsyncs) || got["convoy.persistence.sync.latency"] != int64(fsyncs) {
		t.Fatalf("metrics %v, want %d entries and %d fsyncs", got, n, fsyncs)
	}
	<-all // OnSynced runs after waiters are woken
	nmu.Lock()
	defer nmu.Unlock()
	if len(notified) == 0 || notified[len(notified)-1] != n {
		t.Fatalf("OnSynced saw %d calls, last %v", len(notified), notified[max(0, len(notified)-1):])
	}
	for i := 1; i < len(notified); i++ {
		if notified[i] < notified[i-1] {
			t.Fatalf("OnSynced went backwards: %d after %d", notified[i], notified[i-1])
		}
	}
}

func TestAppendOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   []uint64 // indexes appended first, one call each
		trim    uint64   // TrimBefore after setup, if non-zero
		appends [][]uint64
		wantErr error // for the last append
		last    uint64
	}{
		{name: "fresh log starts anywhere", appends: [][]uint64{{1000, 1001}}, last: 1001},
		{name: "index zero", appends: [][]uint64{{0}}, wantErr: ErrOutOfOrder, last: 0},
		{name: "next", setup: []uint64{1, 2}, appends: [][]uint64{{3, 4}}, last: 4},
		{name: "gap", setup: []uint64{1, 2}, appends: [][]uint64{{4}}, wantErr: ErrOutOfOrder, last: 2},
		{name: "repeat", setup: []uint64{1, 2}, appends: [][]uint64{{2}}, wantErr: ErrOutOfOrder, last: 2},
		{name: "gap inside call", setup: []uint64{1}, appends: [][]uint64{{2, 4}}, wantErr: ErrOutOfOrder, last: 1},
		{name: "after trim past end", setup: []uint64{1, 2}, trim: 10, appends: [][]uint64{{15}}, last: 15},
		{name: "below trim point", setup: []uint64{1, 2}, trim: 10, appends: [][]uint64{{9}}, wantErr: ErrOutOfOrder, last: 9},
		{name: "after trim inside", setup: []uint64{1, 2, 3}, trim: 2, appends: [][]uint64{{5}}, wantErr: ErrOutOfOrder, last: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, vfs.NewMem(), "db")
			defer l.Close()
			for _, i := range tc.setup {
				if err := l.Append(entryFor(i)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.trim != 0 {
				if err := l.TrimBefore(context.Background(), tc.trim); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			for _, a := range tc.appends {
				es := make([]Entry, len(a))
				for i, idx := range a {
					es[i] = entryFor(idx)
				}
				err = l.Append(es...)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Append: %v, want %v", err, tc.wantErr)
			}
			if got := l.Last(); got != tc.last {
				t.Fatalf("Last %d, want %d", got, tc.last)
			}
		})
	}
}

func TestGetErrors(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, "db")
	appendRange(t, l, rand.New(rand.NewPCG(3, 4)), 1, 100, 7)
	if err := l.WaitSynced(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(101); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(101): %v, want ErrNotFound", err)
	}
	if _, err := l.Get(0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(0): %v, want ErrNotFound", err)
	}
	if err := l.TrimBefore(context.Background(), 40); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		if f, la := l.First(), l.Last(); f != 40 || la != 100 {
			t.Fatalf("First %d Last %d, want 40 100", f, la)
		}
		if _, err := l.Get(39); !errors.Is(err, ErrTrimmed) {
			t.Fatalf("Get(39): %v, want ErrTrimmed", err)
		}
		if err := l.Scan(context.Background(), 1, 100, func(Entry) error { return nil }); !errors.Is(err, ErrTrimmed) {
			t.Fatalf("Scan(1, 100): %v, want ErrTrimmed", err)
		}
		e, err := l.Get(40)
		if err != nil {
			t.Fatal(err)
		}
		checkEntry(t, 40, e)
		scanAll(t, l, 40, 100)
	}
	check(l)
	// Trimming below First changes nothing.
	if err := l.TrimBefore(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	check(l)

	// Trim past the end: empty, and the trim point survives a reopen.
	if err := l.TrimBefore(context.Background(), 500); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	if f, la, s := l.First(), l.Last(), l.Synced(); f != 500 || la != 499 || s != 499 {
		t.Fatalf("after trim past end and reopen: First %d Last %d Synced %d, want 500 499 499", f, la, s)
	}
	if err := l.Append(entryFor(499)); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("Append(499) after trim to 500: %v", err)
	}
	appendRange(t, l, rand.New(rand.NewPCG(5, 6)), 500, 510, 3)
	if err := l.WaitSynced(context.Background(), 510); err != nil {
		t.Fatal(err)
	}
	scanAll(t, l, 500, 510)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Append(entryFor(511)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := l.WaitSynced(context.Background(), 511); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitSynced after Close: %v", err)
	}
	if _, err := l.Get(505); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func TestWaitSyncedContext(t *testing.T) {
	l := openLog(t, vfs.NewMem(), "db")
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.WaitSynced(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitSynced of an unappended index: %v", err)
	}
	// A waiter for a later index wakes once it is appended and synced.
	errc := make(chan error, 1)
	go func() { errc <- l.WaitSynced(context.Background(), 3) }()
	for i := uint64(1); i <= 3; i++ {
		if err := l.Append(entryFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestCloseFlushes checks that Close writes what was queued.
func TestCloseFlushes(t *testing.T) {
	fs := vfs.NewMem()
	l, err := Open(context.Background(), Options{Dir: "db", FS: fs, MaxDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	appendRange(t, l, rand.New(rand.NewPCG(7, 8)), 1, 50, 5)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	defer l.Close()
	if la := l.Last(); la != 50 {
		t.Fatalf("Last %d after Close and reopen, want 50", la)
	}
	scanAll(t, l, 1, 50)
}

func TestViewsAndSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, "db")
	ctx := context.Background()
	views := []record.View{
		{Epoch: 1, Members: members(1, 2, 3), Sent: []uint64{0, 0, 0}},
		{Epoch: 2, Members: members(1, 3), Cut: cut(5, 0, 7), Start: 12, Sent: []uint64{5, 7}},
		{Epoch: 300, Members: members(1, 3, 4), Cut: cut(2, 2), Start: 16, Sent: []uint64{7, 9, 0}, Joining: []uint64{4}},
	}
	// Out of epoch order on purpose: Views sorts.
	for _, i := range []int{2, 0, 1} {
		if err := l.PutView(ctx, views[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.PutView(ctx, views[1]); err != nil {
		t.Fatalf("putting the same view again: %v", err)
	}
	other := views[1]
	other.Start++
	if err := l.PutView(ctx, other); !errors.Is(err, ErrViewConflict) {
		t.Fatalf("putting a different view for epoch 2: %v", err)
	}
	if _, _, err := l.Snapshot(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Snapshot before SetSnapshot: %v", err)
	}
	if err := l.SetSnapshot(ctx, 10, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := l.SetSnapshot(ctx, 42, []byte("meta")); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		got, err := l.Views(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(views) {
			t.Fatalf("Views:\n%v\nwant\n%v", got, views)
		}
		i, meta, err := l.Snapshot()
		if err != nil || i != 42 || string(meta) != "meta" {
			t.Fatalf("Snapshot: %d %q %v", i, meta, err)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	defer l.Close()
	check(l)
}

// TestConcurrentAppenders runs appenders that take turns by index, a
// reader and waiters at once (for -race).
func TestConcurrentAppenders(t *testing.T) {
	l := openLog(t, vfs.NewMem(), "db")
	defer l.Close()
	const n = 3000
	var mu sync.Mutex
	next := uint64(1)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
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
				if i%97 == 0 {
					if err := l.WaitSynced(context.Background(), i); err != nil {
						t.Error(err)
						return
					}
					e, err := l.Get(i)
					if err != nil {
						t.Error(err)
						return
					}
					checkEntry(t, i, e)
				}
			}
		})
	}
	wg.Wait()
	if err := l.WaitSynced(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	scanAll(t, l, 1, n)
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("Open without Dir: %v", err)
	}
}

func members(ids ...uint64) []record.Member {
	ms := make([]record.Member, len(ids))
	for i, id := range ids {
		ms[i] = record.Member{ID: id, Incarnation: 1, Addr: fmt.Sprintf("10.0.0.%d:7000", id)}
	}
	return ms
}

func cut(seqs ...uint64) []record.SenderCut {
	c := make([]record.SenderCut, len(seqs))
	for i, s := range seqs {
		c[i] = record.SenderCut{ID: uint64(i + 1), Seq: s}
	}
	return c
}

func membershipViewFor(epoch uint64) record.View {
	return record.View{Epoch: epoch, Members: members(1, 2), Start: epoch * 10, Sent: []uint64{epoch, 0}}
}

// TestInstallSnapshot: a log whose state comes from elsewhere starts over
// at the snapshot, whether its entries lay below, around or beyond it,
// and the change survives a reopen (a crash leaves old or new, whole).
func TestInstallSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name          string
		last, snap    uint64
		wantFirstNext uint64
	}{
		{"entries below the snapshot", 50, 80, 81},
		{"entries around the snapshot", 50, 30, 31},
		{"empty log", 0, 7, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			ctx := context.Background()
			l := openLog(t, fs, "db")
			if tc.last > 0 {
				appendRange(t, l, rand.New(rand.NewPCG(1, 2)), 1, tc.last, 8)
			}
			if err := l.InstallSnapshot(ctx, tc.snap, []byte("state")); err != nil {
				t.Fatal(err)
			}
			check := func(l *Log) {
				t.Helper()
				if l.First() != tc.wantFirstNext || l.Last() != tc.snap {
					t.Fatalf("First, Last = %d, %d; want %d, %d", l.First(), l.Last(), tc.wantFirstNext, tc.snap)
				}
				if _, err := l.Get(tc.snap); !errors.Is(err, ErrTrimmed) {
					t.Fatalf("Get(%d) after the snapshot: %v", tc.snap, err)
				}
				if i, meta, err := l.Snapshot(); err != nil || i != tc.snap || string(meta) != "state" {
					t.Fatalf("Snapshot: %d %q %v", i, meta, err)
				}
				if l.Synced() != tc.snap {
					t.Fatalf("Synced = %d, want %d", l.Synced(), tc.snap)
				}
			}
			check(l)
			// The log goes on after the snapshot, and only there.
			if err := l.Append(entryFor(tc.snap)); !errors.Is(err, ErrOutOfOrder) {
				t.Fatalf("appending at the snapshot's index: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, fs, "db")
			defer l.Close()
			check(l)
			appendRange(t, l, rand.New(rand.NewPCG(3, 4)), tc.snap+1, tc.snap+20, 4)
			if err := l.WaitSynced(ctx, tc.snap+20); err != nil {
				t.Fatal(err)
			}
			scanAll(t, l, tc.snap+1, tc.snap+20)
		})
	}
}

// TestDurableMark: the durable mark only grows, is written with the next
// synchronous write and at Close, and comes back after a reopen; a crash
// may lose its last rise, never report more; an installed snapshot sets
// it.
func TestDurableMark(t *testing.T) {
	mem := vfs.NewCrashableMem()
	ctx := context.Background()
	l := openLog(t, mem, "db")
	appendRange(t, l, rand.New(rand.NewPCG(1, 1)), 1, 50, 5)
	l.SetDurable(30)
	l.SetDurable(20) // never goes back
	if l.Durable() != 30 {
		t.Fatalf("Durable = %d, want 30", l.Durable())
	}
	if err := l.PutView(ctx, membershipViewFor(1)); err != nil {
		t.Fatal(err)
	}
	// Appends alone do not write it.
	l.SetDurable(45)
	if err := l.Append(entryFor(51)); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitSynced(ctx, 51); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Close wrote 45; the crash before it kept 30.
	for _, tc := range []struct {
		fs   vfs.FS
		want uint64
	}{{mem, 45}, {crashed, 30}} {
		l = openLog(t, tc.fs, "db")
		if got := l.Durable(); got != tc.want {
			t.Fatalf("Durable = %d, want %d", got, tc.want)
		}
		if tc.fs == mem {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.InstallSnapshot(ctx, 10, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if got := l.Durable(); got != 10 {
		t.Fatalf("after InstallSnapshot Durable = %d, want 10", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, crashed, "db")
	defer l.Close()
	if got := l.Durable(); got != 10 {
		t.Fatalf("after reopen Durable = %d, want 10", got)
	}
}
