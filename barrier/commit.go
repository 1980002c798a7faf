package barrier

import "fmt"

// Commit computes the commit barrier from receive frontiers that every
// member announces to every other (the direct scheme, for small groups).
type Commit struct {
	announced []Timestamp
}

// NewCommit tracks the frontiers of n members, all initially zero.
func NewCommit(n int) *Commit {
	return &Commit{announced: make([]Timestamp, n)}
}

// Announce records member rank's receive frontier f. Frontiers never go
// backwards.
func (c *Commit) Announce(rank int, f Timestamp) error {
	if rank < 0 || rank >= len(c.announced) {
		return fmt.Errorf("%w: rank %d", ErrUnknownMember, rank)
	}
	if f < c.announced[rank] {
		return fmt.Errorf("%w: member %d frontier %d after %d", ErrBackwards, rank, f, c.announced[rank])
	}
	c.announced[rank] = f
	return nil
}

// Announced returns member rank's last announced frontier.
func (c *Commit) Announced(rank int) Timestamp { return c.announced[rank] }

// Barrier returns the commit barrier: the minimum announced frontier. Every
// member holds every message stamped below it.
func (c *Commit) Barrier() Timestamp {
	b := Infinity
	for _, f := range c.announced {
		b = min(b, f)
	}
	return b
}
