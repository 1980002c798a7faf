package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/convoy-gcs/convoy/internal/plant"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

// A durable member restarts from its log. At Open it replays the log to
// the application: the state of the log's snapshot (StateMachine.Restore),
// then the entries after it up to the log's durable mark, the entries
// known to be on every member's disk (Delivery.Replayed). The entries
// beyond the mark are held back. It then takes part in the group again:
//
//   - If the group lives on (a majority of its last view is alive), it
//     asks to join as a new incarnation, with the position of its log's
//     last entry. If the leader's log holds that entry, the view that
//     admits the member has the leader send it only the messages after it
//     (suffix.go): the member hands its held-back entries, then those,
//     and keeps the state its replay built. Otherwise it receives the
//     state by transfer, and its log starts again at the view's start
//     (the held-back entries are dropped).
//   - If most of the last view failed, no view change can follow it: the
//     members restart the group from their logs, and no message reported
//     durable is lost. Each restarted member claims its log in etcd
//     (membership.Recovery) once the restart has looked needed for half a
//     lease period; a live member of that view that sees the claims gives
//     up its incarnation and claims too; once no member of the view lives
//     on and a majority of its caught-up members have claimed with logs
//     that took part in it (membership.TookPart: the view itself may be
//     on no disk, if every member crashed before installing it), waiting
//     DurableConfig.RestartWait for the rest, the claimant with the
//     lowest ID commits a recovered view (membership.DecideRecovery): it
//     starts at the end of the highest log, whose holders hand their
//     held-back entries up to there and go on from their own state, and
//     serve it to the other claimants, who join.

// Versions of the metadata of a snapshot kept in the durable log (its
// first byte). Empty metadata says the member's state never came (a
// transfer did not complete).
const (
	// snapshotVersion: the state's parts follow in the metadata itself
	// (encodeParts). The runtime writes it only without parts: the member
	// joined with the state it starts with.
	snapshotVersion = 1
	// snapshotVersionParts: the state is in the snapshot's parts
	// (persistence.Log.CreateSnapshot); nothing follows.
	snapshotVersionParts = 2
)

// encodeParts encodes a state's parts for the durable log: a version
// byte, the number of parts, then each part's length and bytes.
func encodeParts(parts [][]byte) []byte {
	n := 1 + binary.MaxVarintLen64
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// errBadSnapshot: a snapshot in the durable log does not decode.
var errBadSnapshot = errors.New("convoy: malformed snapshot in the durable log")

// decodeParts decodes encodeParts's output. The parts alias b.
func decodeParts(b []byte) ([][]byte, error) {
	if len(b) == 0 || b[0] != snapshotVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadSnapshot)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: bad part count", errBadSnapshot)
	}
	b = b[k:]
	parts := make([][]byte, 0, n)
	for range n {
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: bad part length", errBadSnapshot)
		}
		parts = append(parts, b[k:k+int(size)])
		b = b[k+int(size):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadSnapshot, len(b))
	}
	return parts, nil
}

// snapshotState returns readers of the state a snapshot kept in the
// durable log holds: nil if it holds none (the member joined with the
// state it starts with).
func snapshotState(s persistence.SnapshotReader) ([]io.Reader, error) {
	meta := s.Meta()
	switch {
	case len(meta) == 1 && meta[0] == snapshotVersionParts:
		if s.Parts() == 0 {
			return nil, nil
		}
		return partReaders(s), nil
	case len(meta) > 0 && meta[0] == snapshotVersion:
		parts, err := decodeParts(meta)
		if err != nil || len(parts) == 0 {
			return nil, err
		}
		readers := make([]io.Reader, len(parts))
		for i, p := range parts {
			readers[i] = bytes.NewReader(p)
		}
		return readers, nil
	}
	return nil, fmt.Errorf("%w: unknown version", errBadSnapshot)
}

