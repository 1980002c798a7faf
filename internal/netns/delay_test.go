package netns

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDelay builds a two-host switch and checks, with UDP datagrams that
// carry the time they were sent, that a delay rule holds every datagram
// from host 0 to host 1 for at least the delay less the jitter, and lets
// all of them through; and that Heal removes the rule.
func TestDelay(t *testing.T) {
	if err := CheckDelay(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sw, err := New(ctx, Config{Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Error(err)
		}
	})
	var rx net.PacketConn
	if err := sw.InHost(1, func() error {
		var err error
		rx, err = net.ListenPacket("udp4", sw.Hosts()[1].Addr.String()+":7000")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := sw.Dialer(0, &net.Dialer{})(ctx, "udp4", rx.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()

	// least returns the shortest time n datagrams took from host 0 to
	// host 1, and how many arrived.
	least := func(n int) (time.Duration, int) {
		t.Helper()
		for range n {
			if _, err := tx.Write(binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		shortest, got := time.Hour, 0
		buf := make([]byte, 64)
		for got < n {
			rx.SetReadDeadline(time.Now().Add(2 * time.Second))
			k, _, err := rx.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil || k != 8 {
				t.Fatalf("read: %d bytes, %v", k, err)
			}
			shortest = min(shortest, time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(buf)))))
			got++
		}
		return shortest, got
	}
	if _, got := least(10); got != 10 {
		t.Fatalf("before any delay: %d of 10 datagrams arrived", got)
	}
	for _, r := range []DelayRule{
		{From: 0, To: []int{1}, Delay: 100 * time.Millisecond},
		{From: 0, To: []int{1}, Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond},
	} {
		if err := sw.Delay(ctx, 1, r); err != nil {
			t.Fatal(err)
		}
		shortest, got := least(50)
		if got != 50 {
			t.Errorf("delay %v±%v: %d of 50 datagrams arrived", r.Delay, r.Jitter, got)
		}
		if shortest < r.Delay-r.Jitter {
			t.Errorf("delay %v±%v: a datagram arrived after %v", r.Delay, r.Jitter, shortest)
		}
		t.Logf("delay %v±%v: the fastest of %d datagrams took %v", r.Delay, r.Jitter, got, shortest)
	}
	if err := sw.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", sw.Hosts()[0].Namespace, iptables, "-t", "mangle", "-S", "OUTPUT").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if strings.Contains(string(out), "NFQUEUE") {
		t.Errorf("a delay rule is left after Heal:\n%s", out)
	}
	if _, got := least(10); got != 10 {
		t.Errorf("healed: %d of 10 datagrams arrived", got)
	}
}

// TestDelayArguments checks that Delay refuses rules that name no host
// of the switch, two rules for one host, or a negative delay, before it
// needs any tool (so it runs everywhere).
func TestDelayArguments(t *testing.T) {
	s := &Switch{hosts: make([]Host, 3), created: []string{"x"}}
	for _, rules := range [][]DelayRule{
		{{From: 3, To: []int{0}}},
		{{From: 0, To: []int{-1}}},
		{{From: 0, To: []int{1}}, {From: 0, To: []int{2}}},
		{{From: 0, To: []int{1}, Delay: -time.Millisecond}},
	} {
		if err := s.Delay(context.Background(), 1, rules...); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("Delay(%+v) = %v, want a refusal of the rules", rules, err)
		}
	}
}
