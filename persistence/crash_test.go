package persistence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// rawDB opens the log's store directly, to damage it.
func rawDB(t *testing.T, fs vfs.FS, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{
		FS:     fs,
		Logger: &pebbleLogger{log: slog.New(slog.DiscardHandler), fatal: func(error) {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestCorruption(t *testing.T) {
	const n, bad = 100, 57
	for _, tc := range []struct {
		name string
		// damage changes the store; it gets the encoded record of entry bad.
		damage func(db *pebble.DB, k, v []byte) error
		// openErr: Open itself reports ErrCorrupt naming this text.
		openErr string
	}{
		{name: "flipped payload byte", damage: func(db *pebble.DB, k, v []byte) error {
			v[len(v)-1] ^= 0x10
			return db.Set(k, v, pebble.Sync)
		}},
		{name: "flipped epoch byte", damage: func(db *pebble.DB, k, v []byte) error {
			v[headerLen+3] ^= 1
			return db.Set(k, v, pebble.Sync)
		}},
		{name: "record of another index", damage: func(db *pebble.DB, k, v []byte) error {
			_, other := encodeEntry(&Entry{Index: bad + 1, Epoch: 1, Payload: []byte("x")})
			return db.Set(k, other, pebble.Sync)
		}},
		{name: "truncated", damage: func(db *pebble.DB, k, v []byte) error {
			return db.Set(k, v[:3], pebble.Sync)
		}},
		{name: "unknown format", damage: func(db *pebble.DB, k, v []byte) error {
			v[4] = 9
			binary.BigEndian.PutUint32(v[:4], checksum(k, v[4:]))
			return db.Set(k, v, pebble.Sync)
		}},
		{name: "gap", damage: func(db *pebble.DB, k, v []byte) error {
			return db.Delete(k, pebble.Sync)
		}, openErr: "entry 58 follows 56"},
		{name: "corrupt tail", damage: func(db *pebble.DB, _, _ []byte) error {
			k, v := encodeEntry(&Entry{Index: n, Payload: []byte("tail")})
			v[len(v)-1]++
			return db.Set(k, v, pebble.Sync)
		}, openErr: fmt.Sprintf("entry %d (last)", n)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			l := openLog(t, fs, "db")
			appendRange(t, l, rand.New(rand.NewPCG(1, 1)), 1, n, 9)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			db := rawDB(t, fs, "db")
			e := entryFor(bad)
			k, v := encodeEntry(&e)
			if err := tc.damage(db, k, v); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			l, err := Open(context.Background(), Options{Dir: "db", FS: fs})
			if tc.openErr != "" {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.openErr) {
					t.Fatalf("Open: %v, want ErrCorrupt naming %q", err, tc.openErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			name := fmt.Sprintf("entry %d", bad)
			if _, err := l.Get(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
				t.Fatalf("Get(%d): %v, want ErrCorrupt naming it", bad, err)
			}
			var seen uint64
			err = l.Scan(context.Background(), 1, n, func(e Entry) error {
				checkEntry(t, e.Index, e)
				seen = e.Index
				return nil
			})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) || seen != bad-1 {
				t.Fatalf("Scan: %v after entry %d, want ErrCorrupt naming %d after %d", err, seen, bad, bad-1)
			}
			for _, i := range []uint64{bad - 1, bad + 1} {
				if e, err := l.Get(i); err != nil {
					t.Fatalf("Get(%d) next to the damage: %v", i, err)
				} else {
					checkEntry(t, i, e)
				}
			}
		})
	}
}

func TestCorruptViewAndMeta(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, "db")
	ctx := context.Background()
	if err := l.PutView(ctx, membershipViewFor(7)); err != nil {
		t.Fatal(err)
	}
	if err := l.SetSnapshot(ctx, 9, []byte("m")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, fs, "db")
	for _, k := range [][]byte{makeKey(prefixView, 7), makeKey(prefixMeta, metaSnapshot)} {
		v, c, err := db.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		v = append([]byte(nil), v...)
		c.Close()
		v[len(v)-1] ^= 0xff
		if err := db.Set(k, v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	defer l.Close()
	if _, err := l.Views(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "view 7") {
		t.Fatalf("Views: %v, want ErrCorrupt naming view 7", err)
	}
	if _, _, err := l.Snapshot(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Snapshot: %v, want ErrCorrupt", err)
	}
	if err := l.PutView(ctx, membershipViewFor(7)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("PutView over a corrupt record: %v, want ErrCorrupt", err)
	}
}

// TestCrash crashes the file system (keeping what was synced, and a random
// share of what was not) while appends are in flight, then recovers: every
// index up to the Synced value observed before the crash must be there
// and intact, and nothing beyond may be torn.
func TestCrash(t *testing.T) {
	seeds := 24
	if testing.Short() {
		seeds = 6
	}
	// lost counts unsynced entries the crashes dropped: the test is only
	// meaningful if some were.
	var lost uint64
	defer func() {
		t.Logf("crashes dropped %d unsynced entries", lost)
		if lost == 0 && !t.Failed() {
			t.Error("no crash dropped anything: the test does not exercise loss")
		}
	}()
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			fs := vfs.NewCrashableMem()
			var next uint64 = 1
			observed := uint64(0)
			// Several crash/recover rounds on the same history.
			for round := 0; round < 3; round++ {
				l := openLog(t, fs, "db")
				if l.Last() < observed {
					t.Fatalf("round %d: Last %d below the synced %d observed before the crash", round, l.Last(), observed)
				}
				next = l.Last() + 1
				// A durable part...
				k := uint64(rng.IntN(300))
				appendRange(t, l, rng, next, next+k, 1+rng.IntN(20))
				next += k + 1
				if err := l.WaitSynced(context.Background(), next-1); err != nil {
					t.Fatal(err)
				}
				// ...then more, not waited for.
				k = uint64(rng.IntN(2000))
				appendRange(t, l, rng, next, next+k, 1+rng.IntN(50))
				next += k + 1
				observed = l.Synced()
				crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(uint64(seed), uint64(round)))})
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				fs = crashed

				l = openLog(t, fs, "db")
				if l.Last() < observed || l.Synced() != l.Last() || l.First() != 1 {
					t.Fatalf("round %d after crash: First %d Last %d Synced %d, observed Synced %d", round, l.First(), l.Last(), l.Synced(), observed)
				}
				// Everything held is intact: Open checked contiguity, Scan
				// checks every record.
				scanAll(t, l, 1, l.Last())
				lost += next - 1 - l.Last()
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// walFault injects err into writes or syncs of Pebble's WAL files once
// armed, after skip more of them.
type walFault struct {
	armed atomic.Bool
	skip  atomic.Int64
	sync  bool // fail syncs rather than writes
	hits  atomic.Int64
}

func (f *walFault) String() string { return "walFault" }

func (f *walFault) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if !f.sync {
			return nil
		}
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		if f.sync {
			return nil
		}
	default:
		return nil
	}
	if f.skip.Add(-1) >= 0 {
		return nil
	}
	f.hits.Add(1)
	return errorfs.ErrInjected
}

func TestDiskErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync bool
		skip int64
	}{
		{"write error at once", false, 0},
		{"write error later", false, 5},
		{"sync error at once", true, 0},
		{"sync error later", true, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fault := &walFault{sync: tc.sync}
			fault.skip.Store(tc.skip)
			l, err := Open(context.Background(), Options{Dir: "db", FS: errorfs.Wrap(mem, fault)})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(5, 5))
			appendRange(t, l, rng, 1, 200, 10)
			if err := l.WaitSynced(context.Background(), 200); err != nil {
				t.Fatal(err)
			}
			select {
			case <-l.Failed():
				t.Fatal("Failed is closed before any failure")
			default:
			}
			fault.armed.Store(true)
			next := uint64(201)
			var appendErr error
			for ; next < 100000 && appendErr == nil; next++ {
				appendErr = l.Append(entryFor(next))
				if next%50 == 0 && appendErr == nil {
					_ = l.WaitSynced(context.Background(), next)
				}
			}
			if !errors.Is(appendErr, ErrFailed) || !errors.Is(appendErr, errorfs.ErrInjected) {
				t.Fatalf("Append after a disk error: %v, want ErrFailed wrapping the cause", appendErr)
			}
			if fault.hits.Load() == 0 {
				t.Fatal("no fault injected")
			}
			synced := l.Synced()
			if err := l.Err(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Err: %v", err)
			}
			select {
			case <-l.Failed():
			default:
				t.Fatal("Failed is not closed after the failure")
			}
			if err := l.WaitSynced(context.Background(), synced+1); !errors.Is(err, ErrFailed) {
				t.Fatalf("WaitSynced: %v, want ErrFailed", err)
			}
			if err := l.PutView(context.Background(), membershipViewFor(1)); !errors.Is(err, ErrFailed) {
				t.Fatalf("PutView: %v, want ErrFailed", err)
			}
			if l.Synced() != synced {
				t.Fatalf("Synced moved after the failure: %d → %d", synced, l.Synced())
			}
			// The machine dies: only synced data survives.
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			t.Logf("Close after the failure: %v", l.Close())

			l = openLog(t, crashed, "db")
			defer l.Close()
			if l.Last() < synced {
				t.Fatalf("after reopen Last %d < acknowledged %d", l.Last(), synced)
			}
			scanAll(t, l, 1, l.Last())
			t.Logf("failed at %d, acknowledged %d, recovered %d", next-1, synced, l.Last())
		})
	}
}

