package convoy

import (
	"context"
	"fmt"
	"time"

	"github.com/convoy-gcs/convoy/internal/engine"
)

// Delivery is one message delivered in the group's agreed order.
type Delivery struct {
	// Epoch and Index place the message in the group's sequence; in
	// Atomic and TotalOrder modes every member gives a message the same
	// Index. In Unordered mode Index only counts this member's deliveries.
	// A message on a topic is placed in the topic's sequence instead:
	// Index counts the topic's messages, the same on every subscriber.
	Epoch, Index uint64
	// Topic is the topic the message was published on (Group.Publish),
	// or "" for a message sent to the whole group (Group.Send).
	Topic string
	// Sender is the member that sent the message, Seq its sequence number
	// among that member's messages (from 1; on a topic, among its
	// messages on the topic), Timestamp its stamp.
	Sender    NodeID
	Seq       uint64
	Timestamp uint64
	// Payload is the message. It belongs to the handler.
	Payload []byte
	// Replayed marks a delivery read back from this member's own durable
	// log after a restart, in the same order and with the same indexes
	// as before, on top of the state restored from the log's snapshot,
	// if any. Open replays the entries known to be durable (on every
	// member's disk); the entries after them, which the handler may or
	// may not have seen before the restart, are handed once the group
	// confirms them (the group restarts from the members' logs, which
	// places them in its sequence, or the member rejoins where its log
	// ends), or dropped if StateMachine.Restore replaces the state
	// instead. So no replayed delivery is ever taken
	// back.
	Replayed bool
}

// Handler receives deliveries, one at a time, in order. It runs on the
// group's own goroutine: while it runs, delivery waits. It must not call
// Close; it may call Send only without WaitDelivered or WaitStable (Send
// then returns once the message is Accepted), and even so, with the
// window full, Send waits until its context ends (or, with
// Config.NoWait, returns ErrBackpressure).
type Handler func(Delivery)

// View is one view of a group: its epoch and members in rank order.
// Every member sees the same sequence of views, each in the same place
// among the deliveries (see Config.OnView).
type View struct {
	Epoch uint64
	// Start is the index of the last message delivered before the view;
	// its first message gets Start+1.
	Start   uint64
	Members []Member
	// Joined and Left list the members that came and went with this view.
	Joined, Left []NodeID
	// Excluded says that the group went on to view Epoch without this
	// member (it was suspected, or left): it delivers nothing more in
	// this incarnation. Unless it left, it rejoins as a new incarnation,
	// and before the next view it takes part in, its state is replaced by
	// transfer (StateMachine.Restore) or, in durable delivery when the
	// leader's log holds the entry its own log ends with, completed with
	// the messages it missed.
	Excluded bool
	// Topics are the view's topics with their subscribers, fixed for the
	// view (see Group.Subscribe).
	Topics []Topic
}

func (v View) String() string { return fmt.Sprintf("view %d (%d members)", v.Epoch, len(v.Members)) }

func publicView(v engine.View) View {
	pv := View{Epoch: v.Epoch, Start: v.Start, Joined: v.Joined, Left: v.Left, Excluded: v.Excluded}
	if v.Members != nil {
		pv.Members = make([]Member, len(v.Members))
		for i, m := range v.Members {
			pv.Members[i] = Member(m)
		}
	}
	for _, t := range v.Topics {
		pv.Topics = append(pv.Topics, Topic(t))
	}
	return pv
}

// Group is one member's handle on a group. Its methods are safe for
// concurrent use.
type Group struct {
	e *engine.Group
}

// Open joins this member to the group described by cfg.
//
// With fixed membership (Config.Members), every member must call Open with
// the same Members, Mode, BeaconInterval and FanOut; each waits for the
// others' connections as it needs them, and a failure ends the group.
//
// In a view-managed group (Config.Etcd set), Open registers this member in
// etcd and returns once it takes part in a view: the first view when it
// founds the group, otherwise the view that admits it, with its state
// transferred (Config.State).
func Open(ctx context.Context, cfg Config, h Handler) (*Group, error) {
	var eh engine.Handler
	if h != nil {
		eh = func(d engine.Delivery) { h(Delivery(d)) }
	}
	e, err := engine.Open(ctx, cfg.engine(), eh)
	if err != nil {
		return nil, err
	}
	return &Group{e: e}, nil
}

