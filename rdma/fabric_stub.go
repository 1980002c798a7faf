//go:build !fabric

package rdma

import "context"

// FabricBuilt reports whether this program was built with the fabric
// backend (the fabric build tag).
const FabricBuilt = false

// FabricEndpoint is an endpoint of the fabric backend. This program was
// built without it: ListenFabric returns ErrFabricUnavailable.
type FabricEndpoint struct{}

var _ Endpoint = (*FabricEndpoint)(nil)

// ListenFabric returns ErrFabricUnavailable: the program was built without
// the fabric build tag.
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
