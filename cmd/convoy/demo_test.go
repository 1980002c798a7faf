package main

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// selfCLI returns a cli whose member processes are this test binary run
// as the command (see TestMain).
func selfCLI(t *testing.T) *cli {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &cli{self: selfExec{path: self, env: []string{childEnv + "=1"}}}
}

// decodeDemoSummary parses the demo's -json output.
func decodeDemoSummary(t *testing.T, out string) demoSummary {
	t.Helper()
	var sum demoSummary
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sum); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	return sum
}

// memberPIDs returns the process ids of the member processes that the
// demo's progress names ("kv-1   pid 1234", "(pid 1234)"), each once.
func memberPIDs(t *testing.T, progress string) []int {
	t.Helper()
	var pids []int
	for _, m := range regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(progress, -1) {
		pid, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkGone fails the test if any of pids still runs a few seconds on.
func checkGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			if time.Now().After(deadline) {
				t.Errorf("member process %d outlived the command", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// checkEmpty fails the test unless dir is empty: the command removed the
// temporary directory it made there.
func checkEmpty(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in the temporary directory: %s", e.Name())
	}
}

// TestDemo runs the demo end to end with member processes: the load, the
// kill, the view change, the restart and the checks, and that it leaves
// no process and no data behind.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and six member processes")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, progress := runCommand(t, selfCLI(t), "demo", "-duration", "3s", "-clients", "4", "-json")
	t.Logf("progress:\n%s", progress)
	if code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s", code, out)
	}
	sum := decodeDemoSummary(t, out)

	if len(sum.Apps) != 2 || sum.Apps[0].App != appKV || sum.Apps[1].App != appLog {
		t.Fatalf("apps %+v, want kv and log", sum.Apps)
	}
	for _, a := range sum.Apps {
		if a.Acked == 0 || a.PerSec <= 0 || a.P50Ms <= 0 || a.P99Ms < a.P50Ms {
			t.Errorf("%s: %d acknowledged, %v/s, p50 %v ms, p99 %v ms: want writes, a rate and latencies", a.App, a.Acked, a.PerSec, a.P50Ms, a.P99Ms)
		}
		// Member 2 was killed; the survivors went on in a view without
		// it; it came back, restarted, in a later view.
		if a.Killed != 2 || a.EpochWithout < 2 || a.EpochBack <= a.EpochWithout || a.ExcludedMs <= 0 || a.RejoinedMs <= 0 {
			t.Errorf("%s: %+v: want member 2 killed, a view without it and a later one with it", a.App, a)
		}
		if a.ViewChanges < 2 || len(a.Views) < 3 {
			t.Errorf("%s: %d view changes, views %+v: want at least 2 (without the victim, with it again)", a.App, a.ViewChanges, a.Views)
		}
		for _, v := range a.Views {
			if v.Epoch == a.EpochWithout && len(v.Members) != 2 {
				t.Errorf("%s: view %+v, want the two survivors", a.App, v)
			}
		}
	}
	if sum.Failed != 0 || sum.Passed != len(sum.Checks) || len(sum.Checks) != 8 {
		t.Errorf("%d checks, %d passed, %d failed: want 8 passed", len(sum.Checks), sum.Passed, sum.Failed)
	}
	for _, ch := range sum.Checks {
		if !ch.OK {
			t.Errorf("check failed: %s: %s", ch.Name, ch.Detail)
		}
	}
	for _, want := range []string{
		"kv: killed member 2", "log: killed member 2",
		"kv: view change: the survivors serve in view", "log: view change",
		"kv: restarted member 2", "kv: member 2 is back", "log: member 2 is back",
		"kv:", "puts (", "appends (",
		"checks: 8 passed, 0 failed",
	} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q", want)
		}
	}
	pids := memberPIDs(t, progress)
	if len(pids) != 8 { // six started, two restarted
		t.Errorf("found %d member pids in the progress, want 8", len(pids))
	}
	checkGone(t, pids)
	checkEmpty(t, tmp)
}

// TestDemoTLS runs the demo secured (-tls): mutual TLS between members,
// TLS and a token on the APIs, TLS with client certificates to etcd. It
// passes the same checks, through the kill and the restart, and leaves
// no process and no data behind.
func TestDemoTLS(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, progress := runCommand(t, selfCLI(t), "demo", "-tls", "-duration", "2s", "-clients", "2", "-json")
	t.Logf("progress:\n%s", progress)
	if code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s", code, out)
	}
	sum := decodeDemoSummary(t, out)
	if sum.Failed != 0 || sum.Passed != 8 {
		t.Errorf("%d checks passed, %d failed: want 8 passed", sum.Passed, sum.Failed)
	}
	for _, a := range sum.Apps {
		if a.Acked == 0 || a.Killed != 2 || a.EpochBack <= a.EpochWithout {
			t.Errorf("%s: %+v: want writes, member 2 killed and back", a.App, a)
		}
	}
	for _, want := range []string{"secured: mutual TLS between members", "https://127.0.0.1:", "etcd serves at https://"} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q", want)
		}
	}
	checkGone(t, memberPIDs(t, progress))
	checkEmpty(t, tmp)
}

// TestDemoCatchesDifferences makes one member of each group answer one
// read with a wrong byte: the demo must fail, naming the member and what
// differs, while the other checks pass.
func TestDemoCatchesDifferences(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and six member processes")
	}
	t.Setenv("TMPDIR", t.TempDir())
	c := selfCLI(t)
	c.demoRead = func(app string, member uint64, what string, data []byte) []byte {
		if app == appKV && member == 3 && what == "c0-000001" || app == appLog && member == 1 && what == "position 0" {
			data[len(data)-1] ^= 1
		}
		return data
	}
	code, out, progress := runCommand(t, c, "demo", "-duration", "1s", "-clients", "2", "-kill=false", "-json")
	t.Logf("progress:\n%s", progress)
	if code != 1 {
		t.Fatalf("exit status %d, want 1", code)
	}
	if !strings.Contains(progress, "convoy: 2 of 8 checks failed") {
		t.Errorf("stderr lacks the failure message")
	}
	sum := decodeDemoSummary(t, out)
	failed := map[string]string{}
	for _, ch := range sum.Checks {
		if !ch.OK {
			failed[ch.Name] = ch.Detail
		}
	}
	kv := failed["kv: every acknowledged put holds its value on every member (local reads)"]
	lg := failed["log: every acknowledged append is at its position on every member"]
	if len(failed) != 2 || !strings.Contains(kv, "1 of ") || !strings.Contains(kv, "member 3, key c0-000001: byte 99 is") ||
		!strings.Contains(lg, "1 of ") || !strings.Contains(lg, "member 1, position 0: byte 199 is") {
		t.Errorf("failed checks %q: want exactly the kv check (member 3, key c0-000001, byte 99) and the log check (member 1, position 0, byte 199)", failed)
	}
	if sum.Failed != 2 || sum.Passed != 6 {
		t.Errorf("%d passed, %d failed; want 6 and 2", sum.Passed, sum.Failed)
	}
}

func TestDemoUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-clients", "0"}, "-clients"},
		{[]string{"-victim", "4"}, "-victim must be from 1 to 3"},
		{[]string{"now"}, "unexpected arguments"},
	} {
		args := append([]string{"demo"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", args, code, errOut, tc.want)
		}
	}
}