// replayLog rebuilds the application's state from the durable log at
// Open: the snapshot, then the entries after it. It returns the index of
// the last message replayed (0 if none).
func (g *Group) replayLog(ctx context.Context) (uint64, error) {
	l := g.disk
	from := l.First()
	var applied uint64
	var idx uint64
	snap, err := l.ReadSnapshot()
	if err == nil {
		idx = snap.Index()
	}
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		if from > 1 {
			g.log.Warn("durable log: trimmed without a snapshot: not replayed, the state comes by transfer", "first", from)
			_, err := g.replayMerged(ctx, 1, 0)
			return 0, err
		}
	case err != nil:
		return 0, fmt.Errorf("convoy: durable log: %w", err)
	case len(snap.Meta()) == 0 && g.cfg.State != nil:
		// A transfer to this member never completed.
		g.log.Info("durable log: holds no state yet: not replayed")
		_, err := g.replayMerged(ctx, 1, 0)
		return 0, err
	default:
		if idx+1 < from {
			g.log.Warn("durable log: trimmed past its snapshot: not replayed", "snapshot", idx, "first", from)
			_, err := g.replayMerged(ctx, 1, 0)
			return 0, err
		}
		// Without a StateMachine there is no state to restore: the
		// snapshot marks only where the log starts. A snapshot without
		// parts says the member joined with the state it starts with
		// (no transfer), which it has again now. The state streams from
		// the log as Restore reads it.
		var parts []io.Reader
		if len(snap.Meta()) > 0 {
			if parts, err = snapshotState(snap); err != nil {
				return 0, fmt.Errorf("convoy: durable log: snapshot %d: %w", idx, err)
			}
		}
		if g.cfg.State != nil && len(parts) > 0 {
			if err := g.cfg.State.Restore(parts); err != nil {
				return 0, fmt.Errorf("convoy: durable log: restore snapshot %d: %w", idx, err)
			}
		}
		applied, from = idx, idx+1
	}
	// Only what the log knows to be durable: an entry beyond may not stand
	// if the group restarts from another member's log, which need not
	// hold it.
	// The rest waits until the group says it does (enterRecovered,
	// suffixed) or is dropped (a transfer replaces the state).
	to := min(l.Last(), max(l.Durable(), applied))
	if g.cfg.test.plant.Has(plant.ReplayBeyondDurable) {
		to = l.Last() // the planted fault: the whole log
	}
	last, err := g.replayMerged(ctx, from, to)
	if err != nil {
		return 0, err
	}
	if last > 0 {
		applied = last
	}
	g.log.Info("replayed the durable log", "snapshot", idx, "from", from, "to", applied, "held", l.Last()-applied)
	return applied, nil
}

// replayEntries hands the log's entries from..to to the handler, marked
// Replayed, and returns the last index handed (0 if none).
func (g *Group) replayEntries(ctx context.Context, from, to uint64) (uint64, error) {
	var last uint64
	if from > to {
		return 0, nil
	}
	err := g.disk.Scan(ctx, from, to, func(e persistence.Entry) error {
		if g.h != nil {
			g.h(Delivery{Epoch: e.Epoch, Index: e.Index, Sender: NodeID(e.Sender), Seq: e.Seq, Payload: e.Payload, Replayed: true})
		}
		last = e.Index
		return nil
	})
	if err != nil {
		return last, fmt.Errorf("convoy: replay the durable log from %d to %d: %w", from, to, err)
	}
	return last, nil
}

