// Package convoy is a total-order group communication library: a set of
// processes forms a group, every member can multicast messages, and every
// member delivers the same messages in the same order.
//
// Open a group on every member with the same member list and delivery mode,
// then Send from any member and receive deliveries in the agreed order:
//
//	g, err := convoy.Open(ctx, convoy.Config{
//		Self:    1,
//		Members: []convoy.Member{{ID: 1, Addr: "10.0.0.1:7000"}, {ID: 2, Addr: "10.0.0.2:7000"}, {ID: 3, Addr: "10.0.0.3:7000"}},
//		Mode:    convoy.Atomic,
//	}, func(d convoy.Delivery) {
//		apply(d.Index, d.Payload)
//	})
//	...
//	_, err = g.Send(ctx, []byte("hello"), convoy.WaitDelivered())
//
// Each member multicasts its messages in its own RDMC group (package
// multicast) over the rdma transport; the ordering core (package ordering)
// stamps them with a hybrid logical clock and delivers them once the
// barrier of the chosen mode has passed them (package barrier).
//
// Membership is either a fixed list (a member that fails stops the group)
// or a sequence of views kept in etcd (Config.Etcd, package membership):
// failed members are detected and excluded, joiners receive the state,
// and every member delivers the same messages and views in the same
// order (virtual synchrony). With Config.Durable, delivery is durable: a
// message reaches the application only once every member has it in its
// Pebble log (package persistence), members restart from their logs, and
// the group restarts from them after all its members failed. The
// runtime that carries all this out lives in internal/engine; this
// package is its public face.
//
// # Topics
//
// A group may have topics (Config.Topics, Group.Subscribe): pub/sub
// within the group. Group.Publish sends a message on a topic to its
// subscribers only — its bytes cross only the links of its publisher
// and subscribers, in an RDMC group per publisher and subscriber set —
// and every member delivers the messages of the group and of its topics
// interleaved in one order: any two messages that two members both
// deliver come in the same relative order at both. 1Pipe's scatterings
// give the rule that makes it so: a member's beacons are bound to its
// count of messages on each topic, so that a receiver never passes the
// barrier before holding everything addressed to it. An atomic topic's
// message is delivered once every subscriber holds it; subscriptions take
// effect at view boundaries, and each topic keeps virtual synchrony
// across view changes. Package ordering documents the protocol. In a
// durable group (Config.Durable) every member logs the messages of its
// topics with the group's, and a topic's message is delivered once every
// subscriber of the topic has it on disk: a slow disk holds back the
// group's messages and its member's topics, not the topics its member
// does not subscribe to. A
// member that restarts on its log replays its topics' messages at the
// indexes they had.
package convoy
