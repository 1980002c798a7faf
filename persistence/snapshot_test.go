package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// partBytes is the deterministic content of part i of snapshot seed.
func partBytes(seed uint64, i, size int) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(rng.Uint32())
	}
	return b
}

// writeSnapshot writes a snapshot of parts with the given sizes, in
// writes of random lengths, and commits it.
func writeSnapshot(t testing.TB, l *Log, index, seed uint64, sizes ...int) {
	t.Helper()
	w := startSnapshot(t, l, index, seed, sizes...)
	if err := w.Commit(context.Background(), fmt.Appendf(nil, "meta %d", index)); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// startSnapshot writes the parts of a snapshot, without committing it.
func startSnapshot(t testing.TB, l *Log, index, seed uint64, sizes ...int) SnapshotWriter {
	t.Helper()
	w, err := l.CreateSnapshot(context.Background(), index, len(sizes))
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for i, size := range sizes {
		pw, err := w.Part(i)
		if err != nil {
			t.Fatalf("Part(%d): %v", i, err)
		}
		b := partBytes(seed, i, size)
		for len(b) > 0 {
			n := min(len(b), 1+rng.IntN(3*SnapshotChunkBytes/2))
			if k, err := pw.Write(b[:n]); err != nil || k != n {
				t.Fatalf("Write: %d %v", k, err)
			}
			b = b[n:]
		}
		if err := pw.Close(); err != nil {
			t.Fatalf("Close part %d: %v", i, err)
		}
	}
	return w
}

// checkSnapshot reads the log's snapshot and checks it is snapshot seed
// at index with parts of the given sizes.
func checkSnapshot(t testing.TB, l *Log, index, seed uint64, sizes ...int) {
	t.Helper()
	r, err := l.ReadSnapshot()
	if err != nil {
		t.Fatalf("ReadSnapshot: %v", err)
	}
	if r.Index() != index || string(r.Meta()) != fmt.Sprintf("meta %d", index) {
		t.Fatalf("snapshot at %d with meta %q, want %d", r.Index(), r.Meta(), index)
	}
	checkParts(t, r, seed, sizes...)
}

func checkParts(t testing.TB, r SnapshotReader, seed uint64, sizes ...int) {
	t.Helper()
	if r.Parts() != len(sizes) {
		t.Fatalf("%d parts, want %d", r.Parts(), len(sizes))
	}
	for i, size := range sizes {
		if r.Size(i) != int64(size) {
			t.Fatalf("part %d: size %d, want %d", i, r.Size(i), size)
		}
		got, err := io.ReadAll(r.Part(i))
		if err != nil {
			t.Fatalf("reading part %d: %v", i, err)
		}
		if !bytes.Equal(got, partBytes(seed, i, size)) {
			t.Fatalf("part %d: read %d bytes that differ from the %d written", i, len(got), size)
		}
	}
}

// chunkGens returns the generations of the chunk records in the store,
// with each one's number of records.
func chunkGens(t testing.TB, l *Log) map[uint64]int {
	t.Helper()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixChunk}, UpperBound: []byte{prefixChunk + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	gens := make(map[uint64]int)
	for ok := it.First(); ok; ok = it.Next() {
		g, ok := parseChunkGen(it.Key())
		if !ok {
			t.Fatalf("malformed chunk key %x", it.Key())
		}
		gens[g]++
	}
	return gens
}

// TestSnapshotParts writes snapshots of parts of every size around the
// chunk size and reads them back, before and after a reopen; a new
// snapshot replaces the old one and deletes its chunks.
func TestSnapshotParts(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs, "db")
	sizes := []int{0, 1, 1000, SnapshotChunkBytes - 1, SnapshotChunkBytes, SnapshotChunkBytes + 1, 3*SnapshotChunkBytes + 12345}
	writeSnapshot(t, l, 42, 1, sizes...)
	checkSnapshot(t, l, 42, 1, sizes...)
	if i, meta, err := l.Snapshot(); err != nil || i != 42 || string(meta) != "meta 42" {
		t.Fatalf("Snapshot: %d %q %v", i, meta, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	checkSnapshot(t, l, 42, 1, sizes...)
	first := chunkGens(t, l)
	if len(first) != 1 {
		t.Fatalf("chunks of generations %v after one snapshot", first)
	}

	writeSnapshot(t, l, 50, 2, 5, SnapshotChunkBytes+7)
	checkSnapshot(t, l, 50, 2, 5, SnapshotChunkBytes+7)
	if gens := chunkGens(t, l); len(gens) != 1 || gens[l.snapGen.Load()] != 3 {
		t.Fatalf("chunks of generations %v after the second snapshot (generation %d)", gens, l.snapGen.Load())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db")
	defer l.Close()
	checkSnapshot(t, l, 50, 2, 5, SnapshotChunkBytes+7)
	// A snapshot without parts.
	writeSnapshot(t, l, 60, 3)
	checkSnapshot(t, l, 60, 3)
	if gens := chunkGens(t, l); len(gens) != 0 {
		t.Fatalf("chunks of generations %v after a snapshot without parts", gens)
	}
}

// TestSnapshotAttempts: several attempts at one part; the first closed
// counts, the others leave nothing behind.
func TestSnapshotAttempts(t *testing.T) {
	l := openLog(t, vfs.NewMem(), "db")
	defer l.Close()
	ctx := context.Background()
	w, err := l.CreateSnapshot(ctx, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	good := partBytes(9, 0, 2*SnapshotChunkBytes+5)
	a, _ := w.Part(0)
	b, _ := w.Part(0)
	c, _ := w.Part(0)
	if _, err := a.Write(bytes.Repeat([]byte("x"), SnapshotChunkBytes+3)); err != nil {
		t.Fatal(err)
	}
	a.Abort()
	if _, err := a.Write([]byte("more")); err == nil {
		t.Fatal("Write after Abort: no error")
	}
	if _, err := c.Write(bytes.Repeat([]byte("y"), 3*SnapshotChunkBytes)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(good); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, nil); err == nil {
		t.Fatal("Commit with parts missing: no error")
	}
	w, err = l.CreateSnapshot(ctx, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, _ = w.Part(0)
	b, _ = w.Part(0)
	c, _ = w.Part(0)
	if _, err := a.Write(bytes.Repeat([]byte("x"), SnapshotChunkBytes+3)); err != nil {
		t.Fatal(err)
	}
	a.Abort()
	if _, err := c.Write(bytes.Repeat([]byte("y"), 3*SnapshotChunkBytes)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(good); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err == nil {
		t.Fatal("a second attempt closed: no error")
	}
	one, _ := w.Part(1)
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := w.Reader(ctx)
	if err != nil {
		t.Fatalf("Reader before Commit: %v", err)
	}
	if r.Index() != 7 || r.Meta() != nil || r.Parts() != 2 || r.Size(0) != int64(len(good)) || r.Size(1) != 0 {
		t.Fatalf("reader before Commit: index %d meta %q parts %d sizes %d %d", r.Index(), r.Meta(), r.Parts(), r.Size(0), r.Size(1))
	}
	if got, err := io.ReadAll(r.Part(0)); err != nil || !bytes.Equal(got, good) {
		t.Fatalf("part 0 before Commit: %d bytes, %v", len(got), err)
	}
	if err := w.Commit(ctx, []byte("m")); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, []byte("m")); err == nil {
		t.Fatal("a second Commit: no error")
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	r, err = l.ReadSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r.Part(0)); err != nil || !bytes.Equal(got, good) {
		t.Fatalf("part 0: %d bytes, %v", len(got), err)
	}
	// Of the second writer, only the chunks of the attempts that count
	// are left (the first writer's stay until the next Open: it was
	// never aborted).
	gens := chunkGens(t, l)
	if gens[l.snapGen.Load()] != 3 {
		t.Fatalf("chunks of generations %v, want 3 of generation %d", gens, l.snapGen.Load())
	}
}

// TestSnapshotAbort: an aborted snapshot leaves the previous one, and no
// chunk of its own.
func TestSnapshotAbort(t *testing.T) {
	l := openLog(t, vfs.NewMem(), "db")
	defer l.Close()
	writeSnapshot(t, l, 10, 1, 100, SnapshotChunkBytes*2)
	w := startSnapshot(t, l, 20, 2, SnapshotChunkBytes*3)
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(context.Background(), nil); err == nil {
		t.Fatal("Commit after Abort: no error")
	}
	if _, err := w.Part(0); err == nil {
		t.Fatal("Part after Abort: no error")
	}
	checkSnapshot(t, l, 10, 1, 100, SnapshotChunkBytes*2)
	// The deletion is queued: a synchronous write comes after it.
	if err := l.PutView(context.Background(), membershipViewFor(1)); err != nil {
		t.Fatal(err)
	}
	if gens := chunkGens(t, l); len(gens) != 1 {
		t.Fatalf("chunks of generations %v after an abort", gens)
	}
}

// TestSnapshotWithoutParts: SetSnapshot and InstallSnapshot record
// snapshots without parts, and delete the chunks of the one they replace.
func TestSnapshotWithoutParts(t *testing.T) {
	ctx := context.Background()
	for _, install := range []bool{false, true} {
		t.Run(fmt.Sprintf("install=%v", install), func(t *testing.T) {
			fs := vfs.NewMem()
			l := openLog(t, fs, "db")
			writeSnapshot(t, l, 10, 1, 100, SnapshotChunkBytes+1)
			var err error
			if install {
				err = l.InstallSnapshot(ctx, 30, []byte("meta 30"))
			} else {
				err = l.SetSnapshot(ctx, 30, []byte("meta 30"))
			}
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 {
				checkSnapshot(t, l, 30, 0)
				if gens := chunkGens(t, l); len(gens) != 0 {
					t.Fatalf("round %d: chunks of generations %v left", round, gens)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = openLog(t, fs, "db")
			}
			// A snapshot with parts again.
			writeSnapshot(t, l, 40, 4, 3)
			checkSnapshot(t, l, 40, 4, 3)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSnapshotCrash crashes the machine while a snapshot is written
// (keeping a random share of what was not synced), and while its commit
// syncs: the log then holds the previous snapshot or, once Commit
// returned, the new one, whole; Open deletes the chunks of the one that
// did not make it.
func TestSnapshotCrash(t *testing.T) {
	sizes := []int{3*SnapshotChunkBytes + 77, 10, SnapshotChunkBytes}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			mem := vfs.NewCrashableMem()
			l := openLog(t, mem, "db")
			writeSnapshot(t, l, 10, 1, 100, 2*SnapshotChunkBytes)
			appendRange(t, l, rng, 1, 50, 5)
			// Mid-write: parts written, chunks handed to Pebble, no commit.
			w := startSnapshot(t, l, 20, 2, sizes...)
			if _, err := w.Reader(context.Background()); err != nil { // every chunk is in Pebble
				t.Fatal(err)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, crashed, "db")
			checkSnapshot(t, l, 10, 1, 100, 2*SnapshotChunkBytes)
			if gens := chunkGens(t, l); len(gens) != 1 || gens[l.snapGen.Load()] != 3 {
				t.Fatalf("after the crash: chunks of generations %v, want those of %d only", gens, l.snapGen.Load())
			}
			// A new snapshot after the crash does not collide with the
			// chunks of the lost one.
			writeSnapshot(t, l, 30, 3, sizes...)
			checkSnapshot(t, l, 30, 3, sizes...)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSnapshotCrashDuringCommit crashes at each WAL sync in turn while a
// snapshot is written and committed: before Commit returns the log holds
// the old snapshot or the new one, after it the new one.
func TestSnapshotCrashDuringCommit(t *testing.T) {
	sizes := []int{2*SnapshotChunkBytes + 3, 5}
	var sawOld, sawNew bool
	for k := int64(1); ; k++ {
		c := &crashAtSync{mem: vfs.NewCrashableMem(), rng: rand.New(rand.NewPCG(uint64(k), 9))}
		c.k.Store(1 << 40)
		l, err := Open(context.Background(), Options{Dir: "db", FS: errorfs.Wrap(c.mem, c)})
		if err != nil {
			t.Fatal(err)
		}
		writeSnapshot(t, l, 10, 1, 100, SnapshotChunkBytes+1)
		c.k.Store(k)
		w := startSnapshot(t, l, 20, 2, sizes...)
		if err := w.Commit(context.Background(), []byte("meta 20")); err != nil {
			t.Fatal(err)
		}
		if err := l.SetSnapshot(context.Background(), 20, []byte("meta 20")); err != nil { // one more sync
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if c.crashed == nil {
			if !sawOld || !sawNew {
				t.Fatalf("after %d syncs: old snapshot seen %v, new one %v", k, sawOld, sawNew)
			}
			return
		}
		l = openLog(t, c.crashed, "db")
		r, err := l.ReadSnapshot()
		if err != nil {
			t.Fatalf("k=%d: ReadSnapshot: %v", k, err)
		}
		switch r.Index() {
		case 10:
			sawOld = true
			checkSnapshot(t, l, 10, 1, 100, SnapshotChunkBytes+1)
		case 20:
			sawNew = true
			if r.Parts() == 0 {
				checkSnapshot(t, l, 20, 0) // the SetSnapshot after
			} else {
				checkSnapshot(t, l, 20, 2, sizes...)
			}
		default:
			t.Fatalf("k=%d: snapshot at %d", k, r.Index())
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSnapshotDamage: a damaged or missing chunk, or a damaged manifest,
// is reported as ErrCorrupt, never read as data; the log still opens.
func TestSnapshotDamage(t *testing.T) {
	sizes := []int{2*SnapshotChunkBytes + 10, 7}
	for _, tc := range []struct {
		name   string
		damage func(db *pebble.DB, gen uint64) error
		// read: the error shows when the part is read, not at
		// ReadSnapshot.
		read bool
	}{
		{"flipped chunk byte", func(db *pebble.DB, gen uint64) error {
			return rewrite(db, chunkKey(gen, 0, 1), func(v []byte) []byte { v[len(v)-1] ^= 4; return v })
		}, true},
		{"chunk moved", func(db *pebble.DB, gen uint64) error {
			v, c, err := db.Get(chunkKey(gen, 0, 0))
			if err != nil {
				return err
			}
			defer c.Close()
			return db.Set(chunkKey(gen, 0, 1), v, pebble.Sync)
		}, true},
		{"missing chunk", func(db *pebble.DB, gen uint64) error {
			return db.Delete(chunkKey(gen, 0, 2), pebble.Sync)
		}, true},
		{"short last chunk", func(db *pebble.DB, gen uint64) error {
			k := chunkKey(gen, 0, 2)
			return rewrite(db, k, func(v []byte) []byte { v = v[:len(v)-1]; seal(k, v); return v })
		}, true},
		{"flipped manifest byte", func(db *pebble.DB, gen uint64) error {
			return rewrite(db, makeKey(prefixMeta, metaSnapshotParts), func(v []byte) []byte { v[len(v)-2] ^= 1; return v })
		}, false},
		{"manifest of another snapshot", func(db *pebble.DB, gen uint64) error {
			k, v := encodeManifest(gen, &manifest{index: 11, parts: []partInfo{{stream: 0, size: 5, chunks: 1}}})
			return db.Set(k, v, pebble.Sync)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			l := openLog(t, fs, "db")
			writeSnapshot(t, l, 10, 1, sizes...)
			gen := l.snapGen.Load()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			db := rawDB(t, fs, "db")
			if err := tc.damage(db, gen); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, fs, "db")
			defer l.Close()
			r, err := l.ReadSnapshot()
			if !tc.read {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("ReadSnapshot: %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(r.Part(0)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "part 0") {
				t.Fatalf("reading the damaged part: %v, want ErrCorrupt naming part 0", err)
			}
			if got, err := io.ReadAll(r.Part(1)); err != nil || !bytes.Equal(got, partBytes(1, 1, 7)) {
				t.Fatalf("the other part: %q %v", got, err)
			}
		})
	}
}

// rewrite replaces the value at k with f of a copy of it.
func rewrite(db *pebble.DB, k []byte, f func([]byte) []byte) error {
	v, c, err := db.Get(k)
	if err != nil {
		return err
	}
	v = bytes.Clone(v)
	c.Close()
	return db.Set(k, f(v), pebble.Sync)
}

// TestSnapshotDiskError: a failed fsync as a snapshot commits fails the
// log, and the snapshot with it; the previous one stays. (The fault
// comes after the chunks are in: a failure while Pebble rotates its WAL,
// which large writes make it do, cannot be recovered from.)
func TestSnapshotDiskError(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fault := &walFault{sync: true}
	l, err := Open(context.Background(), Options{Dir: "db", FS: errorfs.Wrap(mem, fault)})
	if err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, l, 10, 1, 100)
	w := startSnapshot(t, l, 20, 2, 3*SnapshotChunkBytes)
	if _, err := w.Reader(context.Background()); err != nil {
		t.Fatal(err)
	}
	fault.armed.Store(true)
	if err := w.Commit(context.Background(), nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("Commit on a failing disk: %v, want ErrFailed", err)
	}
	if _, err := l.CreateSnapshot(context.Background(), 30, 1); !errors.Is(err, ErrFailed) {
		t.Fatalf("CreateSnapshot on a failed log: %v, want ErrFailed", err)
	}
	_ = l.Close()
	l = openLog(t, mem.CrashClone(vfs.CrashCloneCfg{}), "db")
	defer l.Close()
	checkSnapshot(t, l, 10, 1, 100)
}

// TestSnapshotWriterBounded: with the log's writer stuck, a snapshot's
// Write blocks once a few chunks are in flight: the writer never holds
// much of the snapshot in memory.
func TestSnapshotWriterBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &walGate{}
		l, err := Open(context.Background(), Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), g)})
		if err != nil {
			t.Fatal(err)
		}
		w, err := l.CreateSnapshot(context.Background(), 5, 1)
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := w.Part(0)
		g.stall()
		var written atomic.Int64
		done := make(chan error, 1)
		go func() {
			chunk := make([]byte, SnapshotChunkBytes/2)
			for range 64 {
				if _, err := pw.Write(chunk); err != nil {
					done <- err
					return
				}
				written.Add(int64(len(chunk)))
			}
			done <- pw.Close()
		}()
		synctest.Wait()
		// The first chunk's batch is stuck in Pebble; snapshotInflight
		// more wait behind it, and one is being filled.
		n := written.Load()
		t.Logf("%d bytes written with the disk stuck", n)
		if n > (snapshotInflight+2)*SnapshotChunkBytes {
			t.Fatalf("%d bytes written with the disk stuck", n)
		}
		g.resume()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// walGate is an injector that blocks writes to Pebble's WAL while
// stalled.
type walGate struct{ gate }

func (g *walGate) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") || (op.Kind != errorfs.OpFileWrite && op.Kind != errorfs.OpFileWriteAt) {
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

// FuzzDecodeManifest feeds arbitrary keys and values to the manifest
// decoder: it must never panic, and whatever it accepts must re-encode
// to exactly the same record.
func FuzzDecodeManifest(f *testing.F) {
	for _, m := range []manifest{
		{index: 1},
		{index: 42, parts: []partInfo{{stream: 0, size: 0, chunks: 0}, {stream: 3, size: SnapshotChunkBytes + 1, chunks: 2}}},
	} {
		k, v := encodeManifest(7, &m)
		f.Add(k, v)
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		gen, m, err := decodeManifest(key, value)
		if err != nil {
			return
		}
		k, v := encodeManifest(gen, &m)
		if !bytes.Equal(k, key) || !bytes.Equal(v, value) {
			t.Fatalf("accepted %x=%x, which re-encodes as %x=%x", key, value, k, v)
		}
	})
}

// FuzzDecodeChunk feeds arbitrary keys and values to the chunk decoder:
// it must never panic, and whatever it accepts is a sealed record of 1
// to SnapshotChunkBytes bytes under its key.
func FuzzDecodeChunk(f *testing.F) {
	k := chunkKey(3, 1, 2)
	v := append(make([]byte, headerLen), "data"...)
	seal(k, v)
	f.Add(k, v)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		data, err := decodeChunk(key, value)
		if err != nil {
			return
		}
		again := append(make([]byte, headerLen), data...)
		seal(key, again)
		if len(data) == 0 || len(data) > SnapshotChunkBytes || !bytes.Equal(again, value) {
			t.Fatalf("accepted %x=%x", key, value)
		}
	})
}
