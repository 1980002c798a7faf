package convoy

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/internal/engine"
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

// Defaults for Config fields left zero.
const (
	// DefaultWindowMessages bounds a member's own messages sent but not yet
	// delivered locally.
	DefaultWindowMessages = engine.DefaultWindowMessages
	// DefaultWindowBytes bounds their bytes.
	DefaultWindowBytes = engine.DefaultWindowBytes
	// DefaultBeaconInterval: an idle member beacons this often (traffic
	// and Syncs make members beacon at once).
	DefaultBeaconInterval = engine.DefaultBeaconInterval
	// DefaultBeaconGap: reactions a little apart, so that a burst of
	// records is answered once.
	DefaultBeaconGap = engine.DefaultBeaconGap
	// DefaultMaxMessageBytes bounds one message.
	DefaultMaxMessageBytes = engine.DefaultMaxMessageBytes

	// The failure detector and state transfer of a view-managed group.
	DefaultHeartbeatInterval = engine.DefaultHeartbeatInterval
	DefaultSuspectTimeout    = engine.DefaultSuspectTimeout
	DefaultStallTimeout      = engine.DefaultStallTimeout
	DefaultMaxDonors         = engine.DefaultMaxDonors
	DefaultTransferStall     = engine.DefaultTransferStall
)

// StateMachine is implemented by applications whose state a joining
// member needs: see Config.State.
type StateMachine = membership.StateMachine

// Checkpointer is implemented by a StateMachine whose snapshots need not
// hold deliveries back: it fixes the state at a point (Checkpoint,
// between two deliveries) and writes it from there (StateSnapshot) while
// deliveries go on. See membership.Checkpointer.
type Checkpointer = membership.Checkpointer

// StateSnapshot is the state as of a Checkpoint.
type StateSnapshot = membership.StateSnapshot

// EtcdConfig says where a view-managed group keeps its views, and how
// it reaches that etcd: either the group dials it itself (Endpoints,
// with TLS, DialTimeout, Username and Password as etcd's client takes
// them), or it uses a client the application made (Client).
type EtcdConfig struct {
	// Endpoints of an etcd cluster, required unless Client is set: in
	// production a fixed etcd quorum, not embedded in members that come
	// and go; for development and tests, package etcddev starts a
	// single-node etcd in the process.
	Endpoints []string
	// Prefix namespaces the group's keys (default "/convoy/").
	Prefix string
	// TLS secures the connection to etcd; a client certificate in it
	// authenticates the member to an etcd that takes certificates as
	// credentials (etcd's --client-cert-auth).
	TLS *tls.Config
	// DialTimeout bounds connecting, logging in included (default 5s).
	DialTimeout time.Duration
	// Username and Password log in to an etcd with authentication
	// enabled; they go together. The user needs read and write access to
	// the keys under Prefix, and may grant and revoke leases.
	Username, Password string
	// Client, if set, is the etcd client the group uses instead of
	// dialing one, for an application that talks to the same etcd
	// itself: Endpoints, TLS, DialTimeout, Username and Password must
	// then be left empty (the client has its own). The application owns
	// the client: the group never closes it (Close and Leave leave it
	// open), and the application must not close it before it has closed
	// the group.
	Client *clientv3.Client
	// LeaseTTL is how long a member's registration outlives it (default
	// 5s): a coarse liveness hint besides the failure detector.
	LeaseTTL time.Duration
}

// DurableConfig makes delivery durable: every member writes the messages
// it delivers, in the agreed order, to a log on disk, and a message is
// handed to the application (and Send with WaitDelivered returns) only
// once every member of the view has it on disk.
//
// A topic's message (Config.Topics, Group.Publish) is written by the
// topic's subscribers only, in the same log, and handed out once every
// subscriber of the topic in the view has it on disk: a subscriber whose
// disk is slow holds back its topics at their subscribers, not the
// topics it does not subscribe to (the group's messages wait for every
// member). A member still hands out its messages in the group's one
// order, so a message waits for those it delivers before it. A member
// that restarts on its log replays at Open, besides the group's
// messages, the messages of its topics it handed out before — each with
// its topic, epoch and index, marked Replayed, in the order it delivered
// them (those that came before the log's snapshot first: the snapshot
// holds the group's state, not the topics') — and receives a topic's
// later messages once it subscribes again. The replay holds every topic
// message the member handed out, after a crash as after a Close, and may
// hold a few it had not handed out yet, which the subscribers that stayed
// delivered at the same indexes (see TopicRetain for how many it keeps).
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
	// TopicRetain is how many of its last topic messages a member keeps
	// in its log to replay after a restart (default DefaultTopicRetain,
	// 65,536): older ones are deleted as new ones come. It bounds the
	// disk the topics take, at most TopicRetain times the largest
	// message, and a topic's messages older than that are not replayed.
	TopicRetain int
}

