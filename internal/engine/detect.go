package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/rdma"
)

// Streams outside the multicast groups' range (which stays below 2^58):
// one per view for the failure detector's signals and one for state
// transfer.
func controlStream(epoch uint64) rdma.StreamID  { return rdma.StreamID(1<<62 | epoch<<8) }
func transferStream(epoch uint64) rdma.StreamID { return rdma.StreamID(1<<62 | epoch<<8 | 1) }

// openDetector starts the view's failure detector.
func (v *view) openDetector(now int64) error {
	g := v.g
	n := len(v.ids)
	if n > membership.MaxRanks {
		return fmt.Errorf("convoy: %d members, the detector handles %d", n, membership.MaxRanks)
	}
	det, err := membership.NewDetector(membership.DetectorConfig{
		Self: v.self, Members: n,
		HeartbeatInterval: g.cfg.HeartbeatInterval, Timeout: g.cfg.SuspectTimeout, StallTimeout: g.cfg.StallTimeout,
	}, now)
	if err != nil {
		return err
	}
	v.det = det
	v.nbrs = membership.Neighbours(n, v.self)
	v.nbrLag = make([]int64, len(v.nbrs))
	return nil
}

// openControl opens a control stream to every other member of the
// view, for the detector's messages (probes may go to members that are not
// neighbours) and the persisted indexes of durable delivery.
func (v *view) openControl(ctx context.Context) {
	n := len(v.ids)
	v.ctrlRetry = make([]int64, n)
	for r := range n {
		if r != v.self {
			v.net.dial(ctx, r)
		}
	}
}

// reopenControl opens the control streams whose connection broke again,
// once their time has come (see linkDown). A view lives on after its
// connections break: wedged, its members report whom they hear, and a
// partition that heals must show in those reports, or a view change that
// waits for a majority of reporters who hear each other would wait for
// good (membership.Suspected).
func (v *view) reopenControl(ctx context.Context, now int64) {
	for r, at := range v.ctrlRetry {
		if at == 0 || now < at {
			continue
		}
		v.ctrlRetry[r] = 0
		if !v.net.dial(ctx, r) {
			v.ctrlRetry[r] = now + int64(v.g.cfg.SuspectTimeout)
			continue
		}
		if v.dur != nil {
			// The persisted index announced before the break may be lost
			// with it, and this member announces again only when its log
			// syncs more, which a quiet group may never do.
			_ = v.net.signal(r, persistedImm(v.dur.Persisted(v.self)))
			v.resendTopics(r)
		}
	}
}

// linkDown records that the control stream to rank r broke at now: the
// detector, if the view has one (a group with fixed membership has none,
// its control streams carry only durable delivery's signals), hears of
// it, and the stream is opened again a suspect timeout later.
func (v *view) linkDown(now int64, r int) {
	if v.det != nil {
		v.det.Disconnected(r)
	}
	if v.ctrlRetry[r] == 0 {
		v.ctrlRetry[r] = now + int64(v.g.cfg.SuspectTimeout)
	}
}

// ctrlDeadline returns when reopenControl next has something to do (0:
// nothing).
func (v *view) ctrlDeadline() int64 {
	d := int64(0)
	for _, at := range v.ctrlRetry {
		if at != 0 && (d == 0 || at < d) {
			d = at
		}
	}
	return d
}

// ctrlHandler receives one peer's detector signals.
type ctrlHandler struct {
	v    *view
	rank int
}

func (h *ctrlHandler) RecvComplete(uint64, int, uint64) {}
func (h *ctrlHandler) SendComplete(uint64)              {}
func (h *ctrlHandler) Signal(imm uint64) {
	kind := evSignal
	if durableSignal(imm) {
		kind = evPersisted
	}
	h.v.g.post(event{kind: kind, v: h.v, from: h.rank, imm: imm})
}

// Failed reports a broken connection to the detector: when a process
// dies its host resets the connections, and the detector can then confirm
// the failure through other paths at once instead of after a timeout. A
// peer that closed the stream (it moved on to another view) is not news.
func (h *ctrlHandler) Failed(err error) {
	h.v.g.log.Debug("detector stream failed", "peer", h.v.ids[h.rank], "epoch", h.v.rec.Epoch, "err", err)
	if errors.Is(err, rdma.ErrConnectionLost) || errors.Is(err, rdma.ErrUnreachable) {
		h.v.g.post(event{kind: evLinkDown, v: h.v, from: h.rank})
	}
}

// signal applies a detector signal from rank from.
func (r *runner) signal(now int64, from int, imm uint64) {
	v := r.v
	if v.det == nil {
		// A group with fixed membership runs no detector: a detector
		// signal from a peer is not for it.
		r.g.m.rejected.Add(r.g.ctx, 1)
		r.g.log.Warn("rejected detector signal: this group runs no failure detector", "from", v.ids[from], "epoch", v.rec.Epoch)
		return
	}
	local := membership.FrontierUnits(uint64(v.core.Frontier()))
	m, err := membership.DecodeSignal(imm, from, v.self, len(v.ids), local)
	if err == nil {
		err = v.det.Step(now, m)
	}
	if err == nil && m.Kind == membership.MsgHeartbeat {
		v.heardFrontier(from, local, m.Frontier)
	}
	if err != nil {
		r.g.m.rejected.Add(r.g.ctx, 1)
		r.g.log.Warn("rejected detector signal", "from", v.ids[from], "epoch", v.rec.Epoch, "err", err)
	}
}

// heardFrontier records the receive frontier a heartbeat from rank from
// carried (in membership.FrontierUnits, as local is this member's), and
// records how far the neighbour furthest behind trails. Heartbeats from
// members that are not neighbours (a wedged view's) are not counted.
func (v *view) heardFrontier(from int, local, theirs uint64) {
	i := slices.Index(v.nbrs, from)
	if i < 0 {
		return
	}
	v.nbrLag[i] = 0
	if local > theirs {
		v.nbrLag[i] = int64(local-theirs) << 10 // FrontierUnits are 1024 ns
	}
	v.g.m.neighbourLag.Record(v.g.ctx, time.Duration(slices.Max(v.nbrLag)).Seconds())
}

// detectorReady carries out the detector's output: signals to peers, and
// confirmed suspicions recorded in etcd, where they start a view change.
func (r *runner) detectorReady() {
	g, v := r.g, r.v
	rd := v.det.Ready()
	for _, m := range rd.Messages {
		if err := v.net.signal(m.To, membership.EncodeSignal(m)); err != nil && !errors.Is(err, errNoControl) {
			g.log.Debug("detector signal not sent", "to", v.ids[m.To], "err", err)
		}
	}
	for _, rank := range rd.Raised {
		g.log.Debug("suspecting a neighbour: asking other paths", "peer", v.ids[rank], "epoch", v.rec.Epoch)
		g.m.suspicions.Add(g.ctx, 1, g.m.raised.add...)
	}
	for _, rank := range rd.Refuted {
		g.log.Debug("suspicion refuted by another path", "peer", v.ids[rank], "epoch", v.rec.Epoch)
		g.m.suspicions.Add(g.ctx, 1, g.m.refuted.add...)
	}
	for _, vd := range rd.Confirmed {
		g.log.Warn("member failed", "peer", v.ids[vd.Rank], "epoch", v.rec.Epoch, "reason", vd.Reason)
		g.m.suspicions.Add(g.ctx, 1, g.m.confirmed.add...)
		r.suspect(v.ids[vd.Rank], vd.Reason)
	}
}
