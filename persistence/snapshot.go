package persistence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// A snapshot's state lives in the log as chunk records: the state is cut
// into parts (the application's choice, as for a state transfer), each
// part is a byte stream written in chunks of at most SnapshotChunkBytes,
// and each chunk is a record of its own, checksummed like every other.
// The snapshot record (index and metadata, metaSnapshot) and the
// manifest (metaSnapshotParts: for each part, the stream holding it, its
// size and its number of chunks) are written together, in the synced
// batch that commits the snapshot and deletes the previous one's chunks.
// A crash before that batch leaves the previous snapshot as it was; the
// next Open deletes the chunks of the snapshot that was never committed.

// SnapshotChunkBytes is the largest chunk of a snapshot part: a part is
// stored as records of this size, its last one shorter.
const SnapshotChunkBytes = 1 << 20

// MaxSnapshotParts bounds the number of parts of one snapshot.
const MaxSnapshotParts = 1 << 20

const (
	// snapshotInflight bounds the chunks of one SnapshotWriter handed to
	// the log's writer and not yet committed to Pebble: the memory a
	// writer holds is this many chunks plus one per part being written.
	snapshotInflight = 4
	// manifestVersion is the first byte of a manifest.
	manifestVersion = 1
	// chunkKeyLen is the length of a chunk record's key: prefixChunk, the
	// snapshot's generation (8 bytes), the stream (4) and the chunk's
	// sequence number in it (4), big-endian.
	chunkKeyLen = 1 + 8 + 4 + 4
	// maxStreams bounds the streams (attempts at a part) of one snapshot.
	maxStreams = 1<<32 - 1
)

// SnapshotWriter writes a snapshot into the log, chunk by chunk, without
// holding it in memory: see Log.CreateSnapshot. Its methods are safe for
// concurrent use, and so are those of different PartWriters.
type SnapshotWriter interface {
	// Part starts writing part i (0 ≤ i < the number of parts). Each
	// call starts a new attempt, written from the start: several may run
	// at once (two senders of the same part), the first one closed
	// counts, and an attempt given up (Abort) leaves no trace.
	Part(i int) (PartWriter, error)
	// Reader returns a reader of the snapshot as written so far, before
	// Commit: every part must be complete. Its Meta is nil.
	Reader(ctx context.Context) (SnapshotReader, error)
	// Commit records the snapshot, with metadata meta, in one synced
	// batch that also deletes the previous snapshot's chunks, and
	// returns once that is durable: from then on Snapshot and
	// ReadSnapshot return it. Every part must be complete. A crash
	// before Commit returns leaves either the previous snapshot or this
	// one. If InstallSnapshot replaced the log's contents since the
	// snapshot was created, Commit fails with ErrSnapshotStale.
	Commit(ctx context.Context, meta []byte) error
	// Abort gives the snapshot up and deletes what was written of it; it
	// does not wait for the deletion. After Commit or Abort, the writer
	// accepts nothing more. Abort after Commit does nothing.
	Abort() error
}

// PartWriter writes one attempt at one part of a snapshot. Write and
// Close must not be called concurrently; Abort may be called at any
// time, also while a Write blocks.
type PartWriter interface {
	// Write appends p to the part. It hands full chunks to the log
	// without waiting for them to be synced, and blocks while the
	// snapshot's writer has too many chunks in flight.
	io.Writer
	// Close completes the attempt: the part is what it wrote. If another
	// attempt at the part completed first, this one is discarded and
	// Close returns an error.
	Close() error
	// Abort gives the attempt up and deletes what it wrote. Abort after
	// Close does nothing.
	Abort()
}

