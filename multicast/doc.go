// Package multicast is RDMC: reliable multicast of messages from one root
// to the members of a group, built as a deterministic schedule of block
// transfers over the rdma transport.
//
// A [Group] has an id, an ordered member list and a root, the only member
// that sends. The root calls [Group.Send]; every member receives the
// messages complete and in send order through its [Callbacks]. A message is
// cut into blocks (512 KiB by default) that travel according to the group's
// [Algorithm]: sequential, chain, binomial tree, or the binomial pipeline
// (the default), in which receivers relay blocks to each other so that
// eight replicas cost little more than one. Each member computes its own
// part of the schedule locally.
//
// The first block of a message carries the message size as its immediate
// value; the receiver then asks the application for a destination buffer
// ([Callbacks.Alloc]) and posts receives for the rest straight into it.
// Receivers announce each posted buffer with a ready-for-block signal, so no
// block is ever sent before its buffer exists. A member has blocks in
// flight with one peer at a time in each direction, so that its link never
// splits its bandwidth between two steps of the schedule, and it announces
// a receive before it queues a block of the same or a later step for the
// same peer, which the announcement would otherwise wait behind.
//
// Messages no larger than GroupConfig.SmallThreshold take a separate low-latency
// path: the root batches them into frames sent to every receiver directly,
// so a stream of 64-byte messages costs one transfer per batch, not per
// message. A receiver keeps GroupConfig.BatchCredits frame buffers posted
// and grants the root their credits half of them at a time, in one signal
// whose immediate value is their number. Both paths merge into the one
// send order.
//
// Any failure (a member crashing, a broken connection, bad input) stops the
// group on every member that notices it, with exactly one
// [Callbacks.Failed] call; members notice because a failing member closes
// its queue pairs, so the failure spreads along the group's connections.
// The layer above then creates a new group.
//
// Usage:
//
//	g, err := multicast.NewGroup(ctx, ep, multicast.GroupConfig{
//		ID: 7, Members: []rdma.NodeID{1, 2, 3}, Root: 1,
//	}, multicast.Callbacks{Complete: func(m []byte) { ... }})
//	...
//	err = g.Send(ctx, payload) // on the root
package multicast
