package convoy

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/convoy-gcs/convoy/persistence"
)

// DurableConfig makes delivery durable: every member writes the messages
// it delivers, in the agreed order, to a log on disk, and a message is
// handed to the application (and Send with WaitDelivered returns) only
// once every member of the view has it on disk (DESIGN rule 3).
type DurableConfig struct {
	// Dir is the log's directory.
	Dir string
	// FS, if set, replaces the operating system's file system (tests).
	FS vfs.FS
}

// persistedSignal is the kind, in a control signal's top three bits, of a
// member's persisted index (the detector's kinds are 1 to 3): the other
// 61 bits are the highest delivery index it has on disk.
const persistedSignal = 4

// openLog opens the durable log, if configured; the loop hears of each
// synced batch through g.synced.
func (g *Group) openLog(ctx context.Context) error {
	d := g.cfg.Durable
	if d == nil {
		return nil
	}
	l, err := persistence.Open(ctx, persistence.Options{Dir: d.Dir, FS: d.FS, Logger: g.cfg.Logger, MeterProvider: g.cfg.MeterProvider})
	if err != nil {
		return fmt.Errorf("convoy: open the durable log: %w", err)
	}
	g.disk, g.synced = l, make(chan struct{}, 1)
	l.OnSynced(func(uint64) {
		select {
		case g.synced <- struct{}{}:
		default:
		}
	})
	return nil
}

// logDelivery writes a delivery to the durable log and holds it until it
// is durable everywhere.
func (r *runner) logDelivery(d Delivery) {
	g := r.g
	err := g.disk.Append(persistence.Entry{Index: d.Index, Epoch: d.Epoch, Sender: uint64(d.Sender), Seq: d.Seq, Payload: d.Payload})
	if err != nil {
		// A member that cannot persist stops acknowledging: its persisted
		// index stays put, durable delivery stops, and the others exclude
		// it as lagging.
		g.log.Error("durable log", "index", d.Index, "err", err)
	}
	r.durq = append(r.durq, durItem{d: d})
}

// durItem is a delivery waiting to be durable everywhere, or a view
// waiting behind such deliveries (views reach the application in order
// with the messages).
type durItem struct {
	d Delivery
	v *View
}

// announcePersisted tells every member of the view how far this member's
// log is synced.
func (r *runner) announcePersisted() {
	g, v := r.g, r.v
	idx := g.disk.Synced()
	if v.dur != nil {
		_ = v.dur.Announce(v.self, max(idx, v.dur.Persisted(v.self)))
	}
	imm := uint64(persistedSignal)<<61 | idx&(1<<61-1)
	for _, qp := range v.ctrl {
		if qp != nil {
			_ = qp.Signal(imm)
		}
	}
	r.flushDurable()
}

// persisted applies a member's persisted index.
func (r *runner) persisted(from int, imm uint64) {
	idx := imm & (1<<61 - 1)
	if err := r.v.dur.Announce(from, max(idx, r.v.dur.Persisted(from))); err != nil {
		r.g.log.Warn("persisted index", "from", r.v.ids[from], "err", err)
		return
	}
	r.flushDurable()
}

// flushDurable hands out the deliveries every member has on disk.
func (r *runner) flushDurable() {
	if r.v == nil || r.v.dur == nil {
		return
	}
	b := r.v.dur.Barrier()
	n := 0
	for ; n < len(r.durq); n++ {
		it := r.durq[n]
		if it.v != nil {
			r.onViewNow(*it.v)
			continue
		}
		if it.d.Index > b {
			break
		}
		r.handNow(it.d, it.d.Sender == r.g.cfg.Self)
	}
	if n > 0 {
		clear(r.durq[:n])
		r.durq = r.durq[n:]
	}
}
