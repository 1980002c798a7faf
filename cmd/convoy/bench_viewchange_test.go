package main

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/convoy-gcs/convoy"
)

// TestBenchViewChange runs the benchmark with member processes (this test
// binary, run as the command: see TestMain) around an embedded etcd.
func TestBenchViewChange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes and etcd")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{self: selfExec{path: self, env: []string{childEnv + "=1"}}}
	code, out, errOut := runCommand(t, c, "bench", "viewchange", "-nodes", "3", "-runs", "1",
		"-rate", "100", "-size", "64", "-heartbeat", "10ms", "-timeout", "300ms", "-warmup", "100ms",
		"-timeout-run", "20s", "-json")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	var r vcResult
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	for _, field := range []string{`"detect_ms"`, `"install_ms"`, `"resume_ms"`, `"target_ms"`, `"met_target"`, `"samples"`} {
		if !strings.Contains(out, field) {
			t.Errorf("output lacks %s:\n%s", field, out)
		}
	}
	if r.Nodes != 3 || r.Runs != 1 || len(r.Samples) != 1 {
		t.Fatalf("nodes %d, runs %d, %d samples; want 3, 1, 1:\n%s", r.Nodes, r.Runs, len(r.Samples), out)
	}
	if r.HeartbeatMs != 10 || r.SuspectTimeoutMs != 300 || r.TargetMs != 350 {
		t.Errorf("heartbeat %v ms, suspect timeout %v ms, target %v ms; want 10, 300, 350", r.HeartbeatMs, r.SuspectTimeoutMs, r.TargetMs)
	}
	s := r.Samples[0]
	if s.Run != 1 || s.Victim < 2 || s.Victim > 3 || s.Epoch < 2 {
		t.Errorf("sample %+v: want run 1, victim 2 or 3, epoch ≥ 2", s)
	}
	if !(0 < s.DetectMs && s.DetectMs <= s.ProposeMs && s.ProposeMs <= s.InstallMs && s.InstallMs <= s.FirstDeliveryMs && s.FirstDeliveryMs <= s.ResumeMs) {
		t.Errorf("sample %+v: want 0 < detect ≤ propose ≤ install ≤ first delivery ≤ resume", s)
	}
	if r.DetectMs != s.DetectMs || r.InstallMs != s.InstallMs || r.ResumeMs != s.ResumeMs {
		t.Errorf("medians %+v differ from the only sample %+v", r, s)
	}
	if r.MetTarget != (r.ResumeMs <= r.TargetMs) {
		t.Errorf("met_target %v with resume %v ms and target %v ms", r.MetTarget, r.ResumeMs, r.TargetMs)
	}
	t.Logf("%+v", s)
}

func TestBenchViewChangeUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nodes", "2"}, "at least 3"},
		{[]string{"-runs", "0"}, "-runs"},
		{[]string{"-rate", "0"}, "-rate"},
		{[]string{"-size", "8"}, "at least 16"},
		{[]string{"-heartbeat", "100ms", "-timeout", "100ms"}, "longer than -heartbeat"},
		{[]string{"-victim", "6"}, "-victim"},
		{[]string{"-timeout-run", "0s"}, "-timeout-run"},
	} {
		args := append([]string{"bench", "viewchange"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", args, code, errOut, tc.want)
		}
	}
}

// TestVCLogHandler checks that the library's log messages about a view
// change become events, through a logger with attributes as the library
// makes it.
func TestVCLogHandler(t *testing.T) {
	var evs []vcEvent
	h := &vcLogHandler{inner: slog.DiscardHandler, emit: func(ev vcEvent) { evs = append(evs, ev) }}
	log := slog.New(h).With("member", convoy.NodeID(1))
	log.Warn("member failed", "peer", convoy.NodeID(3), "epoch", uint64(2), "reason", "silent")
	log.Info("proposing view", "epoch", uint64(3), "members", 2)
	log.Info("installed view", "epoch", uint64(3))
	if len(evs) != 2 {
		t.Fatalf("events %+v, want 2", evs)
	}
	if ev := evs[0]; ev.Event != vcConfirmed || ev.Peer != 3 || ev.Epoch != 2 || ev.Reason != "silent" || ev.T == 0 {
		t.Errorf("event %+v, want suspect-confirmed of peer 3 in epoch 2", ev)
	}
	if ev := evs[1]; ev.Event != vcProposing || ev.Epoch != 3 {
		t.Errorf("event %+v, want proposing epoch 3", ev)
	}
}

// TestVCWatchSpoiled checks which events after the kill spoil a run (a
// survivor suspected: measure it again) and which end it with an error.
func TestVCWatchSpoiled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ev      vcEvent
		spoiled bool
		err     bool
	}{
		{"victim confirmed", vcEvent{Node: 1, Event: vcConfirmed, Peer: 3, T: 2}, false, false},
		{"survivor confirmed", vcEvent{Node: 1, Event: vcConfirmed, Peer: 2, T: 2}, true, true},
		{"survivor refuted", vcEvent{Node: 1, Event: vcRefuted, Peer: 2, T: 2}, false, false},
		{"member exited", vcEvent{Node: 2, Event: vcExited, T: 2}, false, true},
		{"the victim's last words", vcEvent{Node: 3, Event: vcConfirmed, Peer: 1, T: 2}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newVCWatch(3, 1, 3).add(tc.ev)
			if (err != nil) != tc.err || errors.Is(err, errFalseSuspicion) != tc.spoiled {
				t.Errorf("add(%+v) = %v; want error %v, spoiled %v", tc.ev, err, tc.err, tc.spoiled)
			}
		})
	}
}
