package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
	"github.com/convoy-gcs/convoy/rdma"
)

// A durable member that restarts on its log and finds the group alive
// asks to join with the position of its log's last entry
// (membership.LogPos). If the leader's own log holds that very entry,
// the view that admits the member names the leader as its donor of the
// messages after it (membership.Suffix): the member keeps the state its
// log replay built and receives only what it missed, from the leader's
// log, instead of a snapshot of the whole state.

// suffixStream is the transfer stream of the i-th suffix transfer of a
// view (transferStream's low byte is 1).
func suffixStream(epoch uint64, i int) rdma.StreamID {
	return rdma.StreamID(1<<62 | epoch<<8 | uint64(2+i))
}

// suffixVersion is the first byte of an encoded suffix.
const suffixVersion = 1

// encodeSuffix encodes log entries for a suffix transfer: a version byte,
// the number of entries, then each entry's index, epoch, sender, seq and
// payload length (uvarints) and payload.
func encodeSuffix(es []persistence.Entry) []byte {
	n := 1 + binary.MaxVarintLen64
	for i := range es {
		n += 5*binary.MaxVarintLen64 + len(es[i].Payload)
	}
	b := make([]byte, 0, n)
	b = append(b, suffixVersion)
	b = binary.AppendUvarint(b, uint64(len(es)))
	for i := range es {
		e := &es[i]
		for _, x := range []uint64{e.Index, e.Epoch, e.Sender, e.Seq, uint64(len(e.Payload))} {
			b = binary.AppendUvarint(b, x)
		}
		b = append(b, e.Payload...)
	}
	return b
}

// errBadSuffix: a suffix transfer does not decode, or is not the one
// asked for.
var errBadSuffix = errors.New("convoy: malformed suffix transfer")

// decodeSuffix decodes encodeSuffix's output, which must hold exactly the
// entries from..to in order. It bounds everything by the input's length;
// the payloads alias b.
func decodeSuffix(b []byte, from, to uint64) ([]persistence.Entry, error) {
	if len(b) == 0 || b[0] != suffixVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadSuffix)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) || from > to+1 || n != to+1-from {
		return nil, fmt.Errorf("%w: %d entries for %d..%d", errBadSuffix, n, from, to)
	}
	b = b[k:]
	es := make([]persistence.Entry, 0, n)
	for i := range n {
		var f [5]uint64
		for j := range f {
			x, k := binary.Uvarint(b)
			if k <= 0 {
				return nil, fmt.Errorf("%w: entry %d truncated", errBadSuffix, i)
			}
			f[j], b = x, b[k:]
		}
		if f[0] != from+i {
			return nil, fmt.Errorf("%w: entry %d has index %d, want %d", errBadSuffix, i, f[0], from+i)
		}
		if f[4] > uint64(len(b)) {
			return nil, fmt.Errorf("%w: entry %d: payload of %d bytes, %d left", errBadSuffix, f[0], f[4], len(b))
		}
		es = append(es, persistence.Entry{Index: f[0], Epoch: f[1], Sender: f[2], Seq: f[3], Payload: b[:f[4]:f[4]]})
		b = b[f[4]:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadSuffix, len(b))
	}
	return es, nil
}

// logPos returns the position of this member's log for a join request,
// if the application's state is the log's up to some entry (it replayed
// the log up to its durable mark): the group may then send it only what
// follows the log, and it hands the rest of its own log first.
func (r *runner) logPos() (membership.LogPos, bool) {
	l := r.g.disk
	if l == nil || r.applied == 0 || r.applied > l.Last() || r.applied < l.Last() && l.First() > r.applied+1 {
		return membership.LogPos{}, false
	}
	e, err := l.Get(l.Last())
	if err != nil {
		return membership.LogPos{}, false
	}
	return membership.LogPos{Last: e.Index, Epoch: e.Epoch, Sender: e.Sender, Seq: e.Seq}, true
}

// addSuffixes has next, a view this member proposes as leader, send
// joiners that restarted with their logs only the messages they miss,
// from this member's log, when it holds the entry their logs end with.
func (r *runner) addSuffixes(next *membership.View, logs map[membership.ID]membership.LogPos) {
	l := r.g.disk
	if l == nil || len(logs) == 0 {
		return
	}
	for _, id := range next.Joining {
		pos, ok := logs[id]
		if !ok || pos.Last > next.Start || pos.Last < l.First() || len(next.Suffixes) == membership.MaxSuffixes {
			continue
		}
		e, err := l.Get(pos.Last)
		if err != nil || e.Epoch != pos.Epoch || e.Sender != pos.Sender || e.Seq != pos.Seq {
			continue // not the group's sequence, or not here: a snapshot then
		}
		next.Suffixes = append(next.Suffixes, membership.Suffix{ID: id, From: pos.Last + 1, Donor: r.vs.Self().ID})
	}
}

// snapshotJoiners returns rec's joiners that need a snapshot of the
// state: those that receive no suffix.
func snapshotJoiners(rec *membership.View) []membership.ID {
	var out []membership.ID
	for _, id := range rec.Joining {
		if _, ok := rec.SuffixOf(id); !ok {
			out = append(out, id)
		}
	}
	return out
}

