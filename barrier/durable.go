package barrier

import "fmt"

// Durable computes the durable barrier: every member announces the
// highest delivery index it has written to its log and synced, and a
// message is durable once every member of the view has it, that is, when
// its index is at or below the minimum announced. The group's durable
// delivery drives it with the indexes its log syncs; the ordering core's
// atomic delivery produces the indexes.
type Durable struct {
	persisted []uint64
}

// NewDurable tracks the persisted indexes of n members, all initially 0.
func NewDurable(n int) *Durable {
	return &Durable{persisted: make([]uint64, n)}
}

// Announce records that member rank has persisted every index up to idx.
// Persisted indexes never go backwards.
func (d *Durable) Announce(rank int, idx uint64) error {
	if rank < 0 || rank >= len(d.persisted) {
		return fmt.Errorf("%w: rank %d", ErrUnknownMember, rank)
	}
	if idx < d.persisted[rank] {
		return fmt.Errorf("%w: member %d persisted index %d after %d", ErrBackwards, rank, idx, d.persisted[rank])
	}
	d.persisted[rank] = idx
	return nil
}

// Persisted returns what member rank announced last (0 for a rank out of
// range).
func (d *Durable) Persisted(rank int) uint64 {
	if rank < 0 || rank >= len(d.persisted) {
		return 0
	}
	return d.persisted[rank]
}

// Barrier returns the highest index every member has persisted.
func (d *Durable) Barrier() uint64 {
	if len(d.persisted) == 0 {
		return 0
	}
	b := d.persisted[0]
	for _, p := range d.persisted[1:] {
		b = min(b, p)
	}
	return b
}

// Lagging returns the members whose persisted index trails the highest
// announced by more than bound: the ones a view change should exclude
// rather than let stall the group (durable delivery waits until every
// member's log holds a message, so one slow disk would hold back all).
func (d *Durable) Lagging(bound uint64) []int {
	var top uint64
	for _, p := range d.persisted {
		top = max(top, p)
	}
	var out []int
	for r, p := range d.persisted {
		if top-p > bound {
			out = append(out, r)
		}
	}
	return out
}
