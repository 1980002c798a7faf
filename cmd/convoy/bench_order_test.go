package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy"
)

// parseOrderResults parses the -json output of "bench order" and checks
// every line.
func parseOrderResults(t *testing.T, out string) []orderResult {
	t.Helper()
	var rs []orderResult
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r orderResult
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		for _, field := range []string{`"mode"`, `"nodes"`, `"senders"`, `"size"`, `"msgs_per_sec"`, `"bytes_per_sec"`, `"p50_us"`, `"p99_us"`} {
			if !strings.Contains(line, field) {
				t.Errorf("line %q lacks %s", line, field)
			}
		}
		if r.MsgsPerSec <= 0 || r.P50Us <= 0 || r.P99Us < r.P50Us {
			t.Errorf("line %q: want positive throughput and 0 < p50 ≤ p99", line)
		}
		if want := r.MsgsPerSec * float64(r.Size); math.Abs(r.BytesPerSec-want) > 1 {
			t.Errorf("line %q: bytes_per_sec is not msgs_per_sec × size (%v)", line, want)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestBenchOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, mode := range []string{"atomic", "total", "durable"} {
		t.Run(mode, func(t *testing.T) {
			// Durable delivery waits for fsyncs, slow on a loaded disk: it
			// gets a longer window so that some messages complete in it.
			duration, warmup := "300ms", "100ms"
			if mode == "durable" {
				duration, warmup = "2s", "500ms"
			}
			code, out, errOut := runCommand(t, &cli{}, "bench", "order", "-nodes", "3", "-senders", "all", "-size", "64",
				"-mode", mode, "-duration", duration, "-warmup", warmup, "-window", "1024", "-json")
			if code != 0 {
				t.Fatalf("exit status %d:\n%s", code, errOut)
			}
			rs := parseOrderResults(t, out)
			if len(rs) != 2 {
				t.Fatalf("got %d lines, want 2:\n%s", len(rs), out)
			}
			for i, want := range []string{mode, "unordered"} {
				r := rs[i]
				if r.Mode != want || r.Nodes != 3 || r.Senders != 3 || r.Size != 64 {
					t.Errorf("line %d: %+v, want mode %s, 3 nodes, 3 senders, size 64", i, r, want)
				}
			}
			switch r := rs[0]; {
			case r.Ratio == nil:
				t.Errorf("the %s line has no ratio:\n%s", mode, out)
			case *r.Ratio <= 0 || math.Abs(*r.Ratio-r.MsgsPerSec/rs[1].MsgsPerSec) > 1e-3:
				t.Errorf("ratio %v, want msgs_per_sec %v / %v", *r.Ratio, r.MsgsPerSec, rs[1].MsgsPerSec)
			}
			if rs[1].Ratio != nil {
				t.Errorf("the baseline line has a ratio:\n%s", out)
			}
			if r := rs[0]; mode == "durable" {
				switch {
				case r.FsyncsPerSec == nil || *r.FsyncsPerSec <= 0:
					t.Errorf("durable line without fsyncs_per_sec:\n%s", out)
				case r.RawPebbleMsgsPerSec == nil || *r.RawPebbleMsgsPerSec <= 0 || r.RawPebbleRatio == nil:
					t.Errorf("durable line without the raw Pebble baseline:\n%s", out)
				case math.Abs(*r.RawPebbleRatio - r.MsgsPerSec / *r.RawPebbleMsgsPerSec) > 1e-3:
					t.Errorf("raw ratio %v, want %v / %v", *r.RawPebbleRatio, r.MsgsPerSec, *r.RawPebbleMsgsPerSec)
				case r.SyncedWriteP50Us == nil || *r.SyncedWriteP50Us <= 0 || r.SyncedWriteP99Us == nil || *r.SyncedWriteP99Us < *r.SyncedWriteP50Us || r.SyncedWriteRatio == nil:
					t.Errorf("durable line without the synced write baseline:\n%s", out)
				case math.Abs(*r.SyncedWriteRatio - r.P50Us / *r.SyncedWriteP50Us) > 1e-3:
					t.Errorf("synced write ratio %v, want %v / %v", *r.SyncedWriteRatio, r.P50Us, *r.SyncedWriteP50Us)
				// Each message reaches its steps in this order, so their
				// medians are in it too.
				case r.Steps == nil || r.Steps.Messages <= 0 || r.Steps.OrderedP50Us <= 0 ||
					r.Steps.PersistedP50Us < r.Steps.OrderedP50Us || r.Steps.DeliveredP50Us < r.Steps.PersistedP50Us:
					t.Errorf("durable line without its steps, or steps out of order:\n%s", out)
				}
			} else if r.RawPebbleMsgsPerSec != nil || r.SyncedWriteP50Us != nil || r.Steps != nil {
				t.Errorf("a %s line with a raw Pebble baseline or steps:\n%s", mode, out)
			}
		})
	}
}

func TestBenchOrderTable(t *testing.T) {
	code, out, errOut := runCommand(t, &cli{}, "bench", "order", "-nodes", "2", "-senders", "1", "-size", "1KiB",
		"-mode", "unordered", "-duration", "200ms", "-warmup", "50ms", "-rate", "1000")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "2 nodes (1 sending), 1KiB messages") ||
		!strings.HasPrefix(lines[2], "unordered ") || !strings.HasSuffix(lines[2], " 1.00") {
		t.Errorf("unexpected table:\n%s", out)
	}
}

func TestBenchOrderUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "causal"}, "unknown mode"},
		{[]string{"-nodes", "1"}, "at least 2"},
		{[]string{"-senders", "4"}, `want "all" or a number from 1 to 3`},
		{[]string{"-senders", "none"}, "-senders"},
		{[]string{"-size", "8"}, "at least 16 bytes"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-rate", "-1"}, "-rate"},
	} {
		args := append([]string{"bench", "order"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestOrderMemberApply checks the per-delivery checks against a member's
// history.
func TestOrderMemberApply(t *testing.T) {
	msg := func(sender convoy.NodeID, seq, index uint64) convoy.Delivery {
		p := make([]byte, orderHeaderBytes)
		encodeOrderHeader(p, sender, seq)
		return convoy.Delivery{Sender: sender, Seq: seq, Index: index, Payload: p}
	}
	check := newOrderCheck(2)
	m := &orderMember{next: []uint64{1, 1, 1}}
	for i, d := range []convoy.Delivery{msg(1, 1, 1), msg(2, 1, 2), msg(1, 2, 3)} {
		if err := m.apply(d, true, check); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	for _, tc := range []struct {
		d    convoy.Delivery
		want string
	}{
		{msg(1, 2, 4), "#3 was due"},   // duplicate
		{msg(3, 2, 4), "#1 was due"},   // gap
		{msg(2, 2, 7), "has index 7"},  // index jump
		{msg(4, 1, 4), "not a member"}, // unknown sender
		{convoy.Delivery{Sender: 1, Seq: 3, Index: 4, Payload: []byte{1}}, "too short"},
	} {
		err := newMemberAfter(t, m).apply(tc.d, true, check)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d#%d (index %d): %v, want an error with %q", tc.d.Sender, tc.d.Seq, tc.d.Index, err, tc.want)
		}
	}
	p := msg(1, 3, 4)
	p.Seq = 4
	if err := newMemberAfter(t, m).apply(p, true, check); err == nil || !strings.Contains(err.Error(), "carries the header") {
		t.Errorf("mislabelled payload: %v", err)
	}
}

// newMemberAfter returns a copy of m, so that one failed check does not
// affect the next.
func newMemberAfter(t *testing.T, m *orderMember) *orderMember {
	t.Helper()
	c := &orderMember{count: m.count, hash: m.hash}
	c.next = append([]uint64(nil), m.next...)
	return c
}

// TestOrderCheck checks that members that deliver in different orders are
// caught at the first checkpoint after the difference.
func TestOrderCheck(t *testing.T) {
	check := newOrderCheck(3)
	h := func(seqs ...uint64) uint64 {
		var x uint64
		for _, s := range seqs {
			x = foldOrderHash(x, 1, s)
		}
		return x
	}
	if err := check.record(0, orderCheckEvery, h(1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := check.record(1, orderCheckEvery, h(1, 2)); err != nil {
		t.Fatal(err)
	}
	err := check.record(2, orderCheckEvery, h(2, 1))
	if err == nil || !strings.Contains(err.Error(), "differs from member 1's") {
		t.Fatalf("different order: %v", err)
	}
	if foldOrderHash(0, 1, 2) == foldOrderHash(0, 2, 1) {
		t.Error("the hash does not tell sender from sequence number")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if p := percentile(ds, 0.5); p != 50 {
		t.Errorf("p50 = %v, want 50", p)
	}
	if p := percentile(ds, 0.99); p != 99 {
		t.Errorf("p99 = %v, want 99", p)
	}
	if p := percentile(ds[:1], 0.99); p != 100 {
		t.Errorf("p99 of one = %v, want it", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none = %v, want 0", p)
	}
}

func TestLatencyLog(t *testing.T) {
	var l latencyLog
	l.sending(1, 10, false)
	l.sending(2, 20, true)
	l.sending(3, 30, true)
	l.delivered(1, 15)
	l.delivered(2, 50)
	l.sending(4, 60, true)
	l.delivered(3, 70)
	l.delivered(4, 65)
	l.delivered(4, 99) // already delivered: ignored
	want := []time.Duration{30, 40, 5}
	if len(l.samples) != len(want) {
		t.Fatalf("samples %v, want %v", l.samples, want)
	}
	for i := range want {
		if l.samples[i] != want[i] {
			t.Fatalf("samples %v, want %v", l.samples, want)
		}
	}
}
