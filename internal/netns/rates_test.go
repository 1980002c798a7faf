package netns

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHostLimitBytes(t *testing.T) {
	cfg, err := withDefaults(Config{Hosts: 1, RateMbit: 700})
	if err != nil {
		t.Fatal(err)
	}
	if got := hostLimitBytes(700); got != cfg.LimitBytes {
		t.Errorf("hostLimitBytes(700) = %d, want the default limit %d", got, cfg.LimitBytes)
	}
}

func TestHostFlowQueueBytes(t *testing.T) {
	for _, tt := range []struct{ rate, want int }{
		{0, 64 << 10},
		{100, 64 << 10}, // 12.5 KB a millisecond: the floor
		{1000, 125_000},
		{10_000, 1_250_000},
	} {
		if got := hostFlowQueueBytes(tt.rate); got != tt.want {
			t.Errorf("hostFlowQueueBytes(%d) = %d, want %d", tt.rate, got, tt.want)
		}
	}
	cfg, err := withDefaults(Config{Hosts: 1, RateMbit: 700})
	if err != nil {
		t.Fatal(err)
	}
	if got := hostFlowQueueBytes(700); got != cfg.FlowQueueBytes {
		t.Errorf("hostFlowQueueBytes(700) = %d, want the default %d", got, cfg.FlowQueueBytes)
	}
}

// TestSetHostRate builds a switch shaped to 20 Mbit/s, raises two hosts'
// links to 1000 Mbit/s, and checks the qdiscs, the hosts' bounds on what
// a connection may queue, and that a transfer between those hosts is much
// faster than 20 Mbit/s allows.
func TestSetHostRate(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sw, err := New(ctx, Config{Hosts: 3, RateMbit: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sw.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, bad := range []struct{ host, rate int }{{-1, 100}, {3, 100}, {0, 0}, {0, -5}} {
		if err := sw.SetHostRate(ctx, bad.host, bad.rate); err == nil {
			t.Errorf("SetHostRate(%d, %d) succeeded", bad.host, bad.rate)
		}
	}
	for _, h := range []int{0, 1} {
		if err := sw.SetHostRate(ctx, h, 1000); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct{ ns, dev, want string }{
		{sw.Hosts()[0].Namespace, "eth0", "1Gbit"},
		{sw.sw, "p1", "1Gbit"},
		{sw.Hosts()[2].Namespace, "eth0", "20Mbit"},
		{sw.sw, "p2", "20Mbit"},
	} {
		out, err := exec.Command("tc", "-n", q.ns, "qdisc", "show", "dev", q.dev).CombinedOutput()
		if err != nil {
			t.Fatalf("tc qdisc show: %v: %s", err, out)
		}
		if !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), "rate "+q.want) {
			t.Errorf("%s %s: %q, want a tbf at %s", q.ns, q.dev, out, q.want)
		}
	}

	for _, f := range []struct{ host, want int }{{0, 125_000}, {1, 125_000}, {2, minFlowQueueBytes}} {
		if got := flowQueue(t, sw, f.host); got != f.want {
			t.Errorf("host %d: tcp_limit_output_bytes %d, want %d", f.host, got, f.want)
		}
	}

	// 4 MB at 20 Mbit/s would take 1.6 s; at 1000 Mbit/s it takes ~0.03 s.
	const size = 4_000_000
	secs := transfer(ctx, t, sw, 0, 1, size)
	t.Logf("%d bytes in %.3f s between reshaped hosts", size, secs)
	if secs > 0.8 {
		t.Errorf("%d bytes took %.3f s: the new rate is not in effect", size, secs)
	}
}

// transfer sends size bytes from host `from` to a listener on host `to`
// with the helper processes and returns the sender's time.
func transfer(ctx context.Context, t *testing.T, sw *Switch, to, from, size int) float64 {
	t.Helper()
	addr := sw.Hosts()[to].Addr.String() + ":7000"
	server := sw.Command(ctx, to, os.Args[0])
	server.Env = append(os.Environ(), helperEnv+"=listen "+addr)
	server.Stderr = os.Stderr
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Wait()
	defer server.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("server: %q, %v", line, err)
	}
	client := sw.Command(ctx, from, os.Args[0])
	client.Env = append(os.Environ(), helperEnv+"=dial "+addr+" "+strconv.Itoa(size))
	client.Stderr = os.Stderr
	res, err := client.Output()
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	var n int
	var secs float64
	if _, err := fmt.Sscan(string(res), &n, &secs); err != nil {
		t.Fatalf("client output %q: %v", res, err)
	}
	if n != size {
		t.Errorf("server received %d bytes, want %d", n, size)
	}
	return secs
}
