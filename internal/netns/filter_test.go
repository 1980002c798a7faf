package netns

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// quietRead is how long a receiver waits for another datagram before it
// counts what it got.
const quietRead = 500 * time.Millisecond

// TestFilter builds a three-host switch and checks, with UDP datagrams
// sent and received by this process through InHost and Dialer, a one-way
// cut (host 0 to host 1 dropped, host 1 to host 0 and host 0 to host 2
// still through), random loss (30% of host 2's datagrams to host 1), and
// Heal.
func TestFilter(t *testing.T) {
	if err := CheckPartition(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sw, err := New(ctx, Config{Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Error(err)
		}
	})
	// One receiving socket per host, opened inside it.
	rx := make([]net.PacketConn, 3)
	for h := range rx {
		err := sw.InHost(h, func() error {
			var err error
			rx[h], err = net.ListenPacket("udp4", sw.Hosts()[h].Addr.String()+":7000")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer rx[h].Close()
	}
	// sent returns how many of n datagrams from host from reach host to.
	sent := func(from, to, n int) int {
		t.Helper()
		c, err := sw.Dialer(from, &net.Dialer{})(ctx, "udp4", sw.Hosts()[to].Addr.String()+":7000")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Receive while sending, so that the socket's buffer never
		// overflows.
		got := make(chan int, 1)
		go func() {
			n := 0
			buf := make([]byte, 64)
			for {
				rx[to].SetReadDeadline(time.Now().Add(quietRead))
				if _, _, err := rx[to].ReadFrom(buf); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Error(err)
					}
					got <- n
					return
				}
				n++
			}
		}()
		for i := range n {
			if _, err := c.Write([]byte("datagram")); err != nil {
				t.Fatal(err)
			}
			if i%10 == 9 {
				// A pause, so that no queue on the way overflows.
				time.Sleep(time.Millisecond)
			}
		}
		return <-got
	}

	// reach waits until a datagram from host from reaches host to: the
	// first ones wait for the hosts' hardware addresses, which a loaded
	// machine may take longer to resolve than quietRead.
	reach := func(from, to int) {
		t.Helper()
		c, err := sw.Dialer(from, &net.Dialer{})(ctx, "udp4", sw.Hosts()[to].Addr.String()+":7000")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 64)
		for deadline := time.Now().Add(30 * time.Second); ; {
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			rx[to].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, err := rx[to].ReadFrom(buf); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no datagram from host %d reached host %d in 30s", from, to)
			}
		}
		// Drain the greetings still on their way.
		for {
			rx[to].SetReadDeadline(time.Now().Add(quietRead))
			if _, _, err := rx[to].ReadFrom(buf); err != nil {
				return
			}
		}
	}

	// Before any filter, and so that every host knows the others'
	// hardware addresses: an ARP request dropped at random would hold
	// back every datagram behind it.
	for _, p := range [][2]int{{0, 1}, {1, 0}, {0, 2}, {2, 1}} {
		reach(p[0], p[1])
		if got := sent(p[0], p[1], 50); got != 50 {
			t.Fatalf("before any filter: %d of 50 datagrams from host %d reached host %d", got, p[0], p[1])
		}
	}
	if err := sw.Filter(ctx, Rule{From: []int{0}, To: []int{1}}, Rule{From: []int{2}, To: []int{1}, Percent: 30}); err != nil {
		t.Fatal(err)
	}
	if got := sent(0, 1, 50); got != 0 {
		t.Errorf("cut from host 0 to host 1: %d of 50 datagrams went through", got)
	}
	if got := sent(1, 0, 50); got != 50 {
		t.Errorf("cut from host 0 to host 1: %d of 50 datagrams from host 1 reached host 0", got)
	}
	if got := sent(0, 2, 50); got != 50 {
		t.Errorf("cut from host 0 to host 1: %d of 50 datagrams from host 0 reached host 2", got)
	}
	// 30% of 2000: 600 lost, give or take 20 (one standard deviation).
	if got := sent(2, 1, 2000); got < 1200 || got > 1600 {
		t.Errorf("30%% loss from host 2 to host 1: %d of 2000 datagrams went through", got)
	} else {
		t.Logf("30%% loss: %d of 2000 datagrams went through", got)
	}
	if err := sw.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sent(0, 1, 50); got != 50 {
		t.Errorf("healed: %d of 50 datagrams from host 0 reached host 1", got)
	}
}

// TestFilterArguments checks that Filter refuses rules that name no
// host of the switch or a share beyond 100%.
func TestFilterArguments(t *testing.T) {
	s := &Switch{hosts: make([]Host, 3)}
	for _, r := range []Rule{
		{From: []int{3}, To: []int{0}},
		{From: []int{0}, To: []int{-1}},
		{From: []int{0}, To: []int{1}, Percent: 101},
		{From: []int{0}, To: []int{1}, Percent: -1},
	} {
		if err := s.Filter(context.Background(), r); err == nil {
			t.Errorf("Filter(%+v) succeeded", r)
		}
	}
}
