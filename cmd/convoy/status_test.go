package main

import (
	"strings"
	"testing"
)

// TestStatusReportPrint checks the table of "convoy status": a member
// that serves, one that does not answer, and the suspicions under the
// table.
func TestStatusReportPrint(t *testing.T) {
	r := statusReport{Prefix: "/convoy/", Epoch: 3, Start: 7, Members: []statusMember{
		{ID: 1, InView: true, Incarnation: 11, Addr: "10.0.0.1:7000", HTTP: "http://10.0.0.1:7101", PID: 100,
			Status: &memberStatus{ID: 1, Epoch: 3, Serving: true, Applied: 9}},
		{ID: 2, InView: true, Incarnation: 12, Addr: "10.0.0.2:7000", HTTP: "http://10.0.0.2:7101",
			SuspectedBy: map[uint64]string{3: "stalled", 1: "silent"}, Error: "unreachable: connect: connection refused"},
	}}
	var b strings.Builder
	if err := r.print(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"prefix /convoy/: view 3, 2 members, starts after delivery 7\n",
		"http://10.0.0.1:7101",
		"no: unreachable: connect: connection refused",
		"member 2 is suspected by 1 (silent), 3 (stalled)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "member 1 is suspected") {
		t.Errorf("the table says member 1 is suspected:\n%s", out)
	}
}
