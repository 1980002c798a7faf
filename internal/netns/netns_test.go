package netns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a helper process (see TestMain)
// instead of running tests: "listen ADDR" or "dial ADDR BYTES".
const helperEnv = "NETNS_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		if err := helper(strings.Fields(h)); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper is the body of a helper process. The listener prints "ready",
// accepts one connection, reads everything until EOF and answers with the
// byte count. The dialer sends BYTES bytes, half-closes, reads the answer
// and prints "<count> <seconds>".
func helper(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("bad helper arguments %q", args)
	}
	switch args[0] {
	case "listen":
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Println("ready")
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c, "%d\n", n)
		return err
	case "dial":
		size, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		start := time.Now()
		c, err := net.DialTimeout("tcp", args[1], 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write(make([]byte, size)); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		fmt.Printf("%s %f\n", strings.TrimSpace(line), time.Since(start).Seconds())
		return nil
	}
	return fmt.Errorf("unknown helper %q", args[0])
}

func TestDefaults(t *testing.T) {
	cfg, err := withDefaults(Config{Hosts: 3, RateMbit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Name, "cv") || len(cfg.Name) != 10 {
		t.Errorf("name %q, want cv + 8 hex digits", cfg.Name)
	}
	if want := 1000*125000/20 + 65536; cfg.LimitBytes != want {
		t.Errorf("limit %d, want %d", cfg.LimitBytes, want)
	}
	if cfg.BurstBytes != DefaultBurstBytes {
		t.Errorf("burst %d", cfg.BurstBytes)
	}
	if want := 125_000; cfg.FlowQueueBytes != want {
		t.Errorf("flow queue %d, want %d (1 ms at 1000 Mbit/s)", cfg.FlowQueueBytes, want)
	}
	other, err := withDefaults(Config{Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if other.Name == cfg.Name {
		t.Errorf("two runs got the same name %q", cfg.Name)
	}
	for _, bad := range []Config{
		{Hosts: 0},
		{Hosts: 2, RateMbit: -1},
		{Hosts: 2, RateMbit: 100, FlowQueueBytes: -1},
		{Hosts: 255},
		{Hosts: 2, Subnet: netip.MustParsePrefix("fd00::/64")},
	} {
		if _, err := withDefaults(bad); err == nil {
			t.Errorf("withDefaults(%+v) succeeded", bad)
		}
	}
}

// TestSwitch builds a two-host switch shaped to 100 Mbit/s, checks that a
// TCP connection from one host reaches the other and that its throughput
// is bounded by the shaping, then removes the switch.
func TestSwitch(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sw, err := New(ctx, Config{Hosts: 2, RateMbit: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sw.Close(); err != nil {
			t.Error(err)
		}
		if out, err := exec.Command("ip", "netns", "list").Output(); err != nil {
			t.Error(err)
		} else if strings.Contains(string(out), sw.Name()) {
			t.Errorf("namespaces left after Close:\n%s", out)
		}
	}()
	addr := sw.Hosts()[0].Addr.String() + ":7000"

	server := sw.Command(ctx, 0, os.Args[0])
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

	// 2 MB at 100 Mbit/s takes ~0.14 s beyond the 256 KiB burst; the
	// unshaped veth would take milliseconds.
	const size = 2_000_000
	client := sw.Command(ctx, 1, os.Args[0])
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
	t.Logf("%d bytes in %.3f s through the shaped switch", n, secs)
	if n != size {
		t.Errorf("server received %d bytes, want %d", n, size)
	}
	if secs < 0.1 {
		t.Errorf("%d bytes took %.3f s: shaping to 100 Mbit/s not in effect", size, secs)
	}
	if err := server.Wait(); err != nil {
		t.Errorf("server: %v", err)
	}
	for i := range sw.Hosts() {
		if got := flowQueue(t, sw, i); got != minFlowQueueBytes {
			t.Errorf("host %d: tcp_limit_output_bytes %d, want %d", i, got, minFlowQueueBytes)
		}
	}
}

// flowQueue returns host i's net.ipv4.tcp_limit_output_bytes.
func flowQueue(t *testing.T, sw *Switch, i int) int {
	t.Helper()
	var out []byte
	err := sw.InHost(i, func() error {
		var err error
		out, err = os.ReadFile(flowQueueSysctl)
		return err
	})
	if err != nil {
		t.Fatalf("host %d: %v", i, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("host %d: %s: %q: %v", i, flowQueueSysctl, out, err)
	}
	return n
}