// crashAtSync is an injector that, at the k-th sync of a WAL file, takes a
// crash clone of the file system (before that sync happens) and records
// the Synced value the log had acknowledged by then.
type crashAtSync struct {
	mem      *vfs.MemFS
	k        atomic.Int64
	rng      *rand.Rand
	log      atomic.Pointer[Log]
	crashed  *vfs.MemFS
	observed uint64
}

func (c *crashAtSync) String() string { return "crashAtSync" }

func (c *crashAtSync) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") || c.k.Add(-1) != 0 {
		return nil
	}
	if l := c.log.Load(); l != nil {
		c.observed = l.Synced()
	}
	c.crashed = c.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: c.rng.IntN(101), RNG: c.rng})
	return nil
}

// TestCrashDuringSync crashes at the k-th WAL sync, for every k in turn:
// the batch being synced may survive whole or not at all, and everything
// acknowledged before survives.
func TestCrashDuringSync(t *testing.T) {
	crashes := 0
	for k := int64(1); ; k++ {
		c := &crashAtSync{mem: vfs.NewCrashableMem(), rng: rand.New(rand.NewPCG(uint64(k), 7))}
		c.k.Store(1 << 40) // not during Open
		l, err := Open(context.Background(), Options{Dir: "db", FS: errorfs.Wrap(c.mem, c)})
		if err != nil {
			t.Fatal(err)
		}
		c.log.Store(l)
		c.k.Store(k)
		rng := rand.New(rand.NewPCG(uint64(k), 8))
		for i := uint64(1); i <= 40; i++ {
			appendRange(t, l, rng, (i-1)*50+1, i*50, 20)
			if i%3 == 0 {
				if err := l.WaitSynced(context.Background(), i*50); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if c.crashed == nil { // k is past the last sync
			if crashes < 5 {
				t.Fatalf("only %d WAL syncs", crashes)
			}
			return
		}
		crashes++
		l = openLog(t, c.crashed, "db")
		if l.Last() < c.observed {
			t.Fatalf("k=%d: after crash Last %d < acknowledged %d", k, l.Last(), c.observed)
		}
		if l.Last() > 0 {
			scanAll(t, l, 1, l.Last())
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// gate is an injector that blocks WAL syncs while stalled.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // non-nil while stalled; closed to resume
}

func (g *gate) String() string { return "gate" }

func (g *gate) stall() {
	g.mu.Lock()
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	close(g.ch)
	g.ch = nil
	g.mu.Unlock()
}

func (g *gate) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") || (op.Kind != errorfs.OpFileSync && op.Kind != errorfs.OpFileSyncData) {
		return nil
	}
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return nil
}

// TestBackpressure: with the disk stalled, Append blocks once the queue
// is full, resumes when the disk does, and a blocked Append returns
// ErrClosed when the log is closed.
//
// It runs in a synctest bubble, where synctest.Wait returns once every
// goroutine is blocked: the appender has gone as far as it can, however
// slowly the machine runs it.
func TestBackpressure(t *testing.T) {
	synctest.Test(t, testBackpressure)
}

func testBackpressure(t *testing.T) {
	g := &gate{}
	l, err := Open(context.Background(), Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), g)})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.mu.maxQueued = 16 << 10
	l.mu.Unlock()

	g.stall()
	if err := l.Append(entryFor(1)); err != nil {
		t.Fatal(err)
	}
	appended := make(chan uint64, 1000)
	go func() {
		defer close(appended)
		for i := uint64(2); i <= 400; i++ {
			if err := l.Append(entryFor(i)); err != nil {
				t.Error(err)
				return
			}
			appended <- i
		}
	}()
	// The appender must get stuck well before 400 (each entry is ~130 B).
	synctest.Wait()
	var last uint64
	for len(appended) > 0 {
		last = <-appended
	}
	if last == 0 || last >= 300 {
		t.Fatalf("appender reached %d with the disk stalled", last)
	}
	g.resume()
	for i := range appended {
		last = i
	}
	if last != 400 {
		t.Fatalf("appender stopped at %d", last)
	}
	if err := l.WaitSynced(context.Background(), 400); err != nil {
		t.Fatal(err)
	}

	// Blocked again, then closed: the blocked Append gives up.
	g.stall()
	errc := make(chan error, 1)
	go func() {
		var err error
		for i := uint64(401); err == nil; i++ {
			err = l.Append(entryFor(i))
		}
		errc <- err
	}()
	synctest.Wait() // the appender is blocked
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Append on Close: %v", err)
	}
	g.resume()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