// SnapshotReader reads a snapshot from the log, part by part, a chunk at
// a time. Each chunk is checked (checksum, position, length) as it is
// read, and each part's length at its end: a damaged or missing chunk
// makes Read return an error wrapping ErrCorrupt. Its methods are safe
// for concurrent use; each reader that Part returns is for one
// goroutine.
type SnapshotReader interface {
	// Index is the index the snapshot reflects.
	Index() uint64
	// Meta is the snapshot's metadata (Commit's meta).
	Meta() []byte
	// Parts is the number of parts: 0 for a snapshot recorded without
	// any (SetSnapshot, InstallSnapshot).
	Parts() int
	// Size returns the size of part i in bytes.
	Size(i int) int64
	// Part returns a reader of part i, from its start. If a later
	// snapshot replaced this one meanwhile (its chunks were deleted),
	// Read returns an error wrapping ErrNotFound.
	Part(i int) io.Reader
}

// partInfo is one part of a committed snapshot.
type partInfo struct {
	stream uint32
	size   uint64
	chunks uint32
}

// manifest lists the parts of a snapshot, as the manifest record holds
// them (with the snapshot's generation in the record's number).
type manifest struct {
	index uint64
	parts []partInfo
}

// CreateSnapshot starts writing a snapshot of parts parts (at most
// MaxSnapshotParts; 0 records only the index and metadata) as of index.
// Nothing of it counts until Commit; the log's current snapshot stays
// until then. Errors: ErrClosed, or an error wrapping ErrFailed.
func (l *Log) CreateSnapshot(ctx context.Context, index uint64, parts int) (SnapshotWriter, error) {
	if parts < 0 || parts > MaxSnapshotParts {
		return nil, fmt.Errorf("persistence: snapshot of %d parts", parts)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptingLocked(); err != nil {
		return nil, err
	}
	l.mu.nextGen++
	w := &snapshotWriter{
		l:        l,
		gen:      l.mu.nextGen,
		installs: l.mu.installs,
		index:    index,
		sem:      make(chan struct{}, snapshotInflight),
		free:     make(chan []byte, snapshotInflight),
	}
	w.mu.parts = make([]*partInfo, parts)
	return w, nil
}

// snapshotWriter is the Log's SnapshotWriter.
type snapshotWriter struct {
	l          *Log
	gen, index uint64
	// installs is the log's count of InstallSnapshot calls when the
	// writer was created.
	installs uint64
	// sem holds a token for each chunk in flight (handed to the log's
	// writer and not yet committed to Pebble); free holds chunk buffers
	// to reuse.
	sem  chan struct{}
	free chan []byte

	// errMu guards err, the first failure of a chunk's write. It is a
	// lock of its own: the log's writer sets err while a Write may hold
	// mu and wait for a token.
	errMu sync.Mutex
	err   error

	mu struct {
		sync.Mutex
		// parts holds each complete part, nil until one attempt at it
		// completes.
		parts   []*partInfo
		streams uint32 // attempts started
		// done: committed or aborted (REQUIRES l.mu too, for setting:
		// chunks are enqueued only while it is false).
		done bool
	}
}

// chunkKey returns the key of chunk seq of stream in generation gen.
func chunkKey(gen uint64, stream, seq uint32) []byte {
	k := make([]byte, chunkKeyLen)
	k[0] = prefixChunk
	binary.BigEndian.PutUint64(k[1:], gen)
	binary.BigEndian.PutUint32(k[9:], stream)
	binary.BigEndian.PutUint32(k[13:], seq)
	return k
}

// chunkRange returns the bounds of the keys of generation gen's chunks,
// or of one of its streams.
func chunkRange(gen uint64) (lo, hi []byte) {
	lo, hi = make([]byte, 9), make([]byte, 9)
	lo[0], hi[0] = prefixChunk, prefixChunk
	binary.BigEndian.PutUint64(lo[1:], gen)
	binary.BigEndian.PutUint64(hi[1:], gen+1)
	return lo, hi
}

func streamRange(gen uint64, stream uint32) (lo, hi []byte) {
	return chunkKey(gen, stream, 0)[:13], chunkKey(gen, stream+1, 0)[:13]
}

// failed records the first failure of one of the writer's chunks.
func (w *snapshotWriter) failed(err error) {
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.errMu.Unlock()
}

// failure returns the first failure of one of the writer's chunks.
func (w *snapshotWriter) failure() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func (w *snapshotWriter) Part(i int) (PartWriter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.mu.done:
		return nil, fmt.Errorf("persistence: snapshot %d: part %d of a snapshot committed or aborted", w.index, i)
	case i < 0 || i >= len(w.mu.parts):
		return nil, fmt.Errorf("persistence: snapshot %d: part %d of %d", w.index, i, len(w.mu.parts))
	case w.mu.streams == maxStreams:
		return nil, fmt.Errorf("persistence: snapshot %d: too many attempts", w.index)
	}
	pw := &partWriter{w: w, part: i, stream: w.mu.streams}
	w.mu.streams++
	return pw, nil
}

