package rdma

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Errors of the fabric backend.
var (
	// ErrFabricUnavailable is returned by ListenFabric in a program built
	// without the fabric build tag (the default, which needs no cgo).
	ErrFabricUnavailable = errors.New("rdma: the fabric backend is not built in (build with -tags fabric and cgo)")
	// ErrFabricTLS is returned by ListenFabric for a FabricConfig with TLS
	// set: libfabric's providers do not encrypt or authenticate, and the
	// backend refuses to pretend otherwise.
	ErrFabricTLS = errors.New("rdma: the fabric backend has no TLS: it is meant for a trusted RDMA fabric")
)

// Defaults of FabricConfig.
const (
	// DefaultFabricProvider is libfabric's tcp provider, which runs on
	// any host: RDMA hardware wants "verbs".
	DefaultFabricProvider = "tcp"
	// DefaultFabricQueueDepth is the receive and send queue depth of a
	// stream's data endpoint: deeper than the few receives a multicast
	// group posts per peer, small enough for thousands of streams.
	DefaultFabricQueueDepth = 32
	// DefaultFabricCQSize is the size of the endpoint's completion queue,
	// which every stream's data endpoint and every peer's control
	// endpoint reserve their queue depths from.
	DefaultFabricCQSize = 1 << 16
	// DefaultFabricRegCacheBytes bounds the bytes of memory the endpoint
	// keeps registered (and, for Go memory, pinned) for reuse once no
	// transfer uses it: enough for the blocks of a few large messages.
	DefaultFabricRegCacheBytes = 256 << 20
)

// FabricConfig configures a fabric endpoint (ListenFabric). The zero value
// of every field but ID and Resolve is usable; see WithDefaults.
type FabricConfig struct {
	// ID is this node's id.
	ID NodeID
	// Provider names the libfabric provider, as fi_info -p takes it:
	// "verbs" on RDMA hardware, "tcp" anywhere (the one tested). It must
	// offer connected endpoints (FI_EP_MSG); utility providers that build
	// reliable-datagram endpoints ("verbs;ofi_rxm") do not apply.
	// Default DefaultFabricProvider.
	Provider string
	// ListenAddr is the address to listen on, host:port; with verbs, the
	// IP address of the RDMA device (IPoIB or RoCE). Default
	// DefaultListenAddr.
	ListenAddr string
	// Resolve returns the address (host:port) of a peer. As with tcp, the
	// node with the lower id connects, so Resolve is called only for
	// peers with a higher id; nil makes them unreachable.
	Resolve func(NodeID) (string, error)
	// MaxTransferBytes bounds one transfer. Default
	// DefaultMaxFrameBytes minus 24, as on tcp.
	MaxTransferBytes int
	// DialTimeout bounds connection setup, as TCPConfig.DialTimeout does.
	// Default DefaultDialTimeout.
	DialTimeout time.Duration
	// QueueDepth is the depth of the receive and of the send queue of a
	// stream's data endpoint (the provider's limit if lower): receives
	// and sends beyond it wait in the endpoint's memory. Default
	// DefaultFabricQueueDepth.
	QueueDepth int
	// CQSize is the completion queue's size. Open fails once the queues
	// of the open streams would exceed it. Default DefaultFabricCQSize.
	CQSize int
	// RegCacheBytes bounds the memory kept registered for reuse between
	// transfers. Default DefaultFabricRegCacheBytes; negative keeps
	// nothing once its transfers are done.
	RegCacheBytes int
	// TLS must be nil: the fabric backend has no TLS (ErrFabricTLS).
	TLS *tls.Config
	// Logger, OnConnError and MeterProvider are as in TCPConfig.
	Logger        *slog.Logger
	OnConnError   func(peer NodeID, err error)
	MeterProvider metric.MeterProvider
}

// WithDefaults returns c with every unset field given its default, or an
// error if a field is invalid.
func (c FabricConfig) WithDefaults() (FabricConfig, error) {
	if c.TLS != nil {
		return c, fmt.Errorf("%w: FabricConfig.TLS must be nil (use the tcp backend for TLS)", ErrFabricTLS)
	}
	if c.Provider == "" {
		c.Provider = DefaultFabricProvider
	}
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	switch {
	case c.MaxTransferBytes == 0:
		c.MaxTransferBytes = DefaultMaxFrameBytes - frameHeaderLen
	case c.MaxTransferBytes < 0:
		return c, errors.New("rdma: negative MaxTransferBytes")
	}
	switch {
	case c.DialTimeout == 0:
		c.DialTimeout = DefaultDialTimeout
	case c.DialTimeout < 0:
		return c, errors.New("rdma: negative DialTimeout")
	}
	switch {
	case c.QueueDepth == 0:
		c.QueueDepth = DefaultFabricQueueDepth
	case c.QueueDepth < 2:
		return c, fmt.Errorf("rdma: QueueDepth %d is below 2", c.QueueDepth)
	}
	switch {
	case c.CQSize == 0:
		c.CQSize = DefaultFabricCQSize
	case c.CQSize < 4*c.QueueDepth:
		return c, fmt.Errorf("rdma: CQSize %d is below four queue depths (%d)", c.CQSize, 4*c.QueueDepth)
	}
	if c.RegCacheBytes == 0 {
		c.RegCacheBytes = DefaultFabricRegCacheBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return c, nil
}
