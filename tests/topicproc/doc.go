// Package topicproc tests Convoy's topics (pub/sub within a group) with
// every member of a group in its own operating-system process, talking
// over loopback TCP: its multicast groups per publisher and subscriber
// set are real RDMC groups between processes.
//
// The test re-executes its own binary once per member. Each member opens
// a group with fixed membership and topics, publishes on every topic
// (subscribed or not) and sends to the group, delivers what reaches it,
// and reports on standard output the sequence of messages it delivered;
// the test then checks the guarantees of topics on the sequences:
// nothing delivered at a member that does not subscribe, every message
// delivered once by each of its receivers, FIFO per sender and topic,
// the same order and indexes of a topic's messages at every subscriber,
// and any two messages two members both delivered in the same relative
// order at both. Run it with:
//
//	go test ./tests/topicproc
//
// It is skipped with -short.
package topicproc
