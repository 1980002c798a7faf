// Package recfile writes what a test's member process records — its
// views, deliveries and sends — as JSON lines to a file, so that a
// process killed with SIGKILL loses only its latest records: the tests
// that run Convoy members as processes of their own (tests/vsproc,
// tests/durableproc, the fault campaign's group members) check the
// prefixes their members left.
//
// Records are buffered and written out by a goroutine at a fixed
// interval, or at once with Write. Each write out is one write call on
// a file opened for appending, so a record that Write returned after is
// in the file (in the kernel's cache, which SIGKILL does not lose); the
// file may end with a torn line only if a write failed midway (a full
// disk), which check.ReadLines drops.
package recfile

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// File is a file of JSON-line records. Its methods are safe for
// concurrent use; records are written in the order of the calls.
type File struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
	err error // the first error

	done    chan struct{}
	flushed chan struct{}
}

// Open opens path for appending, creating it if need be, and writes out
// what is buffered every interval until Close.
func Open(path string, interval time.Duration) (*File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	rf := &File{f: f, done: make(chan struct{}), flushed: make(chan struct{})}
	go rf.flushLoop(interval)
	return rf, nil
}

func (f *File) flushLoop(interval time.Duration) {
	defer close(f.flushed)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.mu.Lock()
			f.flushLocked()
			f.mu.Unlock()
		case <-f.done:
			return
		}
	}
}

// Add buffers rec, to be written out within the interval.
func (f *File) Add(rec any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(rec)
}

// Write writes out what is buffered and rec, at once, before it
// returns.
func (f *File) Write(rec any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(rec)
	f.flushLocked()
}

// addLocked appends rec as one line. REQUIRES: f.mu.
func (f *File) addLocked(rec any) {
	b, err := json.Marshal(rec)
	if err != nil {
		f.fail(err)
		return
	}
	f.buf = append(append(f.buf, b...), '\n')
}

// flushLocked writes the buffer out with one write call. REQUIRES: f.mu.
func (f *File) flushLocked() {
	if len(f.buf) == 0 {
		return
	}
	if _, err := f.f.Write(f.buf); err != nil {
		f.fail(err)
	}
	f.buf = f.buf[:0]
}

// fail keeps err if it is the first. REQUIRES: f.mu.
func (f *File) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// Close writes out what is buffered, stops the writer and closes the
// file. It returns the first error of any write.
func (f *File) Close() error {
	close(f.done)
	<-f.flushed
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushLocked()
	if err := f.f.Close(); err != nil {
		f.fail(err)
	}
	return f.err
}
