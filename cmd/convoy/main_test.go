package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/rdma"
)

// childEnv makes the test binary run as the convoy command (see TestMain),
// so that -netns can start it as a node process.
const childEnv = "CONVOY_TEST_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(etcdChildEnv) != "" {
		os.Exit(runTestEtcd())
	}
	if os.Getenv(childEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr})
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// runCommand runs a command line in-process and returns its exit status
// and output.
func runCommand(t *testing.T, c *cli, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c.stdin, c.stdout, c.stderr = strings.NewReader(""), &out, &errOut
	code = run(t.Context(), args, c)
	return code, out.String(), errOut.String()
}

// checkResults parses the -json output and checks every line.
func checkResults(t *testing.T, out string, algos []string, nodes []int, size, block int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(algos)*len(nodes) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(algos)*len(nodes), out)
	}
	i := 0
	for _, algo := range algos {
		for _, n := range nodes {
			var r multicastResult
			dec := json.NewDecoder(strings.NewReader(lines[i]))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("line %d %q: %v", i, lines[i], err)
			}
			i++
			if r.Algo != algo || r.Nodes != n || r.Bytes != size || r.BlockBytes != block {
				t.Errorf("line %+v, want algo %s, nodes %d, bytes %d, block_bytes %d", r, algo, n, size, block)
			}
			if r.Seconds <= 0 || r.UnicastSeconds <= 0 {
				t.Errorf("line %+v: times must be positive", r)
			}
			if math.Abs(r.Ratio-r.Seconds/r.UnicastSeconds) > 1e-9 {
				t.Errorf("line %+v: ratio is not seconds/unicast_seconds", r)
			}
		}
	}
	for _, field := range []string{`"algo"`, `"nodes"`, `"bytes"`, `"block_bytes"`, `"seconds"`, `"unicast_seconds"`, `"ratio"`} {
		if !strings.Contains(lines[0], field) {
			t.Errorf("line %q lacks %s", lines[0], field)
		}
	}
}

func TestBenchMulticastLoopback(t *testing.T) {
	code, out, errOut := runCommand(t, &cli{},
		"bench", "multicast", "-nodes", "2,3", "-size", "300KiB", "-block", "64KiB", "-reps", "1", "-json")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	checkResults(t, out, []string{"sequential", "chain", "tree", "pipeline"}, []int{2, 3}, 300<<10, 64<<10)
	if errOut != "" {
		t.Errorf("unexpected stderr:\n%s", errOut)
	}
}

func TestBenchMulticastTable(t *testing.T) {
	code, out, errOut := runCommand(t, &cli{},
		"bench", "multicast", "-algos", "pipeline", "-nodes", "3", "-size", "100000", "-block", "16KiB", "-reps", "3", "-sockbuf", "64KiB")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "median of 3") || !strings.Contains(lines[0], "64KiB socket buffers") || !strings.HasPrefix(lines[2], "pipeline ") {
		t.Errorf("unexpected table:\n%s", out)
	}
}

// TestBenchMulticastCorruption checks that a receiver holding anything but
// the message sent fails the benchmark, naming the node and the byte.
func TestBenchMulticastCorruption(t *testing.T) {
	c := &cli{tamper: func(node rdma.NodeID, msg []byte) {
		if node == 3 {
			msg[12345] ^= 1
		}
	}}
	code, out, errOut := runCommand(t, c,
		"bench", "multicast", "-algos", "chain", "-nodes", "3", "-size", "64KiB", "-block", "16KiB", "-reps", "1", "-json")
	if code != 1 {
		t.Fatalf("exit status %d, want 1; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if out != "" {
		t.Errorf("results printed despite corruption:\n%s", out)
	}
	for _, want := range []string{"node 3 received a wrong message", "byte 12345 of"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestBenchMulticastNetns runs the benchmark with one process per node in
// network namespaces. It needs root, ip and tc.
func TestBenchMulticastNetns(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skipf("needs root, ip and tc for network namespaces (CI runs it as root): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{self: selfExec{path: self, env: []string{childEnv + "=1"}}}
	code, out, errOut := runCommand(t, c,
		"bench", "multicast", "-netns", "-rate", "1000", "-algos", "pipeline,sequential", "-nodes", "3",
		"-size", "1MiB", "-block", "256KiB", "-reps", "1", "-json", "-timeout", "30s")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	checkResults(t, out, []string{"pipeline", "sequential"}, []int{3}, 1<<20, 256<<10)
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"bench"}, "multicast"},
		{[]string{"bench", "nope"}, `unknown benchmark "nope"`},
		{[]string{"bench", "multicast", "-nodes", "1"}, "at least 2"},
		{[]string{"bench", "multicast", "-algos", "ring"}, "unknown algorithm"},
		{[]string{"bench", "multicast", "-size", "12QiB"}, "bad size"},
		{[]string{"bench", "multicast", "-rate", "100"}, "-rate needs -netns"},
		{[]string{"bench", "multicast", "-reps", "0"}, "-reps"},
		{[]string{"bench", "multicast", "-sockbuf", "0"}, "-sockbuf"},
		{[]string{"bench", "multicast", "extra"}, "unexpected arguments"},
	} {
		code, _, errOut := runCommand(t, &cli{}, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	code, out, _ := runCommand(t, &cli{}, "help")
	if code != 0 || !strings.Contains(out, "bench") {
		t.Errorf("help: status %d, output %q", code, out)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{
		"1": 1, "4096": 4096, "300KiB": 300 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "2 MiB": 2 << 20, "7B": 7,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1KiB", "1.5MiB", "12QiB", "MiB", "99999999999GiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
	for n, want := range map[int]string{1: "1B", 1000: "1000B", 300 << 10: "300KiB", 64 << 20: "64MiB", 1536 << 10: "1.5MiB", 1<<20 + 1: "1.0MiB", 3 << 30: "3GiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestMedian(t *testing.T) {
	s := time.Second
	if got := median([]time.Duration{3 * s, 1 * s, 2 * s}); got != 2*s {
		t.Errorf("odd median %v", got)
	}
	if got := median([]time.Duration{4 * s, 1 * s, 2 * s, 3 * s}); got != 2500*time.Millisecond {
		t.Errorf("even median %v", got)
	}
}

func TestPattern(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 1000, 4099} {
		b := make([]byte, n)
		fillPattern(b, 42)
		if err := checkPattern(b, 42); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if n > 1 && checkPattern(b, 43) == nil {
			t.Errorf("%d bytes: pattern of seed 42 passes as seed 43", n)
		}
		b[n-1] ^= 0x80
		err := checkPattern(b, 42)
		if err == nil || !strings.Contains(err.Error(), "byte "+strconv.Itoa(n-1)+" of") {
			t.Errorf("%d bytes, last byte flipped: %v", n, err)
		}
	}
}
