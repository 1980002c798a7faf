package ordering

import (
	"errors"
	"fmt"
)

// ErrCut is returned by Finish for a cut this member cannot deliver.
var ErrCut = errors.New("ordering: bad cut")

// Wedge ends this member's part in the view: from now on the core sends,
// announces and delivers nothing, and drops the records it is given, so
// that what Held reports is final.
func (c *Core) Wedge() {
	c.wedged = true
	c.ready.Records = c.ready.Records[:0]
	c.ready.Control = c.ready.Control[:0]
}

// Wedged reports whether Wedge was called.
func (c *Core) Wedged() bool { return c.wedged }

// Held returns, for every member by rank, the highest sequence number s
// such that this member holds that member's messages 1..s complete (its
// own: every message it sent).
func (c *Core) Held() []uint64 {
	out := make([]uint64, c.cfg.Members)
	for r := range out {
		out[r] = c.prom.Held(r)
	}
	out[c.cfg.Self] = c.seq
	return out
}

// Index returns the global index of the last message delivered.
func (c *Core) Index() uint64 { return c.cfg.Start + c.delivered }

// Finish ends a wedged view at cut: cut[r] is how many of member r's
// messages the view delivers. Finish returns the deliveries up to the cut
// that this member has not made yet, in the agreed order, and this
// member's own messages beyond the cut, in its send order, which it must
// send again in the next view. Every other message is discarded.
//
// Every member that delivered messages of the view delivers the rest of
// the cut in the same (stamp, rank, sequence) order, so all of them end
// the view with the same sequence: a message below a member's commit
// barrier is held by every member, so it is inside the cut, and the cut
// is the same for everyone.
func (c *Core) Finish(cut []uint64) ([]Delivery, [][]byte, error) {
	if !c.wedged {
		return nil, nil, fmt.Errorf("%w: the core is not wedged", ErrCut)
	}
	if c.cfg.Mode != Atomic {
		// Other modes deliver before every member holds a message, so no
		// cut can make their members agree.
		return nil, nil, fmt.Errorf("%w: views end only in atomic mode, not %v", ErrCut, c.cfg.Mode)
	}
	if len(cut) != c.cfg.Members {
		return nil, nil, fmt.Errorf("%w: %d senders, view has %d", ErrCut, len(cut), c.cfg.Members)
	}
	held := c.Held()
	for r, s := range cut {
		if s > held[r] {
			return nil, nil, fmt.Errorf("%w: member %d's messages up to %d, only %d held", ErrCut, r, s, held[r])
		}
		if s+1 < c.payloads[r].next {
			return nil, nil, fmt.Errorf("%w: member %d's messages up to %d, %d delivered", ErrCut, r, s, c.payloads[r].next-1)
		}
	}
	saved := c.ready.Deliveries
	c.ready.Deliveries = nil
	var beyond []key
	for {
		k, ok := c.buf.DeleteMin()
		if !ok {
			break
		}
		r := int(k.rank)
		if k.seq > cut[r] {
			beyond = append(beyond, k)
			if r != c.cfg.Self {
				c.stats.Discarded++
			}
			continue
		}
		c.emit(entry{ts: k.ts, rank: r, seq: k.seq, payload: c.payloads[r].take(k.seq)})
	}
	// Keep own messages beyond the cut for ownPayload; the core is done.
	for _, k := range beyond {
		c.buf.ReplaceOrInsert(k)
	}
	out := c.ready.Deliveries
	c.ready.Deliveries = saved
	var resend [][]byte
	for s := cut[c.cfg.Self] + 1; s <= c.seq; s++ {
		resend = append(resend, c.ownPayload(s))
	}
	return out, resend, nil
}

// ownPayload returns this member's undelivered message seq.
func (c *Core) ownPayload(seq uint64) []byte {
	q := &c.payloads[c.cfg.Self]
	return q.items[q.head+int(seq-q.next)]
}