// complete returns the parts, or an error if one is missing.
// REQUIRES: w.mu.
func (w *snapshotWriter) completeLocked() ([]partInfo, error) {
	parts := make([]partInfo, len(w.mu.parts))
	for i, p := range w.mu.parts {
		if p == nil {
			return nil, fmt.Errorf("persistence: snapshot %d: part %d of %d is not complete", w.index, i, len(parts))
		}
		parts[i] = *p
	}
	return parts, nil
}

func (w *snapshotWriter) Reader(ctx context.Context) (SnapshotReader, error) {
	w.mu.Lock()
	parts, err := w.completeLocked()
	done := w.mu.done
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if done {
		return nil, fmt.Errorf("persistence: snapshot %d: reading a snapshot committed or aborted", w.index)
	}
	// Every chunk is in Pebble once every token is back.
	for range cap(w.sem) {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			w.drain()
			return nil, ctx.Err()
		}
	}
	w.drain()
	if err := w.failure(); err != nil {
		return nil, fmt.Errorf("persistence: snapshot %d: %w", w.index, err)
	}
	return &snapshotReader{l: w.l, gen: w.gen, m: manifest{index: w.index, parts: parts}}, nil
}

// drain returns the tokens Reader took.
func (w *snapshotWriter) drain() {
	for {
		select {
		case <-w.sem:
		default:
			return
		}
	}
}

func (w *snapshotWriter) Commit(ctx context.Context, meta []byte) error {
	l := w.l
	w.mu.Lock()
	if w.mu.done {
		w.mu.Unlock()
		return fmt.Errorf("persistence: snapshot %d: committed or aborted already", w.index)
	}
	parts, err := w.completeLocked()
	if err != nil {
		w.mu.Unlock()
		return err
	}
	l.mu.Lock()
	w.mu.done = true
	l.mu.Unlock()
	w.mu.Unlock()
	if err := w.failure(); err != nil {
		return fmt.Errorf("persistence: snapshot %d: %w", w.index, err)
	}

	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	stale := l.mu.installs != w.installs
	l.mu.Unlock()
	if stale {
		lo, hi := chunkRange(w.gen)
		_ = l.submit(ctx, op{key: lo, end: hi})
		return fmt.Errorf("%w: snapshot %d", ErrSnapshotStale, w.index)
	}
	sk, sv := encodeMeta(metaSnapshot, w.index, meta)
	mk, mv := encodeManifest(w.gen, &manifest{index: w.index, parts: parts})
	ops := []op{{key: sk, value: sv}}
	if prev := l.snapGen.Load(); prev != 0 {
		lo, hi := chunkRange(prev)
		ops = append(ops, op{key: lo, end: hi})
	}
	// The chunks were queued before this batch: it commits after them,
	// and its fsync makes them durable with it.
	ops = append(ops, op{key: mk, value: mv})
	if err := l.submit(ctx, ops...); err != nil {
		// The batch may still commit (ctx ended): its generation then
		// counts, and a later snapshot deletes its chunks.
		if ctx.Err() != nil && l.Err() == nil {
			l.snapGen.Store(w.gen)
		}
		return fmt.Errorf("persistence: snapshot %d: %w", w.index, err)
	}
	l.snapGen.Store(w.gen)
	if err := w.failure(); err != nil { // a chunk's batch failed, and with it the log
		return fmt.Errorf("persistence: snapshot %d: %w", w.index, err)
	}
	return nil
}