// donateSuffixes serves the suffix transfers of view v this member is the
// donor of: once its log holds the previous view's messages, it reads
// each joiner's missing messages from it.
func (r *runner) donateSuffixes(v *view) {
	g, rec := r.g, &v.rec
	for i, sf := range rec.Suffixes {
		if sf.Donor != r.vs.Self().ID || g.disk == nil {
			continue
		}
		dcfg := membership.DonorConfig{
			Endpoint: g.ep, Stream: suffixStream(rec.Epoch, i), Joiners: []rdma.NodeID{rdma.NodeID(sf.ID)},
			Pending: []int{0}, Of: 1, Logger: g.cfg.Logger, OnSent: g.m.transferred(roleDonor, kindSuffix),
		}
		dcfg.Clock, dcfg.Rand = g.transferClock()
		d, err := membership.NewDonor(g.ctx, dcfg)
		if err != nil {
			g.log.Error("serving a suffix", "epoch", rec.Epoch, "joiner", sf.ID, "err", err)
			continue
		}
		if len(v.suffixDonors) == 0 {
			v.suffixDonorsSince = g.cfg.Clock()
		}
		v.suffixDonors = append(v.suffixDonors, d)
		g.spawn(func() {
			data, err := g.readSuffix(sf.From, rec.Start)
			if err != nil {
				// The joiner's transfer fails ("does not hold it"): it
				// joins again with the whole state.
				g.log.Error("serving a suffix", "epoch", rec.Epoch, "joiner", sf.ID, "err", err)
				_ = d.DropPart(0)
				return
			}
			if err := d.AddPart(0, data); err != nil {
				g.log.Debug("serving a suffix", "epoch", rec.Epoch, "joiner", sf.ID, "err", err)
			}
		})
	}
}

// readSuffix reads the log's entries from..to, once they are synced.
func (g *Group) readSuffix(from, to uint64) ([]byte, error) {
	if err := g.disk.WaitSynced(g.ctx, to); err != nil {
		return nil, err
	}
	var es []persistence.Entry
	if from <= to {
		if err := g.disk.Scan(g.ctx, from, to, func(e persistence.Entry) error {
			e.Payload = slices.Clone(e.Payload)
			es = append(es, e)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return encodeSuffix(es), nil
}

// fetchSuffix transfers the messages this joiner misses, from sf.Donor.
func (r *runner) fetchSuffix(v *view, sf membership.Suffix) {
	g := r.g
	i := slices.IndexFunc(v.rec.Suffixes, func(s membership.Suffix) bool { return s.ID == sf.ID })
	cfg := membership.FetchConfig{
		Endpoint: g.ep, Stream: suffixStream(v.rec.Epoch, i), Donors: []rdma.NodeID{rdma.NodeID(sf.Donor)},
		StallTimeout: g.cfg.TransferStall, Logger: g.cfg.Logger,
		ChunkBytes: g.cfg.test.transferChunkBytes, OnReceived: g.m.transferred(roleJoiner, kindSuffix),
	}
	ctx, span := g.tr.Start(v.transfers, "convoy.state.transfer", trace.WithAttributes(
		attribute.Int64("convoy.epoch", int64(v.rec.Epoch)), attribute.Int("convoy.donors", 1),
		attribute.Int64("convoy.suffix_from", int64(sf.From))))
	start := g.cfg.Clock()
	g.startFetch(v, ctx, cfg, func(parts [][]byte, err error) {
		g.m.transferTook(roleJoiner, kindSuffix, time.Duration(g.cfg.Clock()-start))
		if err == nil {
			span.SetAttributes(attribute.Int("convoy.bytes", len(parts[0])))
		} else {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		g.post(event{kind: evSuffix, v: v, parts: parts, err: err})
	})
}

// suffixed applies the messages transferred to this joiner: it logs them,
// hands them to the application once synced, and goes on as a member.
func (r *runner) suffixed(parts [][]byte, err error) bool {
	g, rec := r.g, &r.v.rec
	sf, _ := rec.SuffixOf(r.vs.Self().ID)
	var es []persistence.Entry
	if err == nil {
		es, err = decodeSuffix(parts[0], sf.From, rec.Start)
	}
	if err == nil && len(es) > 0 {
		if err = g.disk.Append(es...); err == nil {
			ctx, cancel := context.WithTimeout(g.ctx, asyncTimeout)
			err = g.disk.WaitSynced(ctx, rec.Start)
			cancel()
		}
	}
	if err == nil && r.applied < sf.From-1 {
		// The rest of its own log, held back at Open, comes first.
		var last uint64
		if last, err = g.replayEntries(g.ctx, r.applied+1, sf.From-1); err == nil {
			r.applied = last
		}
	}
	if err != nil {
		// Its log cannot continue: it starts over with a snapshot.
		g.log.Warn("suffix transfer failed: joining again with the whole state", "epoch", rec.Epoch, "err", err)
		if werr := g.disk.InstallSnapshot(g.ctx, 0, nil); werr != nil {
			g.log.Error("durable log: reset", "err", werr)
		}
		r.applied = 0
		r.excluded(nil, fmt.Sprintf("suffix transfer for view %d failed: %v", rec.Epoch, err))
		return true
	}
	for _, e := range es {
		if g.h != nil {
			g.h(Delivery{Epoch: e.Epoch, Index: e.Index, Sender: NodeID(e.Sender), Seq: e.Seq, Payload: e.Payload})
		}
		g.m.delivered(len(e.Payload))
		r.applied = e.Index
	}
	g.log.Info("caught up from a suffix", "epoch", rec.Epoch, "from", sf.From, "messages", len(es))
	r.joined()
	return true
}
