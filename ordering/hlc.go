package ordering

import "github.com/convoy-gcs/convoy/barrier"

// Timestamp is a hybrid logical clock value in nanoseconds.
type Timestamp = barrier.Timestamp

// hlc is a hybrid logical clock: a stamp is the maximum of the physical
// clock and every stamp or promise seen, plus one, so stamps increase
// strictly and never run behind a peer's.
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

// observe advances the clock past a stamp or promise seen from a peer.
func (c *hlc) observe(ts Timestamp) {
	c.last = max(c.last, ts)
}
