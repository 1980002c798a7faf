package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"time"

	"github.com/convoy-gcs/convoy/internal/childproc"
)

// children is a set of a benchmark's helper processes, each printing
// events of type T on standard output, one JSON object per line, into one
// queue. Its methods are called from one goroutine.
type children[T any] struct {
	log *slog.Logger
	// self says how to run the children (their environment); stderr gets
	// their standard error.
	self   selfExec
	stderr io.Writer
	procs  []*childproc.Proc
	ev     chan T
	stop   chan struct{} // closed by close: events are dropped from then on
	closed bool
}

// newChildren returns an empty set whose queue holds up to queueLen
// events.
func newChildren[T any](log *slog.Logger, queueLen int, self selfExec, stderr io.Writer) *children[T] {
	return &children[T]{log: log, self: self, stderr: stderr, ev: make(chan T, queueLen), stop: make(chan struct{})}
}

// start starts cmd as the child name. The events it prints go to the
// queue, then the one exited makes from how it ended. A line that does not
// decode is logged and skipped.
func (cs *children[T]) start(cmd *exec.Cmd, name string, exited func(err error) T) (*childproc.Proc, error) {
	p, err := childproc.Start(cmd, childproc.Options{
		Name:   name,
		Env:    cs.self.env,
		Stderr: cs.stderr,
		Line: func(line []byte) {
			var ev T
			if err := json.Unmarshal(line, &ev); err != nil {
				cs.log.Warn("unreadable line from "+name, "line", string(line))
				return
			}
			cs.emit(ev)
		},
		Exited: func(err error) { cs.emit(exited(err)) },
	})
	if err != nil {
		return nil, err
	}
	cs.procs = append(cs.procs, p)
	return p, nil
}

func (cs *children[T]) emit(ev T) {
	select {
	case cs.ev <- ev:
	case <-cs.stop:
	}
}

// next returns the next event; doing says what the caller waits for,
// should ctx end first.
func (cs *children[T]) next(ctx context.Context, doing string) (T, error) {
	select {
	case ev := <-cs.ev:
		return ev, nil
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%s: %w", doing, context.Cause(ctx))
	}
}

// close stops every child at once: it closes their standard input and
// kills those still running after grace. It returns an error if a child
// did not exit cleanly (one ended by Kill did). Later calls do nothing.
func (cs *children[T]) close(grace time.Duration) error {
	if cs.closed {
		return nil
	}
	cs.closed = true
	close(cs.stop)
	return childproc.StopAll(grace, cs.procs...)
}

// errText returns err's message, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
