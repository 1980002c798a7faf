package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// Member is convoy.Member: see its documentation.
type Member struct {
	ID   NodeID
	Addr string
}

// Defaults for Config fields left zero (see withDefaults).
const (
	// DefaultWindowMessages bounds a member's own messages sent but not yet
	// delivered locally.
	DefaultWindowMessages = 64 << 10
	// DefaultWindowBytes bounds their bytes.
	DefaultWindowBytes = 64 << 20
	// DefaultBeaconInterval: an idle member beacons this often. Traffic
	// and Syncs make members beacon at once (within BeaconGap), so it sets
	// what an idle group costs (a record to every other member per
	// interval), and, twice over, how far ahead of the clock a beacon
	// promises (see package ordering).
	DefaultBeaconInterval = ordering.DefaultBeaconInterval
	// DefaultBeaconGap: reactions a little apart, so that a burst of
	// records is answered once.
	DefaultBeaconGap = ordering.DefaultBeaconGap
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

// EtcdConfig is convoy.EtcdConfig: see its documentation.
type EtcdConfig struct {
	Endpoints          []string
	Prefix             string
	TLS                *tls.Config
	DialTimeout        time.Duration
	Username, Password string
	Client             *clientv3.Client
	LeaseTTL           time.Duration
}

// DurableConfig is convoy.DurableConfig: see its documentation.
type DurableConfig struct {
	Dir         string
	FS          vfs.FS
	MaxLag      uint64
	RestartWait time.Duration
	TopicRetain int
}

// DefaultRestartWait is DurableConfig.RestartWait's default.
const DefaultRestartWait = 3 * time.Second

// DefaultTraceMessages is Config.TraceMessages's default: one message in
// this many of each sender's is traced.
const DefaultTraceMessages = 1024

// DefaultMaxLag is DurableConfig.MaxLag's default.
const DefaultMaxLag = 1 << 18

// DefaultTopicRetain is DurableConfig.TopicRetain's default.
const DefaultTopicRetain = 1 << 16

// Config is convoy.Config as the engine takes it: the same fields (see
// their documentation there), which withDefaults checks and completes,
// and the test hooks.
type Config struct {
	Self    NodeID
	Members []Member

	Etcd                                            *EtcdConfig
	Addr                                            string
	InitialMembers                                  int
	HeartbeatInterval, SuspectTimeout, StallTimeout time.Duration
	State                                           StateMachine
	MaxDonors                                       int
	TransferStall                                   time.Duration
	Durable                                         *DurableConfig
	OnView                                          func(View)
	Topics                                          []Topic

	Mode            Mode
	Epoch           uint64
	Endpoint        rdma.Endpoint
	ListenAddr      string
	TLS             *tls.Config
	BeaconInterval  time.Duration
	FanOut          int
	BeaconGap       time.Duration
	WindowMessages  int
	WindowBytes     int
	NoWait          bool
	MaxMessageBytes int
	Algorithm       multicast.Algorithm
	BlockBytes      int
	Clock           func() int64
	Logger          *slog.Logger
	MeterProvider   metric.MeterProvider
	TracerProvider  trace.TracerProvider
	TraceMessages   int

	test hooks
}

// hooks are the package's test hooks: each, set, replaces or observes a
// step of the member (Config.test).
type hooks struct {
	// onPropose is called when this member, as leader, is
	// about to commit a view.
	onPropose func(epoch uint64)
	// onCommitted is called when this member, as leader, has
	// committed a view in etcd (before anyone has read it).
	onCommitted func(epoch uint64)
	// onHeld is called when a data record from member rank
	// with sequence seq arrives complete, before the core sees it.
	onHeld func(rank int, seq uint64)
	// openNet carries each view's traffic in place of RDMC
	// groups and queue pairs on the endpoint (see viewNet).
	openNet func(ctx context.Context, v *view) (viewNet, error)
	// openDisk opens the durable log in place of a
	// persistence.Log in Durable.Dir on Durable.FS (see durableLog).
	openDisk func(ctx context.Context) (durableLog, error)
	// etcd, if set, replaces the etcd cluster Config.Etcd names (see
	// etcdBackend).
	etcd etcdBackend
	// plant plants protocol faults in this member, each of
	// which the tests must catch (TestPlantedFaults).
	plant plant.Faults
	// host runs the member in place of its goroutines (see
	// host); a hosted Group has no event channel.
	host host
	// batchBytes bounds the RDMC batch frames of the views'
	// groups (0: multicast.DefaultBatchBytes).
	batchBytes int
	// onViewRead is called for each read of the current view that Syncs
	// share (viewReads).
	onViewRead func()
	// transferChunkBytes is the largest chunk this member
	// asks of its donors (0: membership.DefaultTransferChunkBytes).
	transferChunkBytes int
	// spillBytes is how much of a part of the state being transferred
	// a spill keeps in memory (0: defaultSpillBytes).
	spillBytes int
	// onTransferred is called on the loop when this joiner's state
	// transfer for the view of epoch completes, before the state is
	// installed.
	onTransferred func(epoch uint64)
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

// WithDefaults returns c with every documented default applied to the
// fields left zero, and the mistakes Validate reports (c is completed
// even then).
func (c Config) WithDefaults() (Config, error) { return c.withDefaults() }

// withDefaults returns c with every documented default applied to the
// fields left zero (the one place that applies them), or the mistakes
// Validate reports.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: Config.%s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	c.checkMembers(bad)
	c.checkApplies(bad)
	c.checkTopics(bad)
	if c.Etcd != nil {
		c.Etcd.check(c.test.etcd != nil, bad)
	}
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
	def(&c.BeaconInterval, DefaultBeaconInterval)
	def(&c.BeaconGap, DefaultBeaconGap)
	def(&c.TraceMessages, DefaultTraceMessages)
	def(&c.WindowMessages, DefaultWindowMessages)
	def(&c.WindowBytes, DefaultWindowBytes)
	def(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	if c.Etcd != nil {
		e := *c.Etcd
		def(&e.Prefix, "/convoy/")
		if e.Client == nil {
			def(&e.DialTimeout, defaultEtcdDialTimeout)
		}
		def(&e.LeaseTTL, 5*time.Second)
		c.Etcd = &e
	}
	if c.Durable != nil {
		d := *c.Durable
		def(&d.MaxLag, DefaultMaxLag)
		def(&d.RestartWait, DefaultRestartWait)
		def(&d.TopicRetain, DefaultTopicRetain)
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
		if c.Etcd.Client == nil {
			nonNegative("Etcd.DialTimeout", c.Etcd.DialTimeout)
		}
		nonNegative("Etcd.LeaseTTL", c.Etcd.LeaseTTL)
	}
	if c.Durable != nil {
		nonNegative("Durable.RestartWait", c.Durable.RestartWait)
		positive("Durable.TopicRetain", c.Durable.TopicRetain)
	}
	return c, errors.Join(errs...)
}

// defaultEtcdDialTimeout is EtcdConfig.DialTimeout's default.
const defaultEtcdDialTimeout = 5 * time.Second

// check reports the mistakes in how e reaches etcd to bad: no etcd named
// (unless simulated, a test's), a login half given, or settings of a
// connection beside a client the application made, which has its own.
func (e *EtcdConfig) check(simulated bool, bad func(field, format string, args ...any)) {
	if e.Client != nil {
		const why = "the group uses Etcd.Client, which has its own"
		set := func(field string, is bool) {
			if is {
				bad(field, "set, but %s", why)
			}
		}
		set("Etcd.Endpoints", len(e.Endpoints) > 0)
		set("Etcd.TLS", e.TLS != nil)
		set("Etcd.DialTimeout", e.DialTimeout != 0)
		set("Etcd.Username", e.Username != "")
		set("Etcd.Password", e.Password != "")
		return
	}
	if len(e.Endpoints) == 0 && !simulated {
		bad("Etcd.Endpoints", "none: a view-managed group needs an etcd cluster, or Etcd.Client (package etcddev starts one in this process, for development and tests)")
	}
	switch {
	case e.Username != "" && e.Password == "":
		bad("Etcd.Password", "empty, but Etcd.Username is set: etcd's client logs in only with both")
	case e.Username == "" && e.Password != "":
		bad("Etcd.Username", "empty, but Etcd.Password is set: etcd's client logs in only with both")
	}
}

// def sets *p to v if it is zero.
func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// checkApplies reports each field set (to other than zero or its
// default) that the chosen membership or transport would ignore.
func (c Config) checkApplies(bad func(field, format string, args ...any)) {
	set := func(field string, is bool, why string) {
		if is {
			bad(field, "set, but %s", why)
		}
	}
	if c.Etcd == nil {
		const why = "it applies only to a view-managed group (Etcd set)"
		set("InitialMembers", c.InitialMembers != 0 && c.InitialMembers != 1, why)
		set("HeartbeatInterval", c.HeartbeatInterval != 0 && c.HeartbeatInterval != DefaultHeartbeatInterval, why)
		set("SuspectTimeout", c.SuspectTimeout != 0 && c.SuspectTimeout != DefaultSuspectTimeout, why)
		set("StallTimeout", c.StallTimeout != 0 && c.StallTimeout != DefaultStallTimeout, why)
		set("MaxDonors", c.MaxDonors != 0 && c.MaxDonors != DefaultMaxDonors, why)
		set("TransferStall", c.TransferStall != 0 && c.TransferStall != DefaultTransferStall, why)
		set("State", c.State != nil && c.Durable == nil, "it applies only to a view-managed group (joiners receive it) or to durable delivery (Group.Snapshot)")
	} else {
		set("Epoch", c.Epoch > 1, "a view-managed group takes its epochs from its views")
	}
	if c.Endpoint != nil {
		const why = "Open listens only without Endpoint"
		set("ListenAddr", c.ListenAddr != "", why)
		set("TLS", c.TLS != nil, "it secures only the tcp transport Open makes (Endpoint nil)")
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
		if c.TLS != nil {
			// Its certificate proves this member's join requests,
			// registrations and restart claims.
			if _, err := membership.NewJoinAuth(c.TLS); err != nil {
				bad("TLS", "%v", err)
			}
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
