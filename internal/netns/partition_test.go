package netns

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// probeEnv makes the test binary, run with -test.run=^TestHelperProbe$,
// act as a probe inside a host: "serve ADDR" accepts and closes
// connections until killed, printing "ready" once listening; "dial ADDR
// TIMEOUT" prints "ok" if a connection to ADDR succeeds within TIMEOUT,
// else "unreachable".
const probeEnv = "NETNS_TEST_PROBE"

// Frames across a partition are dropped, so a dial there fails only by
// timing out: cutTimeout bounds the dials expected to fail. A dial
// expected to succeed gets reachTimeout, long enough for a loaded machine
// (a connection that is not cut is made in the end; one that is cut
// never is).
const (
	cutTimeout   = 500 * time.Millisecond
	reachTimeout = 30 * time.Second
)

// TestHelperProbe is the body of a probe process (see probeEnv).
func TestHelperProbe(t *testing.T) {
	args := strings.Fields(os.Getenv(probeEnv))
	if len(args) != 2 && len(args) != 3 {
		t.Skip("runs only as a probe process started by TestPartition")
	}
	switch args[0] {
	case "serve":
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("ready")
		for {
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	case "dial":
		if len(args) != 3 {
			t.Fatalf("dial wants ADDR TIMEOUT, got %q", args[1:])
		}
		timeout, err := time.ParseDuration(args[2])
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.DialTimeout("tcp", args[1], timeout)
		if err != nil {
			fmt.Println("unreachable")
			return
		}
		c.Close()
		fmt.Println("ok")
	default:
		t.Fatalf("unknown probe %q", args[0])
	}
}

// TestPartition builds a three-host switch and checks who reaches whom:
// everyone before a partition; across the partition {0} | {1} nobody,
// while host 2, on neither side, still reaches both; after a partition
// that replaces it, {0, 1} | {2}, hosts 0 and 1 again and host 2 nobody;
// after Heal everyone again.
func TestPartition(t *testing.T) {
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
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := func(h int) string { return sw.Hosts()[h].Addr.String() + ":7000" }
	probe := func(host int, args string) *exec.Cmd {
		cmd := sw.Command(ctx, host, exe, "-test.run=^TestHelperProbe$", "-test.count=1")
		cmd.Env = append(os.Environ(), probeEnv+"="+args)
		cmd.Stderr = os.Stderr
		return cmd
	}
	for h := range sw.Hosts() {
		server := probe(h, "serve "+addr(h))
		out, err := server.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			server.Process.Kill()
			server.Wait()
		})
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("server on host %d: %q, %v", h, line, err)
		}
	}
	// reaches reports whether host from can connect to host to, waiting
	// as long as it takes if it should.
	reaches := func(from, to int, should bool) bool {
		timeout := cutTimeout
		if should {
			timeout = reachTimeout
		}
		out, err := probe(from, "dial "+addr(to)+" "+timeout.String()).Output()
		if err != nil {
			t.Fatalf("dial from host %d to host %d: %v", from, to, err)
		}
		return strings.HasPrefix(string(out), "ok\n")
	}
	// expect checks reachability between every ordered pair of hosts:
	// want[from][to].
	expect := func(stage string, want [3][3]bool) {
		t.Helper()
		for from := range 3 {
			for to := range 3 {
				if from == to {
					continue
				}
				if got := reaches(from, to, want[from][to]); got != want[from][to] {
					t.Errorf("%s: host %d reaches host %d: %v, want %v", stage, from, to, got, want[from][to])
				}
			}
		}
	}
	all := [3][3]bool{{true, true, true}, {true, true, true}, {true, true, true}}

	expect("before any partition", all)
	if err := sw.Partition(ctx, []int{0}, []int{1}); err != nil {
		t.Fatal(err)
	}
	expect("partition {0} | {1}", [3][3]bool{{true, false, true}, {false, true, true}, {true, true, true}})
	if err := sw.Partition(ctx, []int{0, 1}, []int{2}); err != nil {
		t.Fatal(err)
	}
	expect("partition {0, 1} | {2}", [3][3]bool{{true, true, false}, {true, true, false}, {false, false, true}})
	if err := sw.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	expect("healed", all)
	if err := sw.Heal(ctx); err != nil {
		t.Errorf("healing twice: %v", err)
	}
}

// TestPartitionArguments checks that Partition refuses sides that do not
// describe a partition of the switch's hosts.
func TestPartitionArguments(t *testing.T) {
	s := &Switch{hosts: make([]Host, 3)}
	for _, sides := range [][][]int{
		{{0, 1, 2}},        // one side
		{{0}, {}},          // an empty side
		{{0, 1}, {1, 2}},   // host 1 on both sides
		{{0}, {3}},         // no host 3
		{{-1}, {0}},        // no host -1
		{{0}, {1}, {2, 0}}, // host 0 twice
	} {
		if err := s.Partition(context.Background(), sides...); err == nil {
			t.Errorf("Partition(%v) succeeded", sides)
		}
	}
}
