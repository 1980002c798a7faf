package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// Where the state being transferred is kept, so that no member holds a
// large state in memory: a donor writes each part it snapshots to a
// spill, which it serves as the joiners ask; a joiner writes each part
// it receives to its durable log's next snapshot (logSink), or, without
// one, to a spill (spillSink), and restores from there.

// defaultSpillBytes is how much of a part of the state a spill keeps in
// memory before it moves to a file: a state is cut into many parts (16
// per donor), so its small parts cost little memory and no disk, and a
// large one costs a file and no memory.
const defaultSpillBytes = 1 << 20

// spill holds a part of the application's state written to it: in memory
// up to limit bytes, beyond that in a file in the system's temporary
// directory, unlinked at once where the system allows it, so that a
// crash leaves nothing behind. Write and Close are for one goroutine at
// a time; ReadAt may be called concurrently once writing is over.
type spill struct {
	limit    int
	mem      []byte
	f        *os.File
	unlinked bool // f's name is gone already
	n        int64
}

func newSpill(limit int) *spill { return &spill{limit: limit} }

func (s *spill) Write(p []byte) (int, error) {
	if s.f == nil && len(s.mem)+len(p) > s.limit {
		f, err := os.CreateTemp("", "convoy-state-*")
		if err != nil {
			return 0, fmt.Errorf("convoy: spilling state to a file: %w", err)
		}
		s.f, s.unlinked = f, os.Remove(f.Name()) == nil
		if _, err := f.Write(s.mem); err != nil {
			return 0, fmt.Errorf("convoy: spilling state to a file: %w", err)
		}
		s.mem = nil
	}
	if s.f != nil {
		n, err := s.f.Write(p)
		s.n += int64(n)
		if err != nil {
			return n, fmt.Errorf("convoy: spilling state to a file: %w", err)
		}
		return n, nil
	}
	s.mem = append(s.mem, p...)
	s.n += int64(len(p))
	return len(p), nil
}

func (s *spill) ReadAt(p []byte, off int64) (int, error) {
	if s.f != nil {
		return s.f.ReadAt(p, off)
	}
	if off >= int64(len(s.mem)) {
		return 0, io.EOF
	}
	n := copy(p, s.mem[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// size returns the number of bytes written.
func (s *spill) size() int64 { return s.n }

// inMemory returns the bytes written, if they are all in memory.
func (s *spill) inMemory() ([]byte, bool) { return s.mem, s.f == nil }

// reader returns a reader of what was written, from the start.
func (s *spill) reader() io.Reader { return io.NewSectionReader(s, 0, s.n) }

// Close releases the spill's memory and file.
func (s *spill) Close() error {
	s.mem = nil
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if !s.unlinked {
		_ = os.Remove(s.f.Name())
	}
	s.f = nil
	return err
}

// stateSink is where a joiner's transfer puts the parts it receives.
type stateSink interface {
	membership.PartSink
	// readers returns readers of the parts, once every one is complete.
	readers(ctx context.Context) ([]io.Reader, error)
	// bytes returns the size of the parts complete so far.
	bytes() int64
	// keep makes the parts the durable log's snapshot, as of the view's
	// start (a no-op without a durable log).
	keep(ctx context.Context) error
	// discard releases what the sink holds (after keep, what is not in
	// the log). It may be called more than once, and while attempts are
	// still written: those it ends.
	discard()
}

// snapshotInLog is the metadata of a snapshot whose state is in the
// durable log's snapshot parts (see replayLog).
var snapshotInLog = []byte{snapshotVersionParts}

// logSink writes the parts a joiner receives to its durable log's next
// snapshot: the state reaches the disk once, as it arrives, and the
// joiner restores from there.
type logSink struct {
	w persistence.SnapshotWriter

	mu   sync.Mutex
	size int64
}

func (s *logSink) Begin(part int, size int64) (membership.PartWriter, error) {
	pw, err := s.w.Part(part)
	if err != nil {
		return nil, err
	}
	return &logAttempt{PartWriter: pw, s: s, size: size}, nil
}

// logAttempt counts the part's bytes once it is complete.
type logAttempt struct {
	persistence.PartWriter
	s    *logSink
	size int64
}

func (a *logAttempt) Close() error {
	if err := a.PartWriter.Close(); err != nil {
		return err
	}
	a.s.mu.Lock()
	a.s.size += a.size
	a.s.mu.Unlock()
	return nil
}

func (s *logSink) readers(ctx context.Context) ([]io.Reader, error) {
	r, err := s.w.Reader(ctx)
	if err != nil {
		return nil, err
	}
	return partReaders(r), nil
}

func (s *logSink) bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

func (s *logSink) keep(ctx context.Context) error { return s.w.Commit(ctx, snapshotInLog) }

func (s *logSink) discard() { _ = s.w.Abort() }

// partReaders returns readers of the parts of r.
func partReaders(r persistence.SnapshotReader) []io.Reader {
	out := make([]io.Reader, r.Parts())
	for i := range out {
		out[i] = r.Part(i)
	}
	return out
}

// spillSink keeps the parts a joiner without a durable log receives in
// spills.
type spillSink struct {
	limit int

	mu        sync.Mutex
	parts     []*spill // by part, once complete
	discarded bool
}

func newSpillSink(parts, limit int) *spillSink {
	return &spillSink{limit: limit, parts: make([]*spill, parts)}
}

func (s *spillSink) Begin(part int, size int64) (membership.PartWriter, error) {
	if part < 0 || part >= len(s.parts) {
		return nil, fmt.Errorf("convoy: part %d of %d", part, len(s.parts))
	}
	return &spillAttempt{s: s, part: part, sp: newSpill(s.limit)}, nil
}

// errAttemptEnded: a write to an attempt that was aborted or closed.
var errAttemptEnded = errors.New("convoy: state transfer attempt ended")

// spillAttempt is one attempt at a part, into a spill of its own.
type spillAttempt struct {
	s    *spillSink
	part int
	mu   sync.Mutex // Abort may come while Write runs
	sp   *spill     // nil once closed or aborted
}

func (a *spillAttempt) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sp == nil {
		return 0, errAttemptEnded
	}
	return a.sp.Write(p)
}

func (a *spillAttempt) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := a.sp
	if sp == nil {
		return errAttemptEnded
	}
	a.sp = nil
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.discarded || s.parts[a.part] != nil {
		sp.Close()
		return fmt.Errorf("convoy: part %d: %w", a.part, errAttemptEnded)
	}
	s.parts[a.part] = sp
	return nil
}

func (a *spillAttempt) Abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sp != nil {
		a.sp.Close()
		a.sp = nil
	}
}

func (s *spillSink) readers(context.Context) ([]io.Reader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]io.Reader, len(s.parts))
	for i, sp := range s.parts {
		if sp == nil {
			return nil, fmt.Errorf("convoy: part %d of %d missing", i, len(s.parts))
		}
		out[i] = sp.reader()
	}
	return out, nil
}

func (s *spillSink) bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, sp := range s.parts {
		if sp != nil {
			n += sp.size()
		}
	}
	return n
}

func (s *spillSink) keep(context.Context) error { return nil }

func (s *spillSink) discard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discarded = true
	for i, sp := range s.parts {
		if sp != nil {
			sp.Close()
			s.parts[i] = nil
		}
	}
}
