// Package rdma is Convoy's transport: reliable, ordered, connection-oriented
// two-sided unicast of blocks into buffers the receiver posted in advance,
// with the semantics RDMC (and everything above it) relies on.
//
// The model follows RDMA verbs over reliable connected queue pairs:
//
//   - An [Endpoint] is one node's attachment to the fabric. Between any two
//     nodes there is at most one underlying connection, shared by every
//     [QueuePair] opened between them; queue pairs are told apart by a
//     [StreamID] that both sides choose (multicast uses one stream per group
//     and channel).
//   - A receiver posts buffers with [QueuePair.PostRecv]; each incoming
//     transfer on that queue pair fills the oldest posted buffer, in order,
//     and completes with [Handler.RecvComplete] carrying the byte count and
//     the sender's 64-bit immediate value. A transfer that finds no posted
//     buffer, or one too small, fails the queue pair (receiver not ready is
//     a protocol error: senders wait for a ready signal first).
//   - [QueuePair.PostSend] queues a transfer; [Handler.SendComplete] says the
//     buffer may be reused. [QueuePair.Signal] sends a zero-length message
//     carrying only an immediate value; it consumes no posted buffer and is
//     what "ready for block" notices use.
//   - A failure that breaks a connection is reported once to every queue
//     pair on it through [Handler.Failed]; the queue pairs are then unusable.
//     Opening a new queue pair to the same peer makes a new connection.
//
// Backends: "tcp" (the default, a software emulation over one TCP
// connection per node pair) and "mem" (in-process, deterministic for a
// given seed, with fault injection for tests). Nothing above this package
// knows which one runs.
package rdma
