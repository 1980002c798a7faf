package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBenchJoin runs the benchmark on loopback with member processes (this
// test binary, run as the command: see TestMain) and a small state.
func TestBenchJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes and etcd")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{self: selfExec{path: self, env: []string{childEnv + "=1"}}}
	code, out, errOut := runCommand(t, c, "bench", "join", "-nodes", "3", "-state", "8MiB", "-from", "2",
		"-timeout-run", "60s", "-json")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	var r joinResult
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	for _, field := range []string{`"seconds"`, `"bytes_per_sec"`, `"link_fraction"`, `"baseline"`, `"ratio"`, `"timed_from"`} {
		if !strings.Contains(out, field) {
			t.Errorf("output lacks %s:\n%s", field, out)
		}
	}
	if r.Nodes != 3 || r.StateBytes != 8<<20 || r.Netns || r.TimedFrom != joinTimedFrom {
		t.Errorf("settings %+v: want 3 nodes, 8 MiB, no netns, timed from %s", r, joinTimedFrom)
	}
	if r.Baseline == nil {
		t.Fatalf("no baseline:\n%s", out)
	}
	for _, x := range []struct {
		run  joinRun
		from int
	}{{r.joinRun, 2}, {*r.Baseline, 1}} {
		checkJoinRun(t, x.run, x.from, 8<<20)
	}
	if want := r.BytesPerSec / r.Baseline.BytesPerSec; math.Abs(r.Ratio-want) > 0.01 {
		t.Errorf("ratio %v, want %v", r.Ratio, want)
	}
	t.Logf("%s", out)
}

// checkJoinRun checks one run's measurement.
func checkJoinRun(t *testing.T, r joinRun, from int, state int64) {
	t.Helper()
	// Each donor's share comes in slices.
	if r.From != from || r.Donors != from || len(r.Parts) == 0 || len(r.Parts)%from != 0 {
		t.Errorf("run %+v: want -from and donors %d, parts a multiple", r, from)
	}
	if !(0 < r.TransferSeconds && r.TransferSeconds <= r.Seconds && r.RestoreSeconds >= 0) {
		t.Errorf("run %+v: want 0 < transfer ≤ seconds", r)
	}
	if math.Abs(r.TransferSeconds+r.RestoreSeconds-r.Seconds) > 0.001 {
		t.Errorf("run %+v: transfer + restore ≠ seconds", r)
	}
	if want := float64(state) / r.Seconds; math.Abs(r.BytesPerSec-want) > want*0.01 {
		t.Errorf("run %+v: bytes_per_sec, want about %v", r, want)
	}
	if r.LinkFraction != 0 {
		t.Errorf("run %+v: link fraction without -netns", r)
	}
	var total int64
	for i, p := range r.Parts {
		if p.Part != i || p.Bytes <= 0 || p.Seconds <= 0 || p.Seconds > r.TransferSeconds {
			t.Errorf("part %d: %+v", i, p)
		}
		total += p.Bytes
	}
	if total != state {
		t.Errorf("parts hold %d bytes, want %d", total, state)
	}
}

func TestBenchJoinUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nodes", "0"}, "-nodes"},
		{[]string{"-nodes", "3", "-from", "4"}, "-from"},
		{[]string{"-from", "0"}, "-from"},
		{[]string{"-state", "2GiB"}, "at most 1GiB"},
		{[]string{"-state", "3", "-from", "4"}, "one byte per donor"},
		{[]string{"-rate", "100"}, "need -netns"},
		{[]string{"-joiner-rate", "100"}, "need -netns"},
		{[]string{"-heartbeat", "1s", "-timeout", "1s"}, "longer than -heartbeat"},
		{[]string{"-timeout-run", "0s"}, "-timeout-run"},
	} {
		args := append([]string{"bench", "join"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", args, code, errOut, tc.want)
		}
	}
}

