package ordering

import "github.com/convoy-gcs/convoy/barrier"

// Timestamp is a hybrid logical clock value in nanoseconds.
type Timestamp = barrier.Timestamp

// hlc is a hybrid logical clock: a stamp is the maximum of the physical
// clock, every peer's stamp seen and this member's own promises, plus
// one, so stamps increase strictly and never run behind a peer's message
// seen. A peer's promise (a beacon) is not followed: the lead of the
// others' promises is what lets a message pass the frontier as it
// arrives (Core.promise).
type hlc struct {
	last Timestamp // highest stamp issued or seen
}

// peek returns the lowest stamp the clock can issue from physical time now
// on: a valid promise for this member's future messages.
func (c *hlc) peek(now int64) Timestamp {
	return max(Timestamp(max(now, 0)), c.last) + 1
}

// stamp issues a stamp at physical time now.
func (c *hlc) stamp(now int64) Timestamp {
	c.last = c.peek(now)
	return c.last
}

// lead returns a promise for this member's future messages made at
// physical time now, lead ahead of it (or the lowest stamp the clock can
// issue, if higher), and holds the clock's stamps to it.
func (c *hlc) lead(now int64, lead Timestamp) Timestamp {
	p := max(c.peek(now), Timestamp(max(now, 0))+lead)
	c.last = p - 1
	return p
}

// observe advances the clock past a stamp seen from a peer.
func (c *hlc) observe(ts Timestamp) {
	c.last = max(c.last, ts)
}