// View returns the last view handed to the application (Config.OnView),
// and whether this member takes part in it: false before the first view
// and after an exclusion, until the view that admits it again.
func (g *Group) View() (View, bool) {
	v, ok := g.e.View()
	return publicView(v), ok
}

// Level is how far a message has come.
type Level = engine.Level

// How far a message has come.
const (
	// Accepted: the group took the message (it is stamped and queued).
	Accepted = engine.Accepted
	// Delivered: this member delivered it.
	Delivered = engine.Delivered
	// Stable: every member holds it (and, in Atomic mode, delivers it
	// once it learns so).
	Stable = engine.Stable
)

// SendOption changes how Send waits.
type SendOption = engine.SendOption

// WaitDelivered makes Send return once this member delivered the message.
func WaitDelivered() SendOption { return engine.WaitDelivered() }

// WaitStable makes Send return once every member holds the message.
func WaitStable() SendOption { return engine.WaitStable() }

// Receipt identifies a sent message and, once Send saw it delivered,
// where it landed.
type Receipt struct {
	// Topic is the topic the message was published on ("": sent to the
	// group); Seq its sequence number among this member's messages (on
	// the topic).
	Topic string
	Seq   uint64
	// Epoch and Index place the message in the group's order, as its
	// Delivery does: set when Send returns after WaitDelivered, zero
	// otherwise (a message accepted or stable is not yet placed here).
	Epoch, Index uint64
}

// Send multicasts payload to the group. It waits until the message is
// accepted — which, when this member's window of undelivered messages is
// full, waits for space (or, with Config.NoWait, fails with
// ErrBackpressure) — or further with WaitDelivered or WaitStable. The group
// owns payload from the call on: do not modify it.
//
// It returns ErrTooLarge above MaxMessageBytes, ErrClosed after Close, an
// error wrapping ErrFailed after the group failed, and the context's error
// if it ends first (the message may still be delivered, unless the context
// had ended before the call: then nothing is sent).
func (g *Group) Send(ctx context.Context, payload []byte, opts ...SendOption) (Receipt, error) {
	r, err := g.e.Send(ctx, payload, opts...)
	return Receipt(r), err
}

// Close leaves the group: it stops delivery, closes the multicast groups
// (the other members see the group fail) and the endpoint Open made.
func (g *Group) Close() error { return g.e.Close() }

// Err returns the error the group failed with, or nil.
func (g *Group) Err() error { return g.e.Err() }

// Leave takes this member out of the group gracefully: it asks for a view
// without it, waits until that view is installed (its messages sent so
// far are then delivered or reported lost), and closes the group.
func (g *Group) Leave(ctx context.Context) error { return g.e.Leave(ctx) }

// ErrNotDurable is returned by WaitDurable and Snapshot without
// Config.Durable.
var ErrNotDurable = engine.ErrNotDurable

// ErrNoState is returned by Snapshot without Config.State.
var ErrNoState = engine.ErrNoState

// WaitDurable waits until every message up to global index index is on the
// disk of every member of the view (every member has announced a synced
// index at least that high): it then survives the crash of every member.
// It returns ErrNotDurable without Config.Durable, and the group's error
// if it ends first.
func (g *Group) WaitDurable(ctx context.Context, index uint64) error {
	return g.e.WaitDurable(ctx, index)
}

// Snapshot takes a snapshot of the application's state (Config.State) as
// of the last message delivered to it, keeps it in the durable log and
// trims the log before it. After a restart this member restores the
// snapshot and replays only the entries after it. It returns the index
// the snapshot reflects.
//
// The state streams into the log as StateMachine.Snapshot writes it, in
// chunks, so that a state of any size costs little memory. Deliveries
// wait while StateMachine.Snapshot runs (it writes the whole state as
// one part, on the caller's goroutine), unless the state machine is a
// Checkpointer: its checkpoint is taken between two deliveries, and
// deliveries go on while the checkpoint is written. Either way the
// member's loop goes on, and the log's commit and the trim do not hold
// deliveries up. One snapshot is taken at a time: a call waits for the
// one in progress. Errors: ErrNotDurable without Config.Durable,
// ErrNoState without Config.State, ErrNotMember while this member takes
// part in no view or waits for its state, ErrClosed, ctx's, the
// application's, and the log's errors.
func (g *Group) Snapshot(ctx context.Context) (uint64, error) { return g.e.Snapshot(ctx) }

