package main

import (
	"fmt"
	"log/slog"

	"github.com/convoy-gcs/convoy/rdma"
)

// Transports the multicast benchmark runs on.
const (
	transportTCP    = "tcp"
	transportFabric = "fabric"
)

// listenBench starts node id's endpoint on transport at addr and returns
// it with the address it listens on. provider applies to fabric only,
// sockBuf to tcp only.
func listenBench(transport, provider string, id rdma.NodeID, addr string, resolve func(rdma.NodeID) (string, error), block, sockBuf int, log *slog.Logger) (rdma.Endpoint, string, error) {
	switch transport {
	case transportTCP:
		ep, err := rdma.ListenTCP(rdma.TCPConfig{
			ID:                id,
			ListenAddr:        addr,
			Resolve:           resolve,
			MaxFrameBytes:     frameBytes(block),
			SocketBufferBytes: sockBuf,
			Logger:            log,
		})
		if err != nil {
			return nil, "", err
		}
		return ep, ep.Addr().String(), nil
	case transportFabric:
		ep, err := rdma.ListenFabric(rdma.FabricConfig{
			ID:               id,
			Provider:         provider,
			ListenAddr:       addr,
			Resolve:          resolve,
			MaxTransferBytes: frameBytes(block),
			Logger:           log,
		})
		if err != nil {
			return nil, "", err
		}
		log.Debug("fabric endpoint", "provider", ep.Provider(), "addr", ep.Addr())
		return ep, ep.Addr(), nil
	}
	return nil, "", fmt.Errorf("unknown transport %q", transport)
}
