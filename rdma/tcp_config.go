package rdma

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Defaults of TCPConfig.
const (
	// DefaultListenAddr keeps an endpoint private to the host unless told
	// otherwise.
	DefaultListenAddr = "127.0.0.1:0"
	// DefaultDialTimeout bounds connection setup: dialing, the TLS and
	// transport handshakes, and, on the node that waits to be dialed, the
	// wait for the peer's connection. Long enough for a loaded host, short
	// enough that a dead peer is reported promptly.
	DefaultDialTimeout = 5 * time.Second
	// DefaultUnsentBytes is TCPConfig.UnsentBytes's default: a quarter of
	// a multicast block of the default size, enough to keep the link busy
	// while the writer wakes up.
	DefaultUnsentBytes = 128 << 10
)

// TCPConfig configures a tcp endpoint. The zero value of every field but ID
// and Resolve is usable; see WithDefaults.
type TCPConfig struct {
	// ID is this node's id.
	ID NodeID
	// ListenAddr is the address to listen on, host:port. Default
	// DefaultListenAddr.
	ListenAddr string
	// Resolve returns the address of a peer. Between two nodes, the one with
	// the lower id dials, so Resolve is called only for peers with a higher
	// id. If it is nil, dialing fails and such peers are unreachable. It may
	// be called from several goroutines at once. It is called again as each
	// queue pair to a peer opens: a connection this node dialed to an
	// address Resolve no longer gives (the peer restarted elsewhere, and
	// the process it left behind may still answer there) is dropped,
	// failing the queue pairs on it, and the peer dialed where it is now.
	Resolve func(NodeID) (string, error)
	// MaxFrameBytes bounds one frame, header included: the largest transfer
	// is MaxFrameBytes minus the 24-byte header. A peer that sends a bigger
	// frame is cut off. Default DefaultMaxFrameBytes.
	MaxFrameBytes int
	// DialTimeout bounds connection setup. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// SocketBufferBytes, if positive, sets the kernel send and receive
	// buffer sizes of every connection. Zero leaves the system's automatic
	// tuning in place.
	SocketBufferBytes int
	// UnsentBytes bounds the data a connection keeps queued in the kernel
	// but not yet sent (TCP_NOTSENT_LOWAT). A send completes once its bytes
	// are handed to the kernel, so a small bound makes completions follow
	// the link: the next block of a multicast schedule leaves right after
	// the previous one instead of sharing the link with it. Default
	// DefaultUnsentBytes; negative leaves the kernel's default.
	UnsentBytes int
	// TLS, if set, wraps every connection in TLS with this configuration,
	// as client on the dialing side and as server on the other. Peers
	// authenticate each other: on the server side a ClientAuth of
	// tls.NoClientCert (the zero value) is raised to
	// tls.RequireAndVerifyClientCert, and other settings are used as given.
	// On the client side an empty ServerName is set to the host of the
	// peer's address.
	TLS *tls.Config
	// VerifyPeer, with TLS, checks that the peer's certificate entitles it
	// to the id it claims in the handshake, on both sides of every
	// connection; an error refuses the connection (a *ProtocolError to
	// OnConnError). Default: the peer's certificate must name the id as a
	// URI subject alternative name (MemberURI, CertifiesID), so that a
	// certificate the CA signed for one member cannot pass for another.
	VerifyPeer func(id NodeID, cs tls.ConnectionState) error
	// Logger receives the endpoint's logs. Default: discard.
	Logger *slog.Logger
	// OnConnError, if set, is called once for every connection that breaks
	// or is refused, with the peer (0 if unknown) and the reason; bad input
	// from the peer is a *ProtocolError. It is not called for connections
	// closed by Close. It runs on the transport's goroutines and must not
	// block.
	OnConnError func(peer NodeID, err error)
	// MeterProvider provides the meter for the endpoint's metrics. Default:
	// a no-op provider.
	MeterProvider metric.MeterProvider
}

// WithDefaults returns c with every unset field given its default, or an
// error if a field is invalid.
func (c TCPConfig) WithDefaults() (TCPConfig, error) {
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	switch {
	case c.MaxFrameBytes == 0:
		c.MaxFrameBytes = DefaultMaxFrameBytes
	case c.MaxFrameBytes < frameHeaderLen || int64(c.MaxFrameBytes) > math.MaxUint32:
		return c, fmt.Errorf("rdma: MaxFrameBytes %d out of range [%d, %d]", c.MaxFrameBytes, frameHeaderLen, uint64(math.MaxUint32))
	}
	switch {
	case c.DialTimeout == 0:
		c.DialTimeout = DefaultDialTimeout
	case c.DialTimeout < 0:
		return c, errors.New("rdma: negative DialTimeout")
	}
	if c.UnsentBytes == 0 {
		c.UnsentBytes = DefaultUnsentBytes
	}
	if c.SocketBufferBytes < 0 {
		return c, errors.New("rdma: negative SocketBufferBytes")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return c, nil
}

// maxPayload is the largest transfer a frame can carry.
func (c *TCPConfig) maxPayload() int { return c.MaxFrameBytes - frameHeaderLen }
