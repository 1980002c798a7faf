package main

import (
	"net"
	"testing"
)

// TestFreePorts: the ports are distinct and free, and drawn below the
// system's range of ephemeral ports where it says what that is.
func TestFreePorts(t *testing.T) {
	const n = 8
	ports, err := freePorts("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != n {
		t.Fatalf("%d ports, want %d", len(ports), n)
	}
	lo, known := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if known && (p < minPickedPort || p >= lo) {
			t.Errorf("port %d: want one in [%d, %d), below the ephemeral ports", p, minPickedPort, lo)
		}
		l, err := net.Listen("tcp", hostPort("127.0.0.1", p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