// replayMerged hands the log's entries from..to and its topic entries
// (all it keeps: see topicLog) to the handler, marked Replayed, in the
// order this member delivered them: a topic entry after the group entry
// it follows (first if that one is below from: a snapshot holds the
// group's state, not the topics'). It returns the last group index
// handed (0 if none).
func (g *Group) replayMerged(ctx context.Context, from, to uint64) (uint64, error) {
	var last uint64
	next := from
	err := g.disk.ScanTopics(ctx, 1, func(e persistence.TopicEntry) error {
		if e.After >= next && next <= to {
			upTo := min(e.After, to)
			l, err := g.replayEntries(ctx, next, upTo)
			if l > 0 {
				last = l
			}
			if err != nil {
				return err
			}
			next = upTo + 1
		}
		d := Delivery{Epoch: e.Epoch, Index: e.Index, Topic: e.Topic, Sender: NodeID(e.Sender), Seq: e.Seq, Payload: e.Payload, Replayed: true}
		h := g.handlers.get(e.Topic)
		if h == nil {
			h = g.h
		}
		if h != nil {
			h(d)
		}
		return nil
	})
	if err != nil {
		return last, fmt.Errorf("convoy: replay the durable log's topic entries: %w", err)
	}
	l, err := g.replayEntries(ctx, next, to)
	if l > 0 {
		last = l
	}
	return last, err
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop")

// claim describes this member's log for the restart of view cur.
func (r *runner) claim(cur *membership.View) (membership.Recovery, error) {
	l := r.g.disk
	rc := membership.Recovery{Epoch: cur.Epoch, Member: r.vs.Self()}
	last := l.Last()
	if last <= cur.Start {
		rc.LogLast = last
	} else {
		// Entries of cur's epoch may stand; an entry of another epoch
		// beyond cur's start lies beyond its own view's cut.
		rc.LogLast = cur.Start
		from := max(cur.Start+1, l.First())
		if from > cur.Start+1 {
			// Trimmed into the view (an application snapshot taken in it).
			rc.LogEpoch, rc.LogLast = cur.Epoch, from-1
		}
		err := l.Scan(r.g.ctx, from, last, func(e persistence.Entry) error {
			if e.Epoch != cur.Epoch {
				return errStopScan
			}
			rc.LogEpoch, rc.LogLast = cur.Epoch, e.Index
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return rc, err
		}
	}
	rc.Beyond = last > rc.LogLast || r.applied > rc.LogLast
	views, err := l.Views(r.g.ctx)
	if err != nil {
		return rc, err
	}
	logged := make(map[uint64]bool, len(views))
	for _, v := range views {
		if v.Rank(r.vs.Self().ID) >= 0 {
			logged[v.Epoch] = true
		}
	}
	// The log need not hold cur's record: every member may have crashed
	// between its commit and its install.
	if rc.InView, err = membership.TookPart(r.vs.Self().ID, *cur, logged, r.view); err != nil {
		return rc, fmt.Errorf("the views before view %d: %w", cur.Epoch, err)
	}
	return rc, nil
}

// claimLog claims this member's durable log in etcd for the restart of
// view cur.
func (r *runner) claimLog(cur *membership.View) {
	g := r.g
	claim, err := r.claim(cur)
	if err != nil {
		g.log.Error("restart of the group: describing the durable log", "err", err)
		return
	}
	self := r.vs.Self()
	r.claimed = claim
	g.log.Info("claiming the durable log for the restart", "epoch", claim.Epoch, "log_epoch", claim.LogEpoch, "log_last", claim.LogLast, "beyond", claim.Beyond)
	r.async("restart claim", func(ctx context.Context, s *membership.Store) error {
		if err := s.Register(ctx, self); err != nil {
			return err
		}
		return s.PutRecovery(ctx, claim)
	})
}

// handClaimed hands the application the entries of this member's log that
// its claim to restart the group said belong to the group's sequence, as
// it joins recovered view rec without a state transfer (it has no
// StateMachine, or no donor): the restart confirms them, and nothing
// replaces them, so dropping them with the log would lose messages that
// may have been reported durable. A joiner of a recovered view is not a
// holder of the log chosen to go on from, and its log starts again at
// rec.Start.
func (r *runner) handClaimed(rec *membership.View) error {
	c := r.claimed
	if c.Epoch == 0 || c.Epoch+1 != rec.Epoch {
		return nil
	}
	to := min(c.LogLast, rec.Start, r.g.disk.Last())
	if r.applied >= to || r.g.disk.First() > r.applied+1 {
		return nil
	}
	last, err := r.g.replayEntries(r.g.ctx, r.applied+1, to)
	if last > 0 {
		r.applied = last
	}
	return err
}

// enterRecovered prepares this member's log and state for recovered view
// rec, whose log it holds: the application gets the entries it has not
// seen yet, up to the view's start.
func (r *runner) enterRecovered(rec *membership.View) error {
	g := r.g
	if last := g.disk.Last(); last != rec.Start {
		return fmt.Errorf("durable log ends at %d, the restart at %d", last, rec.Start)
	}
	if r.applied >= rec.Start {
		return nil
	}
	last, err := g.replayEntries(g.ctx, r.applied+1, rec.Start)
	if err != nil {
		return err
	}
	r.applied = last
	return nil
}