// Status is a member's account of itself and its group, as Group.Status
// returns it.
type Status struct {
	// Self is this member's id.
	Self NodeID `json:"self"`
	// Epoch is the view this member takes part in (0: none, before its
	// first view and after an exclusion until the view that admits it
	// again); Rank is its place there (-1: none), and Members the view's
	// members, once the view has been handed to the application.
	Epoch   uint64   `json:"epoch"`
	Rank    int      `json:"rank"`
	Members []Member `json:"members"`
	// Phase is where the member stands: "active" while it takes part in
	// a view with nothing changing; in a view-managed group, also
	// "joining" (before its first view, or between incarnations),
	// "recovering" (restarting the group from its log), "wedged" and
	// "reported" (during a view change), "left"; and "failed" or "closed"
	// once the group has ended for this member.
	Phase string `json:"phase"`
	// Delivered is the index of the last message handed to the
	// application (replays included); Durable, in durable delivery, the
	// highest index on every member's disk.
	Delivered uint64 `json:"delivered"`
	Durable   uint64 `json:"durable"`
	// Frontier is this member's receive frontier (it holds every message
	// stamped below it), Barrier the stamp below which it delivers, both
	// hybrid-clock nanoseconds; Lag is how far Barrier trails this
	// member's clock.
	Frontier uint64        `json:"frontier"`
	Barrier  uint64        `json:"barrier"`
	Lag      time.Duration `json:"lag_ns"`
	// Held lists, by rank, how many of each member's messages of the view
	// this member holds complete; Buffered counts the messages it has
	// received and not yet delivered.
	Held     []uint64 `json:"held"`
	Buffered int      `json:"buffered"`
	// InFlight and InFlightBytes are this member's own messages accepted
	// and not yet delivered locally: the send window's use, against
	// WindowMessages and WindowBytes.
	InFlight       int `json:"in_flight"`
	InFlightBytes  int `json:"in_flight_bytes"`
	WindowMessages int `json:"window_messages"`
	WindowBytes    int `json:"window_bytes"`
	// Lease is the state of this member's etcd registration in a
	// view-managed group: "held", "lost" (it registers again) or
	// "withdrawn" (the group failed); empty with fixed membership.
	Lease string `json:"lease,omitempty"`
	// Updated is when the member's loop last published its part of the
	// status (Phase, Rank, Frontier, Barrier, Held, Buffered): at most a
	// beacon interval ago while it runs.
	Updated time.Time `json:"updated"`
}

// Status returns this member's account of itself and its group. It does
// not wait for the member's loop: what the loop owns is as of its last
// tick (Status.Updated); the rest is current.
func (g *Group) Status() Status {
	return publicStatus(g.e.Status())
}

func publicStatus(s engine.Status) Status {
	return Status{
		Self: s.Self, Epoch: s.Epoch, Rank: s.Rank,
		Members:   publicView(engine.View{Members: s.Members}).Members,
		Phase:     s.Phase,
		Delivered: s.Delivered, Durable: s.Durable,
		Frontier: s.Frontier, Barrier: s.Barrier, Lag: s.Lag,
		Held: s.Held, Buffered: s.Buffered,
		InFlight: s.InFlight, InFlightBytes: s.InFlightBytes,
		WindowMessages: s.WindowMessages, WindowBytes: s.WindowBytes,
		Lease: s.Lease, Updated: s.Updated,
	}
}

// Sync waits until this member has handed the application every message
// that any member delivered before the call, and returns the index of the
// last message handed then: a read of state the handler builds, made after
// Sync returns, sees every such message (a linearizable read). A member
// that joined a view-managed group counts the messages before its first
// view as handed: its state came by transfer (Config.State), or it starts
// from none. It sends no message: it waits until this member's delivery
// barrier passes its receive frontier as of the call and what is below it
// has been handed (it asks the other members for prompt beacons, so an
// idle group takes about two message delays, not a beacon interval; durable
// delivery waits for every member's disk too, and a view change for the
// next view) and, in a view-managed group, it reads the current view from
// etcd to confirm that the group has not gone on to another view (if it
// has, Sync starts over there). Concurrent calls wait together, and
// share their reads of etcd: a read serves the calls made before it
// started.
//
// Sync needs Atomic mode (it returns an error wrapping
// errors.ErrUnsupported otherwise). It returns ErrNotMember while this
// member takes part in no view, an error wrapping ErrExcluded if a view
// change excludes it meanwhile (ErrLeft after Leave), ErrClosed, the
// group's error, etcd's, and ctx's.
func (g *Group) Sync(ctx context.Context) (uint64, error) { return g.e.Sync(ctx) }