// DefaultRestartWait is DurableConfig.RestartWait's default.
const DefaultRestartWait = engine.DefaultRestartWait

// DefaultTraceMessages is Config.TraceMessages's default: one message in
// this many of each sender's is traced.
const DefaultTraceMessages = engine.DefaultTraceMessages

// DefaultMaxLag is DurableConfig.MaxLag's default.
const DefaultMaxLag = engine.DefaultMaxLag

// DefaultTopicRetain is DurableConfig.TopicRetain's default.
const DefaultTopicRetain = engine.DefaultTopicRetain

// Config configures one member of a group.
//
// A group has either fixed membership — Members lists it, every member
// uses the same Members (same order), Mode, BeaconInterval and FanOut, and
// a member's failure ends the group — or views kept in etcd (Etcd set,
// Members empty): members come and go, failed members are detected and
// excluded, joiners receive the group's state, and the group goes on in
// a new view (virtual synchrony, Atomic mode only).
//
// Fields left zero take their documented defaults (DefaultConfig returns
// them). Open refuses a config with mistakes, as Validate reports them:
// values out of range, and fields set that the chosen membership or
// transport would ignore.
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
	// DefaultMaxDonors, 4). No member holds a large state in memory for
	// it: a donor writes each part it snapshots beyond 1 MiB to a file in
	// the system's temporary directory and sends it from there, and a
	// joiner writes what it receives to its durable log (Durable) or,
	// without one, to such files, and restores from there.
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
	// Topics are the group's topics (see Group.Publish). In a group with
	// fixed membership (Members) they are all its topics, each with its
	// subscribers, for good, and every member must be given the same
	// list. In a view-managed group (Etcd) they are the topics this
	// member asks for as it joins, as Subscribe does: each created if the
	// group lacks it, and subscribed to if Subscribers lists Self (the
	// only member it may list). At most MaxTopics. With Durable, every
	// topic must be Atomic: a topic's message is then delivered once
	// every subscriber of the topic has it in its log (see DurableConfig).
	Topics []Topic

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
	// the tcp transport: each member's certificate must name its id as
	// the URI subject alternative name convoy://member/<id>
	// (rdma.MemberURI), and a peer that claims an id its certificate does
	// not name is refused. In a view-managed group it also guards
	// admission: a join request, and a registration in etcd, carries a
	// proof, the member's certificate chain and a signature with its key
	// over the record (membership.JoinAuth), and no view admits, nor
	// counts as a newer incarnation of a member, a member whose chain the
	// CAs this member trusts (ClientCAs, else RootCAs) did not issue,
	// whose certificate names another id, or whose signature fails: such
	// a member's Open waits until its context ends. Every member must
	// trust the same CAs. The certificate's validity period is judged as
	// of its start, alike at every member; an expired certificate is
	// refused by the TLS handshake instead.
	TLS *tls.Config
	// BeaconInterval is the longest a member stays silent (see package
	// ordering; default DefaultBeaconInterval, 20ms): an idle member
	// beacons this often, while traffic and Syncs make members beacon
	// within BeaconGap. FanOut enables frontier aggregation for large
	// groups.
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
	// spans (view changes and state transfers); nil discards them. The
	// README's Metrics section lists the metrics.
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// TraceMessages samples messages for tracing, with TracerProvider:
	// one message in TraceMessages of each sender's (by its sequence
	// number, so every member samples the same ones) gets a span
	// "convoy.message" on every member, from when the member sent or
	// received it to its delivery, with an event per step (sent or
	// received, ordered, persisted in durable delivery, delivered); the
	// spans of one message share a trace, whatever the member. Default
	// DefaultTraceMessages; negative: none.
	TraceMessages int
}

