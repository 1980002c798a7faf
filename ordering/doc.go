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
// Members beacon (promise that nothing of theirs will be stamped below a
// time) at once when others wait on them — a peer's message, or a moved
// frontier that the commit barrier waits for — and otherwise once per
// [Config.BeaconInterval]. A member that waits for its barriers to pass a
// point without a message of its own to carry it (a linearizable read)
// asks for prompt beacons with [Core.Want], which multicasts a want record
// ([KindWant]).
//
// A beacon of a member that has not sent a message of its own for a
// BeaconInterval promises a lead ahead of local time (twice
// BeaconInterval, at most a quarter of MaxAhead), and the member's own
// stamps keep to it; a peer's promise does not move a member's clock,
// only a peer's message or want does. So with one member sending and the
// others idle, their standing promises are ahead of its stamps: its
// message passes each receiver's frontier as it arrives, and total order
// delivers it one message delay after the send, atomic delivery two (the
// receivers' announced frontiers), instead of first waiting a round trip
// for the others' beacons in reaction. The cost falls on a member that
// sends after such a beacon: its stamps are up to the lead ahead of
// local time, and its message waits for the others' reactions, as
// without the lead. A member that is sending promises no lead, so that
// its beacons (announcing its frontier for its own messages' commit)
// leave its stamps on its clock.
//
// Clock skew between members costs latency, never order nor messages: the
// hybrid clock makes a member's stamps follow every stamp it has seen, and
// a peer's record stamped more than [Config.MaxAhead] beyond local time
// waits, with that peer's later records, until local time catches up.
//
// # Topics
//
// A view may have topics ([Config.Topics], the same list on every
// member): each with its subscribers, a subset of the members, and a
// mode (Atomic or TotalOrder). [Core.Publish] sends a message on a
// topic, to its subscribers only, while [Core.Send] sends to the whole
// group; a member delivers the messages of the group and of its topics
// interleaved in the one (stamp, rank, topic, sequence) order, so that
// any two messages that two members both deliver come in the same
// relative order at both. These are 1Pipe's scatterings: messages to
// different sets of receivers, ordered with each other by the same
// timestamps and barriers.
//
// Every sender has a channel per topic besides its channel to the
// group, each numbering its messages from 1 and carried in order (the
// runtime uses an RDMC group of the sender and the topic's subscribers);
// channels are not ordered with each other. A receiver keeps promises
// per channel it receives ([barrier.Promises], one slot per channel),
// and its receive frontier is their minimum: it holds every message
// addressed to it below the frontier. A message promises only for its
// own channel; a sender's beacons ([KindTopicBeacon]), multicast to the
// group, promise for all its channels and are bound to a count on each:
// "after my group message n and my message n_t on each topic t, nothing
// of mine is stamped below T". A receiver applies the promise to each of
// its channels from that sender once it holds that channel's messages up
// to the count, so it never passes the barrier before holding everything
// addressed to it below it. The counts are sent only for the topics
// published on since the sender's previous beacon; the others stand.
// Because a message no longer promises for every channel of its sender,
// a sender beacons within BeaconGap of its own messages, not only of its
// peers'.
//
// An atomic topic's messages are delivered below the topic's commit
// barrier: the minimum of its subscribers' announced frontiers (with the
// aggregation tree, the group's commit barrier, which is no higher), so
// a subscriber that falls behind holds back the atomic delivery of its
// own topics only. A topic in TotalOrder mode is delivered below the
// subscriber's own frontier. Delivery.Index counts a topic's messages
// from its Topic.Start+1.
//
// A view with topics ends at a [Cut] per channel: its receivers that
// stay report what they hold ([Core.Held], [Core.HeldTopics]), the cut
// is the minimum, and [Core.Finish] delivers the rest of it, so that the
// subscribers of an atomic topic that install the next view delivered
// the same messages of it in this one (virtual synchrony per topic).
//
// Records between members are encoded by [AppendRecord] and decoded by
// [DecodeRecord], which checks every field read from the network.
package ordering
