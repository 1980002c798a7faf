package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPick: the ports are distinct and free, and drawn below the
// system's range of ephemeral ports where it says what that is.
func TestPick(t *testing.T) {
	const n = 8
	ports, err := Pick("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != n {
		t.Fatalf("%d ports, want %d", len(ports), n)
	}
	lo, known := EphemeralLow()
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if known && (p < MinPicked || p >= lo) {
			t.Errorf("port %d: want one in [%d, %d), below the ephemeral ports", p, MinPicked, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

// TestPickerNeverRepeats picks one port at a time, each released before
// the next, as many times as make a repeat all but certain for picks
// without memory (below the ephemeral range of Linux's default, 22,768
// ports: a repeat among 400 draws in about 97 of 100 runs); once about
// 355 ports were handed out, the picker takes the system's own.
func TestPickerNeverRepeats(t *testing.T) {
	p := NewPicker("127.0.0.1")
	seen := map[int]bool{}
	for range 400 {
		ports, err := p.Pick(1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 1 {
			t.Fatalf("%d ports, want 1", len(ports))
		}
		for _, port := range ports {
			if seen[port] {
				t.Fatalf("port %d handed out twice", port)
			}
			seen[port] = true
		}
	}
}

// TestPickerAddr: Addr gives an address on the picker's host, free to
// listen on, whose port the picker does not hand out again.
func TestPickerAddr(t *testing.T) {
	p := NewPicker("127.0.0.1")
	addr, err := p.Addr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if host != "127.0.0.1" {
		t.Errorf("host %q, want 127.0.0.1", host)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s is not free: %v", addr, err)
	}
	l.Close()
	for range 100 {
		ports, err := p.Pick(1)
		if err != nil {
			t.Fatal(err)
		}
		if strconv.Itoa(ports[0]) == port {
			t.Fatalf("port %s handed out again after Addr", port)
		}
	}
}
