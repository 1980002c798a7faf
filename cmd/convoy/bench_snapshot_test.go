package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchSnapshot runs the snapshot benchmark with member processes
// (this test binary, run as the command: see TestMain) and a state of
// 256 MiB: a durable member keeps a snapshot of it, two stream it to a
// joiner, and the joiner restarts from its log. No member may hold the
// state in memory for that: in every phase, the Go heap of the process
// measured grows by less than half the state (when snapshots and
// transfers held the state in memory, it grew by the state at least).
// The resident sets are logged; Pebble's memtables, which the snapshot's
// chunks go through, make them grow by a bounded amount (see the
// README's figures for a 4 GiB state).
func TestBenchSnapshot(t *testing.T) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("the benchmark measures peaks through Linux's /proc/self/clear_refs")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := selfExec{path: self, env: []string{childEnv + "=1"}}
	if raceBuild {
		// Pebble checks its invariants in race builds, and allocates
		// differently for it: the bound is a production build's, so the
		// members are one.
		exe = selfExec{path: buildCommand(t)}
	}
	const state = 256 << 20
	c := &cli{self: exe}
	code, out, errOut := runCommand(t, c, "bench", "snapshot", "-state", "256MiB", "-dir", t.TempDir(), "-json")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	var r snapshotResult
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if r.StateBytes != state {
		t.Fatalf("state of %d bytes, want %d", r.StateBytes, state)
	}
	want := []string{"snapshot member 1", "transfer joiner 2", "transfer donor 1", "transfer donor 3", "restart joiner 2"}
	if len(r.Phases) != len(want) {
		t.Fatalf("phases %+v, want %v", r.Phases, want)
	}
	for i, p := range r.Phases {
		if got := p.Phase + " " + p.Member; got != want[i] {
			t.Errorf("phase %d is %q, want %q", i, got, want[i])
		}
		if p.RSSPeak < p.RSS || p.RSS <= 0 || p.HeapPeak < p.Heap || p.Seconds <= 0 {
			t.Errorf("%s: implausible measurement %+v", want[i], p)
		}
		if p.HeapGrowth >= state/2 {
			t.Errorf("%s: the Go heap grew by %d MiB for a state of %d MiB", want[i], p.HeapGrowth>>20, state>>20)
		}
		if strings.Contains(want[i], "joiner") && p.RestoreSeconds <= 0 {
			t.Errorf("%s: no Restore timed", want[i])
		}
		t.Logf("%-18s %5.1fs  RSS %4d → %4d MiB (+%d)  Go heap %3d → %3d MiB (+%d)", want[i], p.Seconds,
			p.RSS>>20, p.RSSPeak>>20, p.RSSGrowth>>20, p.Heap>>20, p.HeapPeak>>20, p.HeapGrowth>>20)
	}
}

// buildCommand builds this command without the race detector into a
// temporary directory and returns the program's path.
func buildCommand(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "convoy")
	start := time.Now()
	if out, err := exec.Command("go", "build", "-race=false", "-o", path, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built the command without the race detector in %v", time.Since(start).Round(time.Millisecond))
	return path
}
