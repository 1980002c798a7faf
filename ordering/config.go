package ordering

import (
	"errors"
	"fmt"
	"time"

	"github.com/convoy-gcs/convoy/internal/plant"
)

// Mode is a delivery guarantee.
type Mode int

const (
	// Atomic delivers in total order below the commit barrier: a message
	// is delivered only once every member holds it.
	Atomic Mode = iota
	// TotalOrder delivers in total order below the member's own receive
	// frontier (best effort: at a failure, members may deliver different
	// subsets).
	TotalOrder
	// Unordered delivers each sender's messages in its order, at once.
	Unordered
)

func (m Mode) String() string {
	switch m {
	case Atomic:
		return "atomic"
	case TotalOrder:
		return "total"
	case Unordered:
		return "unordered"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode is the inverse of String.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Atomic, TotalOrder, Unordered} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("ordering: unknown mode %q (want atomic, total or unordered)", s)
}

// Defaults for Config fields left zero.
const (
	// DefaultBeaconInterval: an idle member beacons this often. Traffic
	// and Want make members beacon at once (within BeaconGap), so it sets
	// what an idle group costs (a record to every other member per
	// interval), and, twice over, how far ahead of the clock a beacon
	// promises (the lead, see the package documentation).
	DefaultBeaconInterval = 20 * time.Millisecond
	// DefaultBeaconGap: reactions a little apart, so that a burst of
	// records is answered once.
	DefaultBeaconGap = 20 * time.Microsecond
	// DefaultMaxAhead bounds how far a peer's stamps may run ahead of this
	// member's physical clock for its records to apply at once; records
	// stamped further ahead wait for the clock to catch up.
	DefaultMaxAhead = time.Second
	// DefaultWindow bounds how far ahead of its held prefix a sender's
	// sequence numbers may run at a receiver.
	DefaultWindow = 1 << 20
	// DefaultMaxPayload bounds a message.
	DefaultMaxPayload = 1 << 30
)

// Config configures a Core.
type Config struct {
	// Self is this member's rank; Members the number of members.
	Self, Members int
	// Mode is the delivery guarantee.
	Mode Mode
	// Epoch labels deliveries (the view; default 1).
	Epoch uint64
	// Start is the global index of the last message delivered before this
	// view: the view's first delivery gets index Start+1.
	Start uint64
	// BeaconInterval: the longest a member stays silent.
	BeaconInterval time.Duration
	// BeaconGap: the shortest time between records a member multicasts
	// when it beacons in reaction to traffic (default DefaultBeaconGap,
	// or BeaconInterval/8 if that is shorter).
	BeaconGap time.Duration
	// MaxAhead: how far ahead of local time a peer's stamp may be for its
	// record to apply at once. A record stamped further ahead waits until
	// local time catches up (clock skew costs latency), and a window of
	// them (Window records of one sender) is rejected as ErrClockAhead.
	MaxAhead time.Duration
	// FanOut enables frontier aggregation through a tree of that fan-out
	// (at least 2); zero announces frontiers to every member directly.
	FanOut int
	// Window bounds out-of-order sequence numbers per sender.
	Window uint64
	// MaxPayload bounds one message.
	MaxPayload int
	// Topics are the view's topics (see Topic): topic t is Topics[t-1].
	// A group with topics needs an ordered Mode; its records differ from
	// a group's without (KindPublish, KindTopicBeacon), so every member
	// of a view must agree on whether it has topics, as on the list.
	Topics []Topic
	// Plant plants protocol faults, for the project's own tests only
	// (package plant); it is zero in every real use. Of the faults, the
	// core acts on plant.EarlyBeacon.
	Plant plant.Faults
}

func (c Config) withDefaults() (Config, error) {
	if c.Members < 1 || c.Self < 0 || c.Self >= c.Members {
		return c, fmt.Errorf("ordering: rank %d in a group of %d", c.Self, c.Members)
	}
	if c.Mode < Atomic || c.Mode > Unordered {
		return c, fmt.Errorf("ordering: unknown mode %d", c.Mode)
	}
	if c.FanOut == 1 || c.FanOut < 0 {
		return c, fmt.Errorf("ordering: fan-out %d, want 0 or at least 2", c.FanOut)
	}
	if err := checkTopics(c.Topics, c.Members, c.Mode); err != nil {
		return c, err
	}
	if c.BeaconInterval < 0 || c.BeaconGap < 0 || c.MaxAhead < 0 {
		return c, errors.New("ordering: negative duration")
	}
	if c.Epoch == 0 {
		c.Epoch = 1
	}
	if c.BeaconInterval == 0 {
		c.BeaconInterval = DefaultBeaconInterval
	}
	if c.BeaconGap == 0 {
		c.BeaconGap = min(DefaultBeaconGap, c.BeaconInterval/8)
	}
	if c.MaxAhead == 0 {
		c.MaxAhead = DefaultMaxAhead
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	return c, nil
}
