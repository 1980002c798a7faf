package memlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/convoy-gcs/convoy/persistence"
)

// CreateSnapshot starts writing a snapshot of parts parts as of index,
// as persistence.Log.CreateSnapshot does. The parts are kept in memory
// until Commit, which records the snapshot in one write that a crash
// keeps whole or not at all, and syncs the log before it returns (see
// Sync), or fails with persistence.ErrSnapshotStale if InstallSnapshot
// came between. Errors: persistence.ErrClosed, or an error wrapping
// persistence.ErrFailed.
func (l *Log) CreateSnapshot(ctx context.Context, index uint64, parts int) (persistence.SnapshotWriter, error) {
	if parts < 0 || parts > persistence.MaxSnapshotParts {
		return nil, fmt.Errorf("memlog: snapshot of %d parts", parts)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptingLocked(); err != nil {
		return nil, err
	}
	w := &snapshotWriter{l: l, index: index, installs: l.mu.installs}
	w.mu.parts = make([][]byte, parts)
	w.mu.complete = make([]bool, parts)
	return w, nil
}

// snapshotWriter is the Log's persistence.SnapshotWriter.
type snapshotWriter struct {
	l     *Log
	index uint64
	// installs is the log's count of InstallSnapshot calls when the
	// writer was created.
	installs uint64
	mu       struct {
		sync.Mutex
		parts    [][]byte
		complete []bool
		done     bool // committed or aborted
	}
}

func (w *snapshotWriter) Part(i int) (persistence.PartWriter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.mu.done:
		return nil, fmt.Errorf("memlog: snapshot %d: part %d of a snapshot committed or aborted", w.index, i)
	case i < 0 || i >= len(w.mu.parts):
		return nil, fmt.Errorf("memlog: snapshot %d: part %d of %d", w.index, i, len(w.mu.parts))
	}
	return &partWriter{w: w, part: i}, nil
}

// completeLocked returns the parts, or an error if one is missing.
// REQUIRES: w.mu.
func (w *snapshotWriter) completeLocked() ([][]byte, error) {
	for i, ok := range w.mu.complete {
		if !ok {
			return nil, fmt.Errorf("memlog: snapshot %d: part %d of %d is not complete", w.index, i, len(w.mu.parts))
		}
	}
	return w.mu.parts, nil
}

func (w *snapshotWriter) Reader(ctx context.Context) (persistence.SnapshotReader, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.done {
		return nil, fmt.Errorf("memlog: snapshot %d: reading a snapshot committed or aborted", w.index)
	}
	parts, err := w.completeLocked()
	if err != nil {
		return nil, err
	}
	return &snapshotReader{index: w.index, parts: parts}, nil
}

func (w *snapshotWriter) Commit(ctx context.Context, meta []byte) error {
	w.mu.Lock()
	if w.mu.done {
		w.mu.Unlock()
		return fmt.Errorf("memlog: snapshot %d: committed or aborted already", w.index)
	}
	parts, err := w.completeLocked()
	if err == nil {
		w.mu.done = true
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	l := w.l
	l.mu.Lock()
	err = l.acceptingLocked()
	if err == nil && l.mu.installs != w.installs {
		err = persistence.ErrSnapshotStale
	}
	var wrote bool
	if err == nil {
		if len(parts) == 0 {
			parts = nil
		}
		wrote, err = l.commitLocked(write{kind: writeSnapshot, index: w.index, data: clone(meta), parts: parts})
	}
	l.mu.Unlock()
	l.notify(wrote)
	if err != nil {
		return fmt.Errorf("memlog: snapshot %d: %w", w.index, err)
	}
	return nil
}

func (w *snapshotWriter) Abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.done = true
	return nil
}

// partWriter is the Log's persistence.PartWriter.
type partWriter struct {
	w    *snapshotWriter
	part int
	mu   sync.Mutex // Abort may come while Write runs
	buf  []byte
	// closed: Close was called; aborted: Abort was.
	closed, aborted bool
}

func (pw *partWriter) Write(p []byte) (int, error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.closed || pw.aborted {
		return 0, fmt.Errorf("memlog: snapshot %d: part %d written after Close or Abort", pw.w.index, pw.part)
	}
	pw.buf = append(pw.buf, p...)
	return len(p), nil
}

func (pw *partWriter) Close() error {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	w := pw.w
	if pw.closed || pw.aborted {
		return fmt.Errorf("memlog: snapshot %d: part %d closed after Close or Abort", w.index, pw.part)
	}
	pw.closed = true
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.mu.done:
		return fmt.Errorf("memlog: snapshot %d: part %d closed after Commit or Abort", w.index, pw.part)
	case w.mu.complete[pw.part]:
		return fmt.Errorf("memlog: snapshot %d: part %d was complete already", w.index, pw.part)
	}
	w.mu.parts[pw.part], w.mu.complete[pw.part] = pw.buf, true
	pw.buf = nil
	return nil
}

func (pw *partWriter) Abort() {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if !pw.closed {
		pw.aborted, pw.buf = true, nil
	}
}

// ReadSnapshot returns a reader of the log's snapshot, as
// persistence.Log.ReadSnapshot does. Errors: persistence.ErrNotFound
// (none recorded), persistence.ErrClosed.
func (l *Log) ReadSnapshot() (persistence.SnapshotReader, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, fmt.Errorf("memlog: snapshot: %w", persistence.ErrClosed)
	}
	if !l.mu.img.hasSnap {
		return nil, fmt.Errorf("memlog: snapshot: %w", persistence.ErrNotFound)
	}
	return &snapshotReader{index: l.mu.img.snapAt, meta: clone(l.mu.img.snapMeta), parts: l.mu.img.snapParts}, nil
}

// snapshotReader is the Log's persistence.SnapshotReader.
type snapshotReader struct {
	index uint64
	meta  []byte
	parts [][]byte // never modified
}

func (r *snapshotReader) Index() uint64 { return r.index }
func (r *snapshotReader) Meta() []byte  { return r.meta }
func (r *snapshotReader) Parts() int    { return len(r.parts) }

func (r *snapshotReader) Size(i int) int64 {
	if i < 0 || i >= len(r.parts) {
		return 0
	}
	return int64(len(r.parts[i]))
}

func (r *snapshotReader) Part(i int) io.Reader {
	if i < 0 || i >= len(r.parts) {
		return &errReader{fmt.Errorf("memlog: snapshot %d: part %d of %d", r.index, i, len(r.parts))}
	}
	return bytes.NewReader(r.parts[i])
}

// errReader is a reader that fails.
type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }
