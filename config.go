package convoy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/convoy-gcs/convoy/internal/plant"
	"github.com/convoy-gcs/convoy/membership"
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

// Defaults for Config fields left zero (see withDefaults).
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

	// The failure detector and state transfer of a view-managed group.
	DefaultHeartbeatInterval = 50 * time.Millisecond
	DefaultSuspectTimeout    = 250 * time.Millisecond
	DefaultStallTimeout      = 2 * time.Second
	DefaultMaxDonors         = 4
	DefaultTransferStall     = 10 * time.Second
)

// StateMachine is implemented by applications whose state a joining
// member needs: see Config.State.
type StateMachine = membership.StateMachine

// EtcdConfig says where a view-managed group keeps its views.
type EtcdConfig struct {
	// Endpoints of an etcd cluster (production: a fixed etcd quorum, not
	// embedded in members that come and go). Empty: Open starts an
	// embedded single-node etcd in this process, the development default,
	// on a free loopback port that no other process learns of: it serves
	// this member alone, so a group of several processes needs Endpoints.
	Endpoints []string
	// Prefix namespaces the group's keys (default "/convoy/").
	Prefix string
	// TLS secures the connection to etcd.
	TLS *tls.Config
	// DialTimeout bounds connecting (default 5s).
	DialTimeout time.Duration
	// LeaseTTL is how long a member's registration outlives it (default
	// 5s): a coarse liveness hint besides the failure detector.
	LeaseTTL time.Duration
	// Dir is the embedded etcd's data directory ("" = a temporary one).
	Dir string
}

// DurableConfig makes delivery durable: every member writes the messages
// it delivers, in the agreed order, to a log on disk, and a message is
// handed to the application (and Send with WaitDelivered returns) only
// once every member of the view has it on disk.
type DurableConfig struct {
	// Dir is the log's directory.
	Dir string
	// FS, if set, replaces the operating system's file system (tests).
	FS vfs.FS
	// MaxLag bounds how far a member's persisted index may trail the
	// highest announced in its view (default DefaultMaxLag, 1<<18
	// deliveries): a member further behind is suspected, and excluded by
	// the next view change, rather than allowed to stall durable delivery,
	// which waits for every member's disk. Only view-managed groups
	// exclude.
	MaxLag uint64
	// RestartWait is how long a restart after a failure of most of the
	// last view waits, once a majority of that view's caught-up members
	// is back, for the others before going on without them (they then
	// join and receive the state); default DefaultRestartWait, 3s. A
	// restart never goes on without a majority.
	RestartWait time.Duration
}

// DefaultRestartWait is DurableConfig.RestartWait's default.
const DefaultRestartWait = 3 * time.Second

// DefaultMaxLag is DurableConfig.MaxLag's default.
const DefaultMaxLag = 1 << 18

// Config configures one member of a group.
//
// A group has either fixed membership — Members lists it, every member
// uses the same Members (same order), Mode, BeaconInterval and FanOut, and
// a member's failure ends the group — or views kept in etcd (Etcd set,
// Members empty): members come and go, failed members are detected and
// excluded, joiners receive the group's state, and the group goes on in
// a new view (virtual synchrony, Atomic mode only).
//
// Fields left zero take their documented defaults. Open refuses a config
// with mistakes, as Validate reports them.
type Config struct {
	// Self is this member's id, unique in the group.
	Self NodeID
	// Members lists a group with fixed membership in rank order.
	Members []Member

	// Etcd enables views kept in etcd.
	Etcd *EtcdConfig
	// Addr is this member's transport address in a view-managed group,
	// as registered in etcd for the others to reach it. When Open listens
	// itself (Endpoint nil), it registers the address the tcp transport
	// listens on instead, and Addr is only where to listen (ListenAddr's
	// default); with Endpoint set, Addr is registered as given.
	Addr string
	// InitialMembers is how many members must have registered before the
	// one with the lowest id founds the group with all of them (default
	// 1). Later members join through view changes.
	InitialMembers int
	// HeartbeatInterval (default DefaultHeartbeatInterval, 50ms),
	// SuspectTimeout and StallTimeout tune the failure detector (package
	// membership): a neighbour silent for SuspectTimeout (default
	// DefaultSuspectTimeout, 250ms), or whose receive frontier stays behind
	// for StallTimeout (default DefaultStallTimeout, 2s) while it keeps
	// beating, is suspected, and excluded once other paths confirm.
	HeartbeatInterval, SuspectTimeout, StallTimeout time.Duration
	// State, if set, is the application state that joiners receive
	// (snapshot at the end of the view before the one that admits them,
	// streamed in parts from up to MaxDonors members, default
	// DefaultMaxDonors, 4).
	State     StateMachine
	MaxDonors int
	// TransferStall is how long a donor may make no progress — taking
	// its snapshot included — before a joiner asks the part's other
	// holder too; after three such periods in a row over a connection
	// that holds, the joiner gives the donor up (and, with no holder of a
	// part left, joins again). Default DefaultTransferStall, 10s.
	TransferStall time.Duration
	// Durable, if set, makes delivery durable (Atomic mode only): see
	// DurableConfig.
	Durable *DurableConfig
	// OnView, if set, receives every view this member takes part in, in
	// order with the deliveries, on the same goroutine as the Handler.
	OnView func(View)

	// Mode is the delivery guarantee (default Atomic).
	Mode Mode
	// Epoch labels the deliveries of a group with fixed membership
	// (default 1); a view-managed group takes its epochs from its views.
	Epoch uint64
	// Endpoint is the transport endpoint to use. If nil, Open listens on
	// ListenAddr (default: Addr, or else this member's address in Members)
	// with the tcp transport and closes the endpoint on Close.
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
	// beacons in reaction to traffic (default DefaultBeaconGap, 20µs). The
	// group reacts after each batch of incoming records, so a short gap
	// costs little under load and saves waiting for a timer when idle.
	BeaconGap time.Duration
	// WindowMessages and WindowBytes bound this member's own messages sent
	// but not yet delivered locally (defaults DefaultWindowMessages, 64Ki
	// messages, and DefaultWindowBytes, 64MiB); Send waits for space (or
	// returns ErrBackpressure with NoWait).
	WindowMessages int
	WindowBytes    int
	NoWait         bool
	// MaxMessageBytes bounds one message (default DefaultMaxMessageBytes,
	// 64MiB).
	MaxMessageBytes int
	// Algorithm and BlockBytes tune large messages (package multicast).
	Algorithm  multicast.Algorithm
	BlockBytes int
	// Clock returns this member's time in nanoseconds, which must never go
	// backwards (default: wall-clock time since the Unix epoch, read once
	// at Open and advanced by the monotonic clock). The member's state
	// transfers time their stall timeouts and reconnection pauses on it
	// too. Tests inject skewed clocks here.
	Clock func() int64
	// Logger, MeterProvider and TracerProvider receive logs, metrics and
	// spans (view changes and state transfers); nil discards them.
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider

	// onPropose, for tests, is called when this member, as leader, is
	// about to commit a view.
	onPropose func(epoch uint64)
	// onCommitted, for tests, is called when this member, as leader, has
	// committed a view in etcd (before anyone has read it).
	onCommitted func(epoch uint64)
	// onHeld, for tests, is called when a data record from member rank
	// with sequence seq arrives complete, before the core sees it.
	onHeld func(rank int, seq uint64)
	// openNet, for tests, carries each view's traffic in place of RDMC
	// groups and queue pairs on the endpoint (see viewNet).
	openNet func(ctx context.Context, v *view) (viewNet, error)
	// openDisk, for tests, opens the durable log in place of a
	// persistence.Log in Durable.Dir on Durable.FS (see durableLog).
	openDisk func(ctx context.Context) (durableLog, error)
	// plant, for tests, plants protocol faults in this member, each of
	// which the tests must catch (TestPlantedFaults).
	plant plant.Faults
	// host, for tests, runs the member in place of its goroutines (see
	// host); a hosted Group has no event channel.
	host host
	// batchBytes, for tests, bounds the RDMC batch frames of the views'
	// groups (0: multicast.DefaultBatchBytes).
	batchBytes int
	// transferChunkBytes, for tests, is the largest chunk this member
	// asks of its donors (0: membership.DefaultTransferChunkBytes).
	transferChunkBytes int
}

// Errors returned by Open, Send and Close.
var (
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("convoy: group closed")
	// ErrInvalidConfig is wrapped by every error Open and Config.Validate
	// return for a mistake in Config.
	ErrInvalidConfig = errors.New("convoy: invalid configuration")
	// ErrFailed wraps the error a group failed with (a member crashed or
	// sent bad input); Send returns it afterwards.
	ErrFailed = errors.New("convoy: group failed")
	// ErrBackpressure is returned by Send with NoWait when the window is
	// full.
	ErrBackpressure = errors.New("convoy: send window full")
	// ErrTooLarge is returned by Send above MaxMessageBytes.
	ErrTooLarge = errors.New("convoy: message too large")
	// ErrNotMember is returned by Send while this member takes part in no
	// view (it is rejoining).
	ErrNotMember = errors.New("convoy: not a member of the current view")
	// ErrExcluded is wrapped by the errors Send returns for messages of a
	// member that a view change excluded (it rejoins as a new
	// incarnation): messages beyond the view's cut are lost. A Send that
	// was waiting for delivery or stability may have had its message
	// delivered (within the cut); a Send that returns it before the
	// message was accepted did not queue it.
	ErrExcluded = errors.New("convoy: excluded from the group")
	// ErrLeft is returned by Send after Leave.
	ErrLeft = errors.New("convoy: left the group")
)

// Validate reports the mistakes in c that Open would refuse it for, one
// error per field (joined, see errors.Join), each wrapping
// ErrInvalidConfig and naming its field. Fields left zero take their
// documented defaults first, as in Open.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// withDefaults returns c with every documented default applied to the
// fields left zero (the one place that applies them), or the mistakes
// Validate reports.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: Config.%s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	c.checkMembers(bad)
	if c.Durable != nil {
		if c.Mode != Atomic {
			bad("Durable", "durable delivery needs atomic mode, not %v", c.Mode)
		}
		if c.Durable.Dir == "" && c.Durable.FS == nil {
			bad("Durable.Dir", "durable delivery needs a directory")
		}
	}
	def(&c.Epoch, 1)
	def(&c.ListenAddr, c.Addr)
	for _, m := range c.Members {
		if m.ID == c.Self {
			def(&c.ListenAddr, m.Addr)
		}
	}
	def(&c.InitialMembers, 1)
	def(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&c.SuspectTimeout, DefaultSuspectTimeout)
	def(&c.StallTimeout, DefaultStallTimeout)
	def(&c.MaxDonors, DefaultMaxDonors)
	def(&c.TransferStall, DefaultTransferStall)
	def(&c.BeaconGap, DefaultBeaconGap)
	def(&c.WindowMessages, DefaultWindowMessages)
	def(&c.WindowBytes, DefaultWindowBytes)
	def(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	if c.Etcd != nil {
		e := *c.Etcd
		def(&e.Prefix, "/convoy/")
		def(&e.DialTimeout, 5*time.Second)
		def(&e.LeaseTTL, 5*time.Second)
		c.Etcd = &e
	}
	if c.Durable != nil {
		d := *c.Durable
		def(&d.MaxLag, DefaultMaxLag)
		def(&d.RestartWait, DefaultRestartWait)
		c.Durable = &d
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.Clock == nil {
		// Wall-clock nanoseconds (comparable across members whose clocks
		// are synchronized), advanced by the monotonic clock so that they
		// never go backwards within this process.
		start := time.Now()
		base := start.UnixNano()
		c.Clock = func() int64 { return base + int64(time.Since(start)) }
	}
	positive := func(field string, v int) {
		if v < 1 {
			bad(field, "%d, must be positive", v)
		}
	}
	nonNegative := func(field string, d time.Duration) {
		if d < 0 {
			bad(field, "%v, must not be negative", d)
		}
	}
	positive("WindowMessages", c.WindowMessages)
	positive("WindowBytes", c.WindowBytes)
	positive("MaxMessageBytes", c.MaxMessageBytes)
	if c.Mode < Atomic || c.Mode > Unordered {
		bad("Mode", "unknown mode %d", c.Mode)
	}
	if c.FanOut < 0 || c.FanOut == 1 {
		bad("FanOut", "%d, want 0 (no aggregation) or at least 2", c.FanOut)
	}
	if c.Algorithm < multicast.BinomialPipeline || c.Algorithm > multicast.BinomialTree {
		bad("Algorithm", "unknown algorithm %d", c.Algorithm)
	}
	if c.BlockBytes < 0 {
		bad("BlockBytes", "%d, must not be negative", c.BlockBytes)
	}
	nonNegative("BeaconInterval", c.BeaconInterval)
	nonNegative("BeaconGap", c.BeaconGap)
	if c.Etcd != nil {
		positive("InitialMembers", c.InitialMembers)
		positive("MaxDonors", c.MaxDonors)
		if c.HeartbeatInterval > 0 && c.SuspectTimeout <= c.HeartbeatInterval {
			bad("SuspectTimeout", "%v, must exceed HeartbeatInterval (%v)", c.SuspectTimeout, c.HeartbeatInterval)
		}
		nonNegative("HeartbeatInterval", c.HeartbeatInterval)
		nonNegative("SuspectTimeout", c.SuspectTimeout)
		nonNegative("StallTimeout", c.StallTimeout)
		nonNegative("TransferStall", c.TransferStall)
		nonNegative("Etcd.DialTimeout", c.Etcd.DialTimeout)
		nonNegative("Etcd.LeaseTTL", c.Etcd.LeaseTTL)
	}
	if c.Durable != nil {
		nonNegative("Durable.RestartWait", c.Durable.RestartWait)
	}
	return c, errors.Join(errs...)
}

// def sets *p to v if it is zero.
func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// checkMembers checks the group's membership, a fixed list (Members) or
// views kept in etcd (Etcd), reporting each mistake to bad.
func (c Config) checkMembers(bad func(field, format string, args ...any)) {
	if c.Etcd != nil {
		if len(c.Members) > 0 {
			bad("Members", "a view-managed group (Etcd set) takes its members from etcd")
		}
		if c.Mode != Atomic {
			// At a failure, best-effort total order lets members deliver
			// different subsets: no cut could end a view the same on all.
			bad("Mode", "views need atomic mode, not %v", c.Mode)
		}
		if c.Self == 0 {
			bad("Self", "must be a non-zero id")
		}
		return
	}
	self := -1
	seen := make(map[NodeID]bool)
	for i, m := range c.Members {
		if seen[m.ID] {
			bad("Members", "member %d listed twice", m.ID)
		}
		seen[m.ID] = true
		if m.ID == c.Self {
			self = i
		}
	}
	if self < 0 {
		bad("Self", "%d is not in Members", c.Self)
	}
	if len(c.Members) > 1<<14 {
		bad("Members", "%d members, at most %d", len(c.Members), 1<<14)
	}
	if c.Epoch >= 1<<40 {
		bad("Epoch", "%d out of range", c.Epoch)
	}
}
