// Package ordering puts the messages of a group's members into one total
// order, 1Pipe style: every message is stamped by its sender with a hybrid
// logical clock, receivers hold complete messages in a buffer ordered by
// (timestamp, sender rank, sequence), and deliver them in that order once a
// barrier (package barrier) has passed them.
//
// [Core] is the protocol as a deterministic state machine in the manner of
// etcd's raft: it does no I/O and reads no clock. The runtime hands it the
// application's sends ([Core.Send]), the records other members multicast
// ([Core.Step]) and the passage of time ([Core.Tick]), each with the current
// time, and carries out what [Core.Ready] returns: records to multicast in
// this member's own group, control records for the aggregation tree, and
// deliveries in order.
//
// Delivery modes:
//
//   - Unordered: each sender's messages in its order, as they arrive.
//   - TotalOrder: best effort; delivered below this member's own receive
//     frontier. Identical order on every member within a failure-free view
//     and for any two messages two members both delivered; at a failure,
//     members may deliver different subsets and nothing is re-sent.
//   - Atomic: delivered below the commit barrier, so nothing is delivered
//     until every member holds it.
//
// Clock skew between members costs latency, never order nor messages: the
// hybrid clock makes a member's stamps follow every stamp it has seen, and
// a peer's record stamped more than [Config.MaxAhead] beyond local time
// waits, with that peer's later records, until local time catches up.
//
// Records between members are encoded by [AppendRecord] and decoded by
// [DecodeRecord], which checks every field read from the network.
package ordering