// Errors returned by Open, Send and Close.
var (
	// ErrClosed is returned by Send after Close.
	ErrClosed = engine.ErrClosed
	// ErrInvalidConfig is wrapped by every error Open and Config.Validate
	// return for a mistake in Config.
	ErrInvalidConfig = engine.ErrInvalidConfig
	// ErrFailed wraps the error a group failed with (a member crashed or
	// sent bad input); Send returns it afterwards.
	ErrFailed = engine.ErrFailed
	// ErrBackpressure is returned by Send with NoWait when the window is
	// full.
	ErrBackpressure = engine.ErrBackpressure
	// ErrTooLarge is returned by Send above MaxMessageBytes.
	ErrTooLarge = engine.ErrTooLarge
	// ErrNotMember is returned by Send while this member takes part in no
	// view (it is rejoining).
	ErrNotMember = engine.ErrNotMember
	// ErrExcluded is wrapped by the errors Send returns for messages of a
	// member that a view change excluded (it rejoins as a new
	// incarnation): messages beyond the view's cut are lost. A Send that
	// was waiting for delivery or stability may have had its message
	// delivered (within the cut); a Send that returns it before the
	// message was accepted did not queue it.
	ErrExcluded = engine.ErrExcluded
	// ErrLeft is returned by Send after Leave.
	ErrLeft = engine.ErrLeft
)

// DefaultConfig returns a Config whose fields that have a documented
// default hold it, for a program to start from and change: the
// defaults that Open applies to fields left zero, made visible. Self,
// and Members or Etcd, are the caller's to set. A default that does not
// apply to the group's membership (the failure detector's, in a group
// with fixed membership) is not an error.
func DefaultConfig() Config {
	d, _ := engine.Config{}.WithDefaults() // the mistakes of an empty config do not matter here
	return Config{
		InitialMembers:    d.InitialMembers,
		HeartbeatInterval: d.HeartbeatInterval,
		SuspectTimeout:    d.SuspectTimeout,
		StallTimeout:      d.StallTimeout,
		MaxDonors:         d.MaxDonors,
		TransferStall:     d.TransferStall,
		Mode:              d.Mode,
		Epoch:             d.Epoch,
		BeaconInterval:    d.BeaconInterval,
		BeaconGap:         d.BeaconGap,
		WindowMessages:    d.WindowMessages,
		WindowBytes:       d.WindowBytes,
		MaxMessageBytes:   d.MaxMessageBytes,
	}
}

// Validate reports the mistakes in c that Open would refuse it for, one
// error per field (joined, see errors.Join), each wrapping
// ErrInvalidConfig and naming its field. Fields left zero take their
// documented defaults first, as in Open.
func (c Config) Validate() error {
	return c.engine().Validate()
}

// engine returns c as the engine's configuration, field for field.
func (c Config) engine() engine.Config {
	ec := engine.Config{
		Self:              c.Self,
		Members:           engineMembers(c.Members),
		Addr:              c.Addr,
		InitialMembers:    c.InitialMembers,
		HeartbeatInterval: c.HeartbeatInterval,
		SuspectTimeout:    c.SuspectTimeout,
		StallTimeout:      c.StallTimeout,
		State:             c.State,
		MaxDonors:         c.MaxDonors,
		TransferStall:     c.TransferStall,
		Mode:              c.Mode,
		Epoch:             c.Epoch,
		Endpoint:          c.Endpoint,
		ListenAddr:        c.ListenAddr,
		TLS:               c.TLS,
		BeaconInterval:    c.BeaconInterval,
		FanOut:            c.FanOut,
		BeaconGap:         c.BeaconGap,
		WindowMessages:    c.WindowMessages,
		WindowBytes:       c.WindowBytes,
		NoWait:            c.NoWait,
		MaxMessageBytes:   c.MaxMessageBytes,
		Algorithm:         c.Algorithm,
		BlockBytes:        c.BlockBytes,
		Clock:             c.Clock,
		Logger:            c.Logger,
		MeterProvider:     c.MeterProvider,
		TracerProvider:    c.TracerProvider,
		TraceMessages:     c.TraceMessages,
	}
	for _, t := range c.Topics {
		ec.Topics = append(ec.Topics, engine.Topic(t))
	}
	if c.Etcd != nil {
		e := engine.EtcdConfig(*c.Etcd)
		ec.Etcd = &e
	}
	if c.Durable != nil {
		d := engine.DurableConfig(*c.Durable)
		ec.Durable = &d
	}
	if f := c.OnView; f != nil {
		ec.OnView = func(v engine.View) { f(publicView(v)) }
	}
	return ec
}

func engineMembers(ms []Member) []engine.Member {
	if ms == nil {
		return nil
	}
	out := make([]engine.Member, len(ms))
	for i, m := range ms {
		out[i] = engine.Member(m)
	}
	return out
}