func (w *snapshotWriter) Abort() error {
	l := w.l
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.done {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w.mu.done = true
	if l.acceptingLocked() != nil {
		return nil // Open deletes the chunks
	}
	lo, hi := chunkRange(w.gen)
	l.enqueueLocked(op{key: lo, end: hi})
	return nil
}

// partWriter is the Log's PartWriter.
type partWriter struct {
	w      *snapshotWriter
	part   int
	stream uint32
	// buf is the chunk being filled: a record's header, then data.
	buf    []byte
	size   uint64
	chunks uint32
	closed bool
	// aborted: Abort was called. REQUIRES l.mu: chunks are enqueued only
	// while it is false. gaveUp is its copy that Write reads without l.mu.
	aborted bool
	gaveUp  atomic.Bool
}

func (pw *partWriter) Write(p []byte) (int, error) {
	switch {
	case pw.closed:
		return 0, fmt.Errorf("persistence: snapshot %d: part %d written after Close", pw.w.index, pw.part)
	case pw.gaveUp.Load():
		return 0, fmt.Errorf("persistence: snapshot %d: part %d written after Abort", pw.w.index, pw.part)
	}
	n := len(p)
	for len(p) > 0 {
		if pw.buf == nil {
			pw.buf = pw.w.buffer()
		}
		k := copy(pw.buf[len(pw.buf):cap(pw.buf)], p)
		pw.buf = pw.buf[:len(pw.buf)+k]
		p = p[k:]
		if len(pw.buf) == cap(pw.buf) {
			if err := pw.flush(); err != nil {
				return n - len(p) - k, err
			}
		}
	}
	return n, nil
}

// buffer returns an empty chunk buffer, with room for a record's header
// and SnapshotChunkBytes of data.
func (w *snapshotWriter) buffer() []byte {
	select {
	case b := <-w.free:
		return b[:headerLen]
	default:
		return make([]byte, headerLen, headerLen+SnapshotChunkBytes)
	}
}

// flush hands the chunk in buf to the log's writer, once a token is
// free.
func (pw *partWriter) flush() error {
	w, l := pw.w, pw.w.l
	if pw.chunks == 1<<32-1 {
		return fmt.Errorf("persistence: snapshot %d: part %d has too many chunks", w.index, pw.part)
	}
	if err := w.failure(); err != nil {
		return fmt.Errorf("persistence: snapshot %d: %w", w.index, err)
	}
	k := chunkKey(w.gen, pw.stream, pw.chunks)
	v := pw.buf
	data := uint64(len(v) - headerLen)
	seal(k, v)
	w.sem <- struct{}{}
	l.mu.Lock()
	var err error
	switch {
	case pw.aborted || w.mu.done:
		err = fmt.Errorf("persistence: snapshot %d: part %d written after Abort, Commit or Close", w.index, pw.part)
	default:
		err = l.acceptingLocked()
	}
	if err != nil {
		l.mu.Unlock()
		<-w.sem
		return err
	}
	l.enqueueLocked(op{key: k, value: v, written: func(err error) {
		if err != nil {
			w.failed(err)
		} else {
			select {
			case w.free <- v:
			default:
			}
		}
		<-w.sem
	}})
	l.mu.Unlock()
	pw.buf = nil
	pw.size += data
	pw.chunks++
	return nil
}

func (pw *partWriter) Close() error {
	w := pw.w
	if pw.closed {
		return fmt.Errorf("persistence: snapshot %d: part %d closed twice", w.index, pw.part)
	}
	if len(pw.buf) > headerLen {
		if err := pw.flush(); err != nil {
			return err
		}
	}
	pw.closed = true
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.done {
		return fmt.Errorf("persistence: snapshot %d: part %d closed after Commit or Abort", w.index, pw.part)
	}
	if w.mu.parts[pw.part] != nil {
		pw.Abort()
		return fmt.Errorf("persistence: snapshot %d: part %d was complete already", w.index, pw.part)
	}
	w.mu.parts[pw.part] = &partInfo{stream: pw.stream, size: pw.size, chunks: pw.chunks}
	return nil
}

func (pw *partWriter) Abort() {
	w, l := pw.w, pw.w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if pw.aborted {
		return
	}
	pw.aborted = true
	pw.gaveUp.Store(true)
	if l.acceptingLocked() != nil {
		return // Open deletes the chunks
	}
	lo, hi := streamRange(w.gen, pw.stream)
	l.enqueueLocked(op{key: lo, end: hi})
}

// ReadSnapshot returns a reader of the log's snapshot. Errors:
// ErrNotFound (none recorded), ErrCorrupt (its records are damaged or
// disagree), ErrClosed.
func (l *Log) ReadSnapshot() (SnapshotReader, error) {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	index, meta, err := l.Snapshot()
	if err != nil {
		return nil, err
	}
	r := &snapshotReader{l: l, meta: meta, m: manifest{index: index}}
	gen, m, err := l.readManifest()
	switch {
	case errors.Is(err, ErrNotFound):
		return r, nil
	case err != nil:
		return nil, err
	case m.index != index:
		return nil, fmt.Errorf("%w: snapshot %d has the manifest of snapshot %d", ErrCorrupt, index, m.index)
	}
	r.gen, r.m, r.committed = gen, m, true
	return r, nil
}

// readManifest returns the manifest of the snapshot and its generation.
func (l *Log) readManifest() (uint64, manifest, error) {
	k := makeKey(prefixMeta, metaSnapshotParts)
	v, err := l.get(k)
	if err != nil {
		return 0, manifest{}, fmt.Errorf("persistence: snapshot manifest: %w", err)
	}
	gen, m, err := decodeManifest(k, v)
	if err != nil {
		return 0, manifest{}, fmt.Errorf("%w: snapshot manifest: %v", ErrCorrupt, err)
	}
	return gen, m, nil
}

// snapshotReader is the Log's SnapshotReader.
type snapshotReader struct {
	l    *Log
	gen  uint64
	meta []byte
	m    manifest
	// committed: the snapshot is the log's (ReadSnapshot), not one being
	// written (SnapshotWriter.Reader).
	committed bool
}

func (r *snapshotReader) Index() uint64 { return r.m.index }
func (r *snapshotReader) Meta() []byte  { return r.meta }
func (r *snapshotReader) Parts() int    { return len(r.m.parts) }

func (r *snapshotReader) Size(i int) int64 {
	if i < 0 || i >= len(r.m.parts) {
		return 0
	}
	return int64(r.m.parts[i].size)
}

func (r *snapshotReader) Part(i int) io.Reader {
	if i < 0 || i >= len(r.m.parts) {
		return &partReader{err: fmt.Errorf("persistence: snapshot %d: part %d of %d", r.m.index, i, len(r.m.parts))}
	}
	return &partReader{r: r, part: i, info: r.m.parts[i]}
}

// partReader reads one part of a snapshot.
type partReader struct {
	r    *snapshotReader
	part int
	info partInfo
	// seq is the next chunk to read; got the bytes of those read.
	seq uint32
	got uint64
	buf []byte // the unread rest of the last chunk read
	err error
}

func (pr *partReader) Read(p []byte) (int, error) {
	for len(pr.buf) == 0 {
		if pr.err != nil {
			return 0, pr.err
		}
		pr.err = pr.next()
	}
	n := copy(p, pr.buf)
	pr.buf = pr.buf[n:]
	return n, nil
}

// next reads the next chunk into buf, or returns why not (io.EOF at the
// end of the part).
func (pr *partReader) next() error {
	r, info := pr.r, pr.info
	if pr.seq == info.chunks {
		pr.buf = nil
		if pr.got != info.size {
			return fmt.Errorf("%w: snapshot %d: part %d ends at %d of %d bytes", ErrCorrupt, r.m.index, pr.part, pr.got, info.size)
		}
		return io.EOF
	}
	k := chunkKey(r.gen, info.stream, pr.seq)
	l := r.l
	l.dbMu.RLock()
	if l.dbClosed {
		l.dbMu.RUnlock()
		return ErrClosed
	}
	v, c, err := l.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		l.dbMu.RUnlock()
		if r.committed && l.snapGen.Load() != r.gen {
			return fmt.Errorf("%w: snapshot %d was replaced while it was read", ErrNotFound, r.m.index)
		}
		return fmt.Errorf("%w: snapshot %d: chunk %d of part %d is missing", ErrCorrupt, r.m.index, pr.seq, pr.part)
	}
	if err != nil {
		l.dbMu.RUnlock()
		return fmt.Errorf("persistence: snapshot %d: reading chunk %d of part %d: %w", r.m.index, pr.seq, pr.part, readErr(err))
	}
	data, err := decodeChunk(k, v)
	if err == nil {
		last := pr.seq+1 == info.chunks
		switch end := pr.got + uint64(len(data)); {
		case end > info.size:
			err = fmt.Errorf("chunk ends at %d, past the part's %d bytes", end, info.size)
		case last && end != info.size:
			err = fmt.Errorf("last chunk ends at %d of the part's %d bytes", end, info.size)
		}
	}
	if err == nil {
		if cap(pr.buf) < len(data) {
			pr.buf = make([]byte, 0, max(len(data), min(SnapshotChunkBytes, int(info.size))))
		}
		pr.buf = append(pr.buf[:0], data...)
	}
	c.Close()
	l.dbMu.RUnlock()
	if err != nil {
		return fmt.Errorf("%w: snapshot %d: chunk %d of part %d: %v", ErrCorrupt, r.m.index, pr.seq, pr.part, err)
	}
	pr.seq++
	pr.got += uint64(len(pr.buf))
	return nil
}

