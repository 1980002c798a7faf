package convoy

import (
	"context"
	"time"

	"github.com/convoy-gcs/convoy/ordering"
)

// loop owns the ordering core: it feeds it sends, records and time, and
// carries out what it returns. It is the only goroutine that touches core.
func (g *Group) loop(core *ordering.Core) {
	defer g.loopWG.Done()
	r := &runner{g: g, core: core}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case ev := <-g.events:
			if !r.handle(ev) {
				return
			}
			// Take whatever else is waiting before carrying out Ready, so
			// that busy periods batch.
			for more := true; more; {
				select {
				case ev := <-g.events:
					if !r.handle(ev) {
						return
					}
				default:
					more = false
				}
			}
		case <-timer.C:
			core.Tick(g.cfg.Clock())
		case <-g.stop:
			return
		}
		// React once per batch: beacons and tree records due now go out
		// without waiting for a timer.
		core.Tick(g.cfg.Clock())
		r.ready()
		wait := time.Duration(core.Deadline() - g.cfg.Clock())
		timer.Reset(max(wait, 0))
	}
}

// runner carries the loop's state.
type runner struct {
	g    *Group
	core *ordering.Core
	// sendTimes[i] is when own message sentBase+i was sent, for latency.
	sendTimes []int64
	sentBase  uint64
}

// handle applies one event; it returns false when the loop must stop.
func (r *runner) handle(ev event) bool {
	g := r.g
	now := g.cfg.Clock()
	switch ev.kind {
	case evSend:
		seq, _ := r.core.Send(now, ev.payload)
		if r.sentBase == 0 {
			r.sentBase = seq
		}
		r.sendTimes = append(r.sendTimes, now)
	case evRecord:
		if err := r.core.Step(now, ev.from, ev.rec); err != nil {
			g.m.rejected.Add(context.Background(), 1)
			g.log.Warn("rejected record", "from", g.cfg.Members[ev.from].ID, "err", err)
		}
	case evFail:
		g.fail(ev.err)
		return false
	}
	return true
}

// ready carries out the core's Ready.
func (r *runner) ready() {
	g := r.g
	rd := r.core.Ready()
	ctx := g.ctx
	for i := range rd.Records {
		frame := ordering.AppendRecord(g.frame(ordering.RecordHeaderBytes+len(rd.Records[i].Payload)), &rd.Records[i])
		if err := g.data[g.self].Send(ctx, frame); err != nil {
			g.fail(err)
			return
		}
		if rd.Records[i].Kind == ordering.KindBeacon {
			g.m.control.Add(ctx, int64(len(g.cfg.Members)-1), g.m.beaconAttr)
		}
	}
	var lastDown ordering.Timestamp
	for _, e := range rd.Control {
		mg := g.up
		if e.Record.Kind == ordering.KindDown {
			// One record reaches every child through the down group.
			if e.Record.TS == lastDown {
				continue
			}
			lastDown, mg = e.Record.TS, g.down
		}
		frame := ordering.AppendRecord(nil, &e.Record)
		if err := mg.Send(ctx, frame); err != nil {
			g.fail(err)
			return
		}
		if e.Record.Kind == ordering.KindUp {
			g.m.control.Add(ctx, 1, g.m.upAttr)
		} else {
			g.m.control.Add(ctx, int64(g.down.Size()-1), g.m.downAttr)
		}
	}
	now := g.cfg.Clock()
	for _, d := range rd.Deliveries {
		g.m.delivered(len(d.Payload))
		if g.h != nil {
			g.h(Delivery{
				Epoch: d.Epoch, Index: d.Index, Sender: g.cfg.Members[d.Sender].ID,
				Seq: d.Seq, Timestamp: uint64(d.TS), Payload: d.Payload,
			})
		}
		// Own messages count as delivered once the handler has seen them.
		if d.Sender == g.self {
			if i := d.Seq - r.sentBase; i < uint64(len(r.sendTimes)) {
				g.m.latency.Record(ctx, time.Duration(now-r.sendTimes[i]).Seconds())
			}
			r.trimSendTimes(d.Seq)
			g.ownDelivered(d.Seq, len(d.Payload))
		}
	}
	g.m.barrierLag.Record(ctx, now-int64(min(r.core.Barrier(), ordering.Timestamp(now))))
	if rd.Stable > 0 {
		g.ownStable(rd.Stable)
	}
}

// trimSendTimes forgets send times of own messages up to seq.
func (r *runner) trimSendTimes(seq uint64) {
	drop := int(seq + 1 - r.sentBase)
	if drop <= 0 || drop > len(r.sendTimes) {
		return
	}
	r.sendTimes = r.sendTimes[drop:]
	r.sentBase = seq + 1
}
