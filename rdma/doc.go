// Package rdma is Convoy's transport: reliable, ordered, connection-oriented
// two-sided unicast of blocks into buffers the receiver posted in advance,
// with the semantics RDMC (and everything above it) relies on.
//
// The model follows RDMA verbs over reliable connected queue pairs:
//
//   - An [Endpoint] is one node's attachment to the fabric. Between any two
//     nodes there is at most one underlying connection, shared by every
//     [QueuePair] opened between them (on fabric, a control connection with
//     a data endpoint per queue pair under it); queue pairs are told apart
//     by a [StreamID] that both sides choose (multicast uses one stream per
//     group and channel).
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
// connection per node pair), "mem" (in-process, deterministic for a given
// seed, with fault injection for tests) and "fabric" (RDMA through
// libfabric, [ListenFabric]: cgo, built only with the build tag fabric;
// its "verbs" provider drives RDMA NICs, its "tcp" provider any host).
// Nothing above this package knows which one runs.
//
// A receiver posts buffers, then tells the sender it is ready; the sender
// sends only after that:
//
//	ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: 1, Resolve: addrOf})
//	...
//	qp, err := ep.Open(ctx, 2, stream, handler)
//	qp.PostRecv(buf, 1)
//	qp.Signal(readyForBlock)
//	// handler.RecvComplete(1, n, imm) reports the block.
//
// # Implementation notes
//
// Handler calls go through a per-queue-pair event queue drained by
// whichever transport goroutine finds it idle, so calls for one queue pair
// never overlap and keep their order, no goroutine ever waits for another's
// handler, and handlers may post work anywhere. Endpoint.Close waits for the
// transport's goroutines, so it must not be called from a handler.
//
// tcp: between two nodes the one with the lower id dials and the other
// waits up to DialTimeout for it; each side first sends a hello (magic,
// version, node id). Frames have a 24-byte header (type, reserved zero
// bytes, length, stream, immediate) described in frame.go. One writer
// goroutine per connection gathers queued frames into vectored writes; one
// reader goroutine reads through a 64 KiB buffer, so that the frames that
// arrived together take one read, while a large payload's reads of 64 KiB
// or more go from the socket straight into its posted buffer. Bad input
// from a peer (oversized frame, unknown type, non-zero reserved bytes,
// data for a stream never opened) closes the connection with a
// *ProtocolError; a transfer with no posted buffer fails only its queue
// pair. Frames for streams closed here are dropped, and
// signals for streams not yet opened wait for Open, both within bounds.
//
// fabric: each pair of nodes has a control connection (the lower id
// connects; the hello in its connection data names both nodes), and each
// queue pair a connected data endpoint of its own, made once both sides
// have opened the stream. A receive queue is one FIFO per endpoint, so
// only an endpoint per stream lets a transfer land straight in the buffer
// its stream posted (RDMC too creates queue pairs for each group);
// signals, and credits announcing each posted buffer, go on
// the control connection into slots of its own, and sequence numbers
// merge the two into one ordered stream. A sender sends only against a
// credit, so no transfer finds its receive queue empty; it announces one
// it cannot send with a notice, which the receiver checks where the
// transfer would have arrived, failing its queue pair with a
// *ProtocolError as tcp does. Buffers are registered with the NIC (and
// pinned) once and the registration reused. There is no TLS: the fabric
// backend is for trusted RDMA fabrics. fabric_wire.go describes the
// protocol.
//
// mem: a MemFabric keeps each direction of each connection as a FIFO and
// picks the next connection to deliver from at random, from a seed. In
// Manual mode nothing runs until the caller steps the fabric, and delivery
// order then depends only on the seed and the calls made.
package rdma
