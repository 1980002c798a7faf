//go:build fabric

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// With -transport fabric every measurement runs on the fabric backend and
// on tcp, each line naming its transport, and the fabric lines saying how
// fast they were against tcp.
func TestBenchMulticastFabric(t *testing.T) {
	code, out, errOut := runCommand(t, &cli{},
		"bench", "multicast", "-transport", "fabric", "-algos", "pipeline,chain", "-nodes", "3", "-size", "300KiB", "-block", "64KiB", "-reps", "1", "-json")
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []struct{ algo, transport string }{{"pipeline", "tcp"}, {"pipeline", "fabric"}, {"chain", "tcp"}, {"chain", "fabric"}}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		var r multicastResult
		dec := json.NewDecoder(strings.NewReader(lines[i]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d %q: %v", i, lines[i], err)
		}
		if r.Algo != w.algo || r.Transport != w.transport || r.Nodes != 3 || r.Seconds <= 0 {
			t.Errorf("line %d: %+v, want %s on %s", i, r, w.algo, w.transport)
		}
		if (r.VsTCP > 0) != (w.transport == "fabric") {
			t.Errorf("line %d: vs_tcp %v on %s", i, r.VsTCP, w.transport)
		}
	}
}
