package main

import (
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestBenchPubSub runs a short "bench pubsub": two phases, each with
// traffic counted; a member's transport carries fewer bytes per
// published byte on topics of one subscriber than when every member
// receives every message.
func TestBenchPubSub(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	code, out, errOut := runCommand(t, &cli{}, "bench", "pubsub", "-nodes", "3", "-topics", "3", "-subscribers", "1",
		"-size", "1KiB", "-duration", "300ms", "-warmup", "100ms", "-json")
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
		if r.Published <= 0 || r.Delivered <= 0 || r.RecvPerByte <= 0 || r.P99Millis < r.P50Millis {
			t.Errorf("line %q: want traffic, deliveries and p50 ≤ p99", line)
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
	} {
		if code, _, _ := runCommand(t, &cli{}, append([]string{"bench", "pubsub"}, args...)...); code == 0 {
			t.Errorf("%v: accepted", args)
		}
	}
}