// cleanSnapshots deletes, at Open, the chunks of snapshots that were
// never committed (a crash, or an Abort whose deletion did not make it),
// and sets the generation of the next snapshot past every one on disk.
// A damaged manifest keeps every chunk: which ones count is unknown.
func (l *Log) cleanSnapshots() error {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixChunk},
		UpperBound: []byte{prefixChunk + 1},
	})
	if err != nil {
		return fmt.Errorf("persistence: recovery: %w", err)
	}
	var lowest, highest uint64
	if it.First() {
		lowest, _ = parseChunkGen(it.Key())
		if it.Last() {
			highest, _ = parseChunkGen(it.Key())
		}
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return fmt.Errorf("persistence: recovery: %w", readErr(err))
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("persistence: recovery: %w", err)
	}
	gen, _, err := l.readManifest()
	switch {
	case errors.Is(err, ErrNotFound):
		gen = 0
	case err != nil:
		l.log.Warn("snapshot manifest unreadable: keeping every snapshot chunk", "err", err)
		l.mu.nextGen = highest
		return nil
	}
	l.snapGen.Store(gen)
	l.mu.nextGen = max(gen, highest)
	if highest == 0 || lowest == gen && highest == gen {
		return nil
	}
	b := l.db.NewBatch()
	defer b.Close()
	lo, hi := chunkRange(gen)
	if gen == 0 {
		lo = hi // every chunk goes
	}
	_ = b.DeleteRange([]byte{prefixChunk}, lo, nil)
	_ = b.DeleteRange(hi, []byte{prefixChunk + 1}, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("persistence: recovery: deleting the chunks of uncommitted snapshots: %w", err)
	}
	l.log.Info("deleted the chunks of uncommitted snapshots", "committed", gen, "lowest", lowest, "highest", highest)
	return nil
}

// dropSnapshotOps returns the ops that delete the committed snapshot's
// manifest and chunks, as a snapshot recorded without parts replaces it.
// REQUIRES: l.snapMu.
func (l *Log) dropSnapshotOps() []op {
	mk := makeKey(prefixMeta, metaSnapshotParts)
	mhi := makeKey(prefixMeta, metaSnapshotParts+1)
	ops := []op{{key: mk, end: mhi}}
	if gen := l.snapGen.Load(); gen != 0 {
		lo, hi := chunkRange(gen)
		ops = append(ops, op{key: lo, end: hi})
	}
	return ops
}
