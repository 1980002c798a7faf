package convoy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

// NodeID identifies a member.
type NodeID = rdma.NodeID

// Mode is a delivery guarantee; see package ordering.
type Mode = ordering.Mode

// Delivery modes.
const (
	// Atomic delivers in the same total order on every member, each
	// message only once every member holds it.
	Atomic = ordering.Atomic
	// TotalOrder delivers in the same total order within a failure-free
	// group (best effort: at a failure, members may deliver different
	// subsets, and nothing is re-sent).
	TotalOrder = ordering.TotalOrder
	// Unordered delivers each sender's messages in its order only.
	Unordered = ordering.Unordered
)

// Member is one member of the group.
type Member struct {
	ID NodeID
	// Addr is the member's transport address (host:port) for the tcp
	// transport; unused with Config.Endpoint.
	Addr string
}

// Defaults for Config fields left zero.
const (
	// DefaultWindowMessages bounds a member's own messages sent but not yet
	// delivered locally.
	DefaultWindowMessages = 64 << 10
	// DefaultWindowBytes bounds their bytes.
	DefaultWindowBytes = 64 << 20
	// DefaultBeaconGap: reactions a little apart, so that a burst of
	// records is answered once.
	DefaultBeaconGap = 20 * time.Microsecond
	// DefaultMaxMessageBytes bounds one message.
	DefaultMaxMessageBytes = 64 << 20
)

// Config configures one member of a group. Every member must use the same
// Members (same order), Mode, BeaconInterval and FanOut.
type Config struct {
	// Self is this member's id; it must be in Members.
	Self NodeID
	// Members lists the group in rank order.
	Members []Member
	// Mode is the delivery guarantee (default Atomic).
	Mode Mode
	// Epoch labels this group's deliveries (default 1).
	Epoch uint64
	// Endpoint is the transport endpoint to use. If nil, Open listens on
	// ListenAddr (default: this member's Addr) with the tcp transport and
	// closes the endpoint on Close.
	Endpoint   rdma.Endpoint
	ListenAddr string
	// TLS, if set, authenticates members to each other (mutual TLS) on
	// the tcp transport.
	TLS *tls.Config
	// BeaconInterval is the longest a member stays silent (see package
	// ordering); FanOut enables frontier aggregation for large groups.
	BeaconInterval time.Duration
	FanOut         int
	// BeaconGap is the shortest time between a member's records when it
	// beacons in reaction to traffic (default DefaultBeaconGap). The group
	// reacts after each batch of incoming records, so a short gap costs
	// little under load and saves waiting for a timer when idle.
	BeaconGap time.Duration
	// WindowMessages and WindowBytes bound this member's own messages sent
	// but not yet delivered locally; Send waits for space (or returns
	// ErrBackpressure with NoWait).
	WindowMessages int
	WindowBytes    int
	NoWait         bool
	// MaxMessageBytes bounds one message.
	MaxMessageBytes int
	// Algorithm and BlockBytes tune large messages (package multicast).
	Algorithm  multicast.Algorithm
	BlockBytes int
	// Clock returns this member's monotonic time in nanoseconds (default:
	// time since Open). Tests inject skewed clocks here.
	Clock func() int64
	// Logger and MeterProvider receive logs and metrics; nil discards them.
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider

	// onHeld, for tests, is called when a data record from member rank
	// with sequence seq arrives complete, before the core sees it.
	onHeld func(rank int, seq uint64)
}

// Errors returned by Open, Send and Close.
var (
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("convoy: group closed")
	// ErrFailed wraps the error a group failed with (a member crashed or
	// sent bad input); Send returns it afterwards.
	ErrFailed = errors.New("convoy: group failed")
	// ErrBackpressure is returned by Send with NoWait when the window is
	// full.
	ErrBackpressure = errors.New("convoy: send window full")
	// ErrTooLarge is returned by Send above MaxMessageBytes.
	ErrTooLarge = errors.New("convoy: message too large")
)

func (c Config) withDefaults() (Config, int, error) {
	self := -1
	seen := make(map[NodeID]bool)
	for i, m := range c.Members {
		if seen[m.ID] {
			return c, 0, fmt.Errorf("convoy: member %d listed twice", m.ID)
		}
		seen[m.ID] = true
		if m.ID == c.Self {
			self = i
		}
	}
	if self < 0 {
		return c, 0, fmt.Errorf("convoy: self %d is not in Members", c.Self)
	}
	if len(c.Members) > 1<<14 {
		return c, 0, fmt.Errorf("convoy: %d members, at most %d", len(c.Members), 1<<14)
	}
	if c.Epoch == 0 {
		c.Epoch = 1
	}
	if c.Epoch >= 1<<40 {
		return c, 0, fmt.Errorf("convoy: epoch %d out of range", c.Epoch)
	}
	if c.BeaconGap == 0 {
		c.BeaconGap = DefaultBeaconGap
	}
	if c.WindowMessages == 0 {
		c.WindowMessages = DefaultWindowMessages
	}
	if c.WindowBytes == 0 {
		c.WindowBytes = DefaultWindowBytes
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.WindowMessages < 1 || c.WindowBytes < 1 || c.MaxMessageBytes < 1 {
		return c, 0, errors.New("convoy: window and message limits must be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	if c.Clock == nil {
		// Wall-clock nanoseconds (comparable across members whose clocks
		// are synchronized), advanced by the monotonic clock so that they
		// never go backwards within this process.
		start := time.Now()
		base := start.UnixNano()
		c.Clock = func() int64 { return base + int64(time.Since(start)) }
	}
	return c, self, nil
}
