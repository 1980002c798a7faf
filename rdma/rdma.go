package rdma

import (
	"context"
	"errors"
	"fmt"
)

// NodeID identifies a node on the fabric. IDs are chosen by the layer above
// (membership) and must be unique among the nodes that talk to each other.
type NodeID uint64

// StreamID names one queue pair between two nodes. Both sides open the same
// StreamID; many streams share one connection.
type StreamID uint64

// Errors reported by endpoints and queue pairs. Errors passed to
// [Handler.Failed] wrap one of these; compare with errors.Is.
var (
	// ErrClosed is returned by operations on a closed endpoint or queue pair.
	ErrClosed = errors.New("rdma: closed")
	// ErrConnectionLost means the connection carrying the queue pair broke
	// (peer crashed, network error, link broken by fault injection).
	ErrConnectionLost = errors.New("rdma: connection lost")
	// ErrPeerClosed means the peer closed its side of the queue pair.
	ErrPeerClosed = errors.New("rdma: queue pair closed by peer")
	// ErrProtocol means the peer sent something this node cannot accept: a
	// malformed or oversized frame, an unknown stream, a transfer with no
	// posted receive buffer or one larger than the buffer.
	ErrProtocol = errors.New("rdma: protocol violation")
	// ErrUnreachable means no connection to the peer could be made.
	ErrUnreachable = errors.New("rdma: peer unreachable")
	// ErrStreamInUse is returned by Open when a queue pair with the same
	// peer and stream is already open on this endpoint.
	ErrStreamInUse = errors.New("rdma: stream already open")
)

// Handler receives the completion events of one queue pair.
//
// Calls for one queue pair are serialized: no two run at the same time.
// Calls for different queue pairs may run concurrently. Handlers must not
// block for long (they run on the transport's goroutines) and must not call
// Close on their own queue pair; they may post sends, receives and signals
// on any queue pair.
type Handler interface {
	// RecvComplete reports that the posted receive wr was filled with n
	// bytes sent with immediate value imm.
	RecvComplete(wr uint64, n int, imm uint64)
	// SendComplete reports that the send wr has left this node and its
	// buffer may be reused. Sends complete in the order they were posted.
	SendComplete(wr uint64)
	// Signal reports a zero-length message from the peer carrying imm.
	Signal(imm uint64)
	// Failed reports that the queue pair has failed; it is called at most
	// once, and no other call for this queue pair starts after it. It is not
	// called for a failure that happens after Close.
	Failed(err error)
}

// QueuePair is one reliable, ordered stream of transfers to a single peer.
// Its methods are safe for concurrent use and never block on the network.
type QueuePair interface {
	// Peer returns the node at the other end.
	Peer() NodeID
	// Stream returns the stream id both sides opened.
	Stream() StreamID
	// PostRecv posts buf to receive the next incoming transfer. The buffer
	// belongs to the transport until RecvComplete(wr, ...) is called.
	PostRecv(buf []byte, wr uint64) error
	// PostSend queues buf for transfer with immediate value imm. The buffer
	// belongs to the transport until SendComplete(wr) is called. The peer
	// must have a receive posted of at least len(buf) bytes when it arrives.
	PostSend(buf []byte, imm uint64, wr uint64) error
	// Signal queues a zero-length message carrying imm.
	Signal(imm uint64) error
	// Close releases the queue pair and tells the peer (best effort). No
	// new handler calls start after Close returns; calls already running
	// may still finish. Pending sends and receives are abandoned.
	Close() error
}

// Endpoint is one node's attachment to the fabric.
type Endpoint interface {
	// ID returns this node's id.
	ID() NodeID
	// Open opens the queue pair for stream to peer. It does not wait for
	// the connection: sends, signals and receives may be posted at once and
	// go out when the connection is up. If no connection can be made,
	// Failed reports ErrUnreachable. The context bounds only the setup work
	// Open itself does.
	Open(ctx context.Context, peer NodeID, stream StreamID, h Handler) (QueuePair, error)
	// Close closes every queue pair and connection of this endpoint.
	Close() error
}

// ProtocolError describes bad input from a peer. It wraps ErrProtocol.
type ProtocolError struct {
	Peer   NodeID
	Stream StreamID
	Reason string
	// kind classifies Reason for the endpoint's metrics.
	kind rejectReason
}

// protocolError returns the error of bad input of kind kind from peer on
// stream, described by reason.
func protocolError(peer NodeID, stream StreamID, kind rejectReason, reason string) *ProtocolError {
	return &ProtocolError{Peer: peer, Stream: stream, Reason: reason, kind: kind}
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("rdma: protocol violation from node %d (stream %d): %s", e.Peer, e.Stream, e.Reason)
}

// Unwrap returns ErrProtocol.
func (e *ProtocolError) Unwrap() error { return ErrProtocol }
