package rdma

import (
	"crypto/tls"
	"errors"
	"testing"
)

func TestFabricConfigDefaults(t *testing.T) {
	c, err := FabricConfig{ID: 1}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Provider != "tcp" || c.ListenAddr != DefaultListenAddr || c.QueueDepth != DefaultFabricQueueDepth ||
		c.CQSize != DefaultFabricCQSize || c.DialTimeout != DefaultDialTimeout || c.Logger == nil || c.MeterProvider == nil ||
		c.MaxTransferBytes != DefaultMaxFrameBytes-frameHeaderLen {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range []FabricConfig{
		{QueueDepth: 1},
		{QueueDepth: 64, CQSize: 100},
		{MaxTransferBytes: -1},
		{DialTimeout: -1},
	} {
		if _, err := bad.WithDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// The fabric backend has no TLS, and says so rather than run without it.
func TestFabricRefusesTLS(t *testing.T) {
	_, err := ListenFabric(FabricConfig{ID: 1, TLS: &tls.Config{}})
	if !errors.Is(err, ErrFabricTLS) {
		t.Fatalf("ListenFabric with TLS = %v, want ErrFabricTLS", err)
	}
}
