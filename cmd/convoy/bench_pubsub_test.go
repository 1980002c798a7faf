package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/internal/netns"
)

// TestBenchPubSub runs a short "bench pubsub": two phases, each with
// traffic counted; a member's transport carries fewer bytes per
// published byte on topics of one subscriber than when every member
// receives every message.
func TestBenchPubSub(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	checkBenchPubSub(t, &cli{}, 0)
}

// TestBenchPubSubNetns runs the benchmark with each member a process in
// a network namespace of its own, on shaped links. It needs root, ip and
// tc.
func TestBenchPubSubNetns(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skipf("needs root, ip and tc for network namespaces (CI runs it as root): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	checkBenchPubSub(t, &cli{self: selfExec{path: self, env: []string{childEnv + "=1"}}}, 1000, "-netns", "-rate", "1000")
}

// checkBenchPubSub runs a short "bench pubsub" with args, links shaped to
// linkMbit, and checks its results.
func checkBenchPubSub(t *testing.T, c *cli, linkMbit int, args ...string) {
	t.Helper()
	code, out, errOut := runCommand(t, c, append([]string{"bench", "pubsub", "-nodes", "3", "-topics", "3", "-subscribers", "1",
		"-size", "1KiB", "-duration", "300ms", "-warmup", "100ms", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	var rs []pubsubResult
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r pubsubResult
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		if r.Published <= 0 || r.Delivered <= 0 || r.RecvPerByte <= 0 || r.P50Millis <= 0 || r.P99Millis < r.P50Millis {
			t.Errorf("line %q: want traffic, deliveries and 0 < p50 ≤ p99", line)
		}
		if r.LinkMbit != linkMbit || r.Nodes != 3 || r.Subscribers != 1 {
			t.Errorf("line %q: want 3 members, 1 subscriber, links at %d Mbit/s", line, linkMbit)
		}
		rs = append(rs, r)
	}
	if len(rs) != 2 || rs[0].Phase != "topics" || rs[1].Phase != "group" {
		t.Fatalf("got %d lines, want topics then group:\n%s", len(rs), out)
	}
	if rs[0].RecvPerByte >= rs[1].RecvPerByte || rs[0].RatioToGroup >= 1 {
		t.Errorf("topics of one subscriber of three: %v received bytes per published byte, the whole group %v", rs[0].RecvPerByte, rs[1].RecvPerByte)
	}
}

func TestBenchPubSubFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-nodes", "1"},
		{"-subscribers", "9"},
		{"-topics", "0"},
		{"-size", "8"},
		{"-window", "0"},
		{"-publish-rate", "-1"},
		{"-rate", "100"}, // without -netns
		{"-netns", "-rate", "-1"},
	} {
		if code, _, _ := runCommand(t, &cli{}, append([]string{"bench", "pubsub"}, args...)...); code == 0 {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestLatencyHist: quantiles of a histogram, and of two merged, are
// those of the samples to within a bucket.
func TestLatencyHist(t *testing.T) {
	var a, b latencyHist
	for i := 1; i <= 1000; i++ {
		a.add(time.Duration(i) * time.Microsecond)
		b.add(time.Duration(1000+i) * time.Microsecond)
	}
	for _, tc := range []struct {
		h    *latencyHist
		q    float64
		want time.Duration
	}{
		{&a, 0.5, 500 * time.Microsecond},
		{&a, 0.99, 990 * time.Microsecond},
		{&latencyHist{}, 0.5, 0},
	} {
		if got := tc.h.quantile(tc.q); got < tc.want*99/100 || got > tc.want*102/100 {
			t.Errorf("quantile %v of %d samples: %v, want %v within 1%%", tc.q, tc.h.N, got, tc.want)
		}
	}
	a.merge(&b)
	if got, want := a.quantile(0.5), 1000*time.Microsecond; a.N != 2000 || got < want*99/100 || got > want*102/100 {
		t.Errorf("merged: %d samples, median %v, want 2000 and %v", a.N, got, want)
	}
}