// TestSynthState checks that snapshots cut into any number of parts
// restore, that Restore catches changed, moved and missing bytes, and
// that the parts describe the stream whatever the cut.
func TestSynthState(t *testing.T) {
	const size = 3*synthBlockSize + 12345
	s := newSynthState(size)
	whole := make([]byte, size)
	s.fill(whole, 0)
	snapshot := func(of int) [][]byte {
		parts := make([][]byte, of)
		for p := range of {
			var buf bytes.Buffer
			if err := s.Snapshot(&buf, p, of); err != nil {
				t.Fatal(err)
			}
			parts[p] = buf.Bytes()
		}
		return parts
	}
	restore := func(parts [][]byte) error {
		rs := make([]io.Reader, len(parts))
		for i, p := range parts {
			rs[i] = bytes.NewReader(p)
		}
		return s.Restore(rs)
	}
	for _, of := range []int{1, 2, 3, 4, 7} {
		parts := snapshot(of)
		if got := bytes.Join(parts, nil); !bytes.Equal(got, whole) {
			t.Fatalf("%d parts do not make up the stream", of)
		}
		if err := restore(parts); err != nil {
			t.Errorf("%d parts: %v", of, err)
		}
	}
	// Two blocks' headers differ, so swapped blocks are caught.
	if bytes.Equal(whole[:8], whole[synthBlockSize:synthBlockSize+8]) {
		t.Error("blocks 0 and 1 start alike")
	}
	swapped := bytes.Clone(whole)
	copy(swapped[:synthBlockSize], whole[synthBlockSize:2*synthBlockSize])
	copy(swapped[synthBlockSize:], whole[:synthBlockSize])
	flipped := bytes.Clone(whole)
	flipped[size-1] ^= 1
	for name, parts := range map[string][][]byte{
		"swapped blocks": {swapped},
		"flipped bit":    {flipped},
		"short":          {whole[:size-1]},
		"long":           {append(bytes.Clone(whole), 0)},
		"parts reversed": {whole[size/2:], whole[:size/2]},
	} {
		if err := restore(parts); err == nil {
			t.Errorf("%s: Restore succeeded", name)
		}
	}
	// Restore reports what it did.
	var reported error
	var bytesSeen int64
	s.onRestore = func(_, _ time.Time, n int64, err error) { bytesSeen, reported = n, err }
	if err := restore([][]byte{flipped}); err == nil || reported == nil || bytesSeen != 0 {
		t.Errorf("Restore of a changed state: %v, reported %v after %d bytes", err, reported, bytesSeen)
	}
	if err := restore(snapshot(2)); err != nil || reported != nil || bytesSeen != size {
		t.Errorf("Restore: %v, reported %v after %d bytes, want %d", err, reported, bytesSeen, size)
	}
}

// TestJoinLogHandler checks that the library's log messages about a join
// become events.
func TestJoinLogHandler(t *testing.T) {
	var evs []joinEvent
	h := &joinLogHandler{inner: slog.DiscardHandler, emit: func(ev joinEvent) { evs = append(evs, ev) }, debug: true}
	log := slog.New(h).With("member", 6)
	log.Info("entered view", "epoch", uint64(1), "rank", 0, "members", 5, "joining", false, "donors", 0)
	log.Info("entered view", "epoch", uint64(2), "rank", 5, "members", 6, "joining", true, "donors", 4)
	log.Debug("membership: fetch: part received", "part", 2, "donor", uint64(3), "bytes", 1024)
	log.Warn("excluded from the group", "epoch", uint64(0), "reason", "state transfer failed")
	if len(evs) != 3 {
		t.Fatalf("events %+v, want 3", evs)
	}
	if ev := evs[0]; ev.Event != jnFetch || ev.Epoch != 2 || ev.Donors != 4 || ev.T == 0 {
		t.Errorf("event %+v, want fetch in epoch 2 from 4 donors", ev)
	}
	if ev := evs[1]; ev.Event != jnPart || ev.Part != 2 || ev.Donor != 3 || ev.Bytes != 1024 {
		t.Errorf("event %+v, want part 2 from donor 3 of 1024 bytes", ev)
	}
	if ev := evs[2]; ev.Event != jnError || !strings.Contains(ev.Err, "state transfer failed") {
		t.Errorf("event %+v, want an error naming the reason", ev)
	}
	if !h.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("the joiner's handler must see debug records")
	}
}
