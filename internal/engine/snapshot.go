package engine

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/membership"
)

// ErrNoState is returned by Snapshot without Config.State.
var ErrNoState = errors.New("convoy: no state machine (Config.State)")

// snapReply is the loop's answer to Snapshot.
type snapReply struct {
	index uint64
	data  []byte
	err   error
}

// Snapshot takes a snapshot of the application's state (Config.State) as
// of the last message delivered to it, keeps it in the durable log and
// trims the log before it. After a restart this member restores the
// snapshot and replays only the entries after it. It returns the index
// the snapshot reflects.
//
// Deliveries wait while StateMachine.Snapshot runs (it writes the whole
// state as one part); the log write and the trim do not hold them up.
// Errors: ErrNotDurable without Config.Durable, ErrNoState without
// Config.State, ErrNotMember while this member takes part in no view or
// waits for its state, ErrClosed, ctx's, and the log's errors.
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
	reply := make(chan snapReply, 1)
	select {
	case g.events <- event{kind: evSnapshot, reply: reply}:
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
	trace.SpanFromContext(ctx).AddEvent("taken", trace.WithAttributes(attribute.Int("convoy.bytes", len(res.data))))
	if err := g.disk.SetSnapshot(ctx, res.index, encodeParts([][]byte{res.data})); err != nil {
		return 0, fmt.Errorf("convoy: snapshot: %w", err)
	}
	if err := g.disk.TrimBefore(ctx, res.index+1); err != nil {
		return 0, fmt.Errorf("convoy: snapshot: trim the log: %w", err)
	}
	g.log.Info("snapshot kept in the durable log", "index", res.index, "bytes", len(res.data))
	return res.index, nil
}

// takeSnapshot snapshots the application's state for Snapshot, between
// two deliveries.
func (r *runner) takeSnapshot(reply chan<- snapReply) {
	g := r.g
	if g.dynamic() && (r.v == nil || r.restoring) {
		reply <- snapReply{err: fmt.Errorf("%w: the state is being replaced", ErrNotMember)}
		return
	}
	if r.snap != nil {
		// Snapshots for joiners are being taken off the loop: this one
		// follows them (snapshotted), so that one reads the state at a
		// time.
		r.snapWant = append(r.snapWant, reply)
		return
	}
	data, err := membership.SnapshotParts(g.cfg.State, []int{0}, 1)
	if err != nil {
		reply <- snapReply{err: fmt.Errorf("convoy: snapshot: %w", err)}
		return
	}
	reply <- snapReply{index: r.applied, data: data[0]}
}

// servePendingSnapshots takes the snapshots asked for while snapshots for
// joiners were being taken.
func (r *runner) servePendingSnapshots() {
	want := r.snapWant
	r.snapWant = nil
	for _, reply := range want {
		r.takeSnapshot(reply)
	}
}
