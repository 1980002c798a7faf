package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/membership"
)

// ErrNoState is returned by Snapshot without Config.State.
var ErrNoState = errors.New("convoy: no state machine (Config.State)")

// snapReply is the loop's answer to Snapshot: the index the state is at,
// and how to read it there.
type snapReply struct {
	index uint64
	// state writes the state as of index. Deliveries wait until Snapshot
	// closes its release channel, unless free is set: then state reads a
	// checkpoint, and free releases it.
	state func(w io.Writer) error
	free  func()
	err   error
}

// snapRequest is a Snapshot call waiting for the loop (snapWant).
type snapRequest struct {
	reply   chan<- snapReply
	release <-chan struct{}
}

// Snapshot takes a snapshot of the application's state (Config.State) as
// of the last message delivered to it, keeps it in the durable log and
// trims the log before it. After a restart this member restores the
// snapshot and replays only the entries after it. It returns the index
// the snapshot reflects.
//
// The state streams into the log as StateMachine.Snapshot writes it, in
// chunks, so that a state of any size costs little memory. Deliveries
// wait while StateMachine.Snapshot runs (it writes the whole state as
// one part), on the caller's goroutine, unless the state machine is a
// membership.Checkpointer: its checkpoint is taken on the loop between
// two deliveries, and deliveries go on while the checkpoint is written.
// Either way the member's loop goes on (its heartbeats, its part in view
// changes), and the log's commit and the trim do not hold deliveries up.
// One snapshot is taken at a time: a call waits for the one in progress.
// Errors: ErrNotDurable without Config.Durable, ErrNoState without
// Config.State, ErrNotMember while this member takes part in no view or
// waits for its state, ErrClosed, ctx's, the application's, and the
// log's errors.
func (g *Group) Snapshot(ctx context.Context) (uint64, error) {
	if g.disk == nil {
		return 0, ErrNotDurable
	}
	if g.cfg.State == nil {
		return 0, ErrNoState
	}
	ctx, span := g.tr.Start(ctx, "convoy.snapshot")
	defer span.End()
	idx, err := g.snapshot(ctx)
	span.SetAttributes(attribute.Int64("convoy.index", int64(idx)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return idx, err
}

func (g *Group) snapshot(ctx context.Context) (uint64, error) {
	select {
	case g.snapTurn <- struct{}{}:
		defer func() { <-g.snapTurn }()
	case <-g.stop:
		return 0, ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	reply := make(chan snapReply, 1)
	// release lets the deliveries go on; it is closed on every way out,
	// once: the loop may have answered after the caller gave up.
	release := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	defer done()
	select {
	case g.events <- event{kind: evSnapshot, reply: reply, release: release}:
	case <-g.stop:
		return 0, ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var res snapReply
	select {
	case res = <-reply:
	case <-g.stop:
		return 0, ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if res.err != nil {
		return 0, res.err
	}
	if res.free != nil {
		defer res.free()
	}
	n, err := g.writeSnapshot(ctx, &res, done)
	if err != nil {
		return 0, fmt.Errorf("convoy: snapshot: %w", err)
	}
	trace.SpanFromContext(ctx).AddEvent("written", trace.WithAttributes(attribute.Int64("convoy.bytes", n)))
	if err := g.disk.TrimBefore(ctx, res.index+1); err != nil {
		return 0, fmt.Errorf("convoy: snapshot: trim the log: %w", err)
	}
	g.log.Info("snapshot kept in the durable log", "index", res.index, "bytes", n)
	return res.index, nil
}

// writeSnapshot writes the state res describes into the durable log as
// one part, calls read once it is read, and commits it. It returns the
// size of the state.
func (g *Group) writeSnapshot(ctx context.Context, res *snapReply, read func()) (int64, error) {
	w, err := g.disk.CreateSnapshot(ctx, res.index, 1)
	if err != nil {
		read()
		return 0, err
	}
	pw, err := w.Part(0)
	if err != nil {
		read()
		_ = w.Abort()
		return 0, err
	}
	cw := &countingWriter{w: pw}
	err = res.state(cw)
	read()
	if err == nil {
		err = pw.Close()
	}
	if err == nil {
		err = w.Commit(ctx, snapshotInLog)
	}
	if err != nil {
		_ = w.Abort()
		return 0, err
	}
	return cw.n, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// takeSnapshot answers Snapshot between two deliveries: the index, and
// the state to read there: a checkpoint of it, if the state machine is a
// Checkpointer, or else the state itself, which holds still until the
// caller releases it.
func (r *runner) takeSnapshot(req snapRequest) {
	g := r.g
	if g.dynamic() && (r.v == nil || r.restoring) {
		req.reply <- snapReply{err: fmt.Errorf("%w: the state is being replaced", ErrNotMember)}
		return
	}
	if c, ok := g.cfg.State.(membership.Checkpointer); ok {
		// The state as of now, which deliveries do not change.
		cp, err := c.Checkpoint()
		if err != nil {
			req.reply <- snapReply{err: fmt.Errorf("convoy: snapshot: checkpoint: %w", err)}
			return
		}
		req.reply <- snapReply{index: r.applied, state: func(w io.Writer) error { return cp.Snapshot(w, 0, 1) }, free: cp.Release}
		return
	}
	if r.snap != nil {
		// Snapshots for joiners are being taken off the loop: this one
		// follows them (stateFree), so that one reads the state at a
		// time.
		r.snapWant = append(r.snapWant, req)
		return
	}
	r.own = req.release
	sm := g.cfg.State
	req.reply <- snapReply{index: r.applied, state: func(w io.Writer) error { return sm.Snapshot(w, 0, 1) }}
}

// servePendingSnapshots takes the snapshots asked for while snapshots for
// joiners were being taken.
func (r *runner) servePendingSnapshots() {
	want := r.snapWant
	r.snapWant = nil
	for _, req := range want {
		r.takeSnapshot(req)
	}
}

// stateBusy reports whether the application's state must hold still: a
// snapshot reads it, for joiners (snap, unless it reads a checkpoint) or
// for Snapshot (own).
func (r *runner) stateBusy() bool { return r.snap != nil && r.snap.hold || r.own != nil }

// ownReleased follows the end of Snapshot's read of the state.
func (r *runner) ownReleased() {
	r.own = nil
	r.stateFree()
}

// waitOwnSnapshot waits until Snapshot has read the state, if it reads
// it: the state is about to be replaced.
func (r *runner) waitOwnSnapshot() {
	if r.own != nil {
		<-r.own
		r.own = nil
	}
}
