//go:build !fabric

package rdma

import "context"

// FabricBuilt reports whether this program was built with the fabric
// backend (the fabric build tag).
const FabricBuilt = false

// FabricEndpoint is an endpoint of the fabric backend: RDMA through
// libfabric, each peer with a control connection and each queue pair with
// a connected endpoint of its own (see the package documentation). It
// exists in programs built with the fabric build tag; in this one, built
// without it, ListenFabric returns ErrFabricUnavailable.
type FabricEndpoint struct{}

var _ Endpoint = (*FabricEndpoint)(nil)

// ListenFabric opens cfg.Provider's fabric and listens on cfg.ListenAddr,
// in a program built with the fabric build tag. In this one, built
// without it, it returns ErrFabricUnavailable (or the mistake in cfg,
// such as ErrFabricTLS).
func ListenFabric(cfg FabricConfig) (*FabricEndpoint, error) {
	if _, err := cfg.WithDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrFabricUnavailable
}

// ID returns 0.
func (e *FabricEndpoint) ID() NodeID { return 0 }

// Addr returns "".
func (e *FabricEndpoint) Addr() string { return "" }

// Provider returns "".
func (e *FabricEndpoint) Provider() string { return "" }

// Open returns ErrFabricUnavailable.
func (e *FabricEndpoint) Open(context.Context, NodeID, StreamID, Handler) (QueuePair, error) {
	return nil, ErrFabricUnavailable
}

// Close returns nil.
func (e *FabricEndpoint) Close() error { return nil }
