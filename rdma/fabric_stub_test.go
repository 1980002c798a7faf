//go:build !fabric

package rdma

import (
	"errors"
	"testing"
)

// Without the fabric build tag the backend is absent, and says how to get
// it.
func TestFabricUnavailable(t *testing.T) {
	ep, err := ListenFabric(FabricConfig{ID: 1})
	if !errors.Is(err, ErrFabricUnavailable) || ep != nil {
		t.Fatalf("ListenFabric = %v, %v, want ErrFabricUnavailable", ep, err)
	}
}
