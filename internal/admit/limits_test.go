package admit

import (
	"testing"

	"github.com/convoy-gcs/convoy"
)

func TestLimits(t *testing.T) {
	tests := []struct {
		name                                string
		cfg                                 convoy.Config
		maxRequests, maxBytes, def, largest int
		wantRequests, wantBytes             int
	}{
		{"defaults", convoy.Config{}, 0, 0, 256, 1 << 10, 256, convoy.DefaultWindowBytes},
		{"window of fewer messages", convoy.Config{WindowMessages: 100, WindowBytes: 1 << 20}, 0, 0, 256, 1 << 10, 100, 1 << 20},
		{"largest request above the window's bytes", convoy.Config{WindowBytes: 1 << 20}, 0, 0, 256, 4 << 20, 256, 4 << 20},
		{"set by the service", convoy.Config{WindowMessages: 100}, 7, 9, 256, 4 << 20, 7, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, b := Limits(tt.cfg, tt.maxRequests, tt.maxBytes, tt.def, tt.largest)
			if r != tt.wantRequests || b != tt.wantBytes {
				t.Errorf("Limits = %d requests, %d bytes; want %d, %d", r, b, tt.wantRequests, tt.wantBytes)
			}
		})
	}
}
