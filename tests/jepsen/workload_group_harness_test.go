package jepsen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convoy-gcs/convoy/tests/jepsen/check"
	"github.com/convoy-gcs/convoy/tests/jepsen/internal/grouprec"
)

// groupRecords are the record files of a run of the group workload, by
// member, one a run, as groupmember writes them. Member 1's first run
// is excluded from view 2, sends once more in its second incarnation
// and is killed mid-line; its second run replays its log, is handed the
// rest (index 3) before its first view, and finishes. Member 2 goes
// through and finishes.
var groupRecords = map[int][]string{
	1: {
		`{"inc":1,"view":{"epoch":1,"start":0,"members":[1,2]}}
{"inc":1,"invoke":{"payload":"1.1.1.1","invoke":10}}
{"inc":1,"delivery":{"epoch":1,"index":1,"sender":1,"seq":1,"payload":"1.1.1.1"}}
{"inc":1,"delivery":{"epoch":1,"index":2,"sender":2,"seq":1,"payload":"2.1.1.1"}}
{"inc":1,"return":{"payload":"1.1.1.1","complete":20,"status":"durable"}}
{"inc":1,"excluded":{"epoch":2,"start":2,"members":[2]}}
{"inc":2,"invoke":{"payload":"1.1.2.2","invoke":30}}
{"inc":2,"deliv`,
		`{"inc":1,"delivery":{"epoch":1,"index":1,"sender":1,"seq":1,"payload":"1.1.1.1","replayed":true}}
{"inc":1,"delivery":{"epoch":1,"index":2,"sender":2,"seq":1,"payload":"2.1.1.1","replayed":true}}
{"inc":1,"delivery":{"epoch":2,"index":3,"sender":2,"seq":2,"payload":"2.1.1.2"}}
{"inc":1,"view":{"epoch":3,"start":3,"members":[2,1]}}
{"inc":1,"invoke":{"payload":"1.2.1.1","invoke":40}}
{"inc":1,"delivery":{"epoch":3,"index":4,"sender":1,"seq":1,"payload":"1.2.1.1"}}
{"inc":1,"return":{"payload":"1.2.1.1","complete":50,"status":"accepted"}}
{"inc":1,"final":true}
`,
	},
	2: {
		`{"inc":1,"view":{"epoch":1,"start":0,"members":[1,2]}}
{"inc":1,"invoke":{"payload":"2.1.1.1","invoke":10}}
{"inc":1,"delivery":{"epoch":1,"index":1,"sender":1,"seq":1,"payload":"1.1.1.1"}}
{"inc":1,"delivery":{"epoch":1,"index":2,"sender":2,"seq":1,"payload":"2.1.1.1"}}
{"inc":1,"return":{"payload":"2.1.1.1","complete":20,"status":"durable"}}
{"inc":1,"view":{"epoch":2,"start":2,"members":[2]}}
{"inc":1,"invoke":{"payload":"2.1.1.2","invoke":30}}
{"inc":1,"delivery":{"epoch":2,"index":3,"sender":2,"seq":2,"payload":"2.1.1.2"}}
{"inc":1,"return":{"payload":"2.1.1.2","complete":35,"status":"accepted"}}
{"inc":1,"view":{"epoch":3,"start":3,"members":[2,1]}}
{"inc":1,"delivery":{"epoch":3,"index":4,"sender":1,"seq":1,"payload":"1.2.1.1"}}
{"inc":1,"final":true}
`,
	},
}

// writeGroupRecords writes files as the members' record files under a
// new directory, and returns the members.
func writeGroupRecords(t *testing.T, files map[int][]string) []*member {
	dir := t.TempDir()
	var members []*member
	for id := 1; id <= len(files); id++ {
		m := &member{id: id}
		for i, content := range files[id] {
			path := filepath.Join(dir, fmt.Sprintf("member-%d-run-%d.jsonl", id, i+1))
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			m.outs = append(m.outs, path)
		}
		members = append(members, m)
	}
	return members
}

// TestGroupRecords: the records of every run make one history, the
// torn last line of a killed run dropped: each member's incarnations
// numbered across its runs, each message and send given the incarnation
// its payload names, a send without its return unanswered, the last
// incarnations final; and the history passes the check. A line that
// does not parse but ends with a newline is an error.
func TestGroupRecords(t *testing.T) {
	runs, err := readGroupRuns(writeGroupRecords(t, groupRecords))
	if err != nil {
		t.Fatal(err)
	}
	h := grouprec.History(runs)
	var incs []string
	for _, inc := range h.Incarnations {
		s := fmt.Sprintf("%d.%d", inc.Member, inc.Incarnation)
		if inc.Final {
			s += " final"
		}
		if inc.Excluded != 0 {
			s += " excluded"
		}
		incs = append(incs, s)
	}
	if got, want := strings.Join(incs, ", "), "1.1 excluded, 1.2, 1.3 final, 2.1 final"; got != want {
		t.Errorf("incarnations: %s, want %s", got, want)
	}
	sends := make(map[string]check.Send)
	for _, s := range h.Sends {
		sends[s.Payload] = s
	}
	for p, want := range map[string]struct {
		inc    uint64
		status check.SendStatus
	}{
		"1.1.1.1": {1, check.Durable}, "1.1.2.2": {2, check.Unanswered}, "1.2.1.1": {3, check.Accepted},
		"2.1.1.1": {1, check.Durable}, "2.1.1.2": {1, check.Accepted},
	} {
		if s := sends[p]; s.Incarnation != want.inc || s.Status != want.status {
			t.Errorf("send %s: incarnation %d, %s; want %d, %s", p, s.Incarnation, s.Status, want.inc, want.status)
		}
	}
	for _, inc := range h.Incarnations {
		for _, ev := range inc.Events {
			if d := ev.Delivery; d != nil && d.Payload == "1.2.1.1" && d.Incarnation != 3 {
				t.Errorf("%d.%d delivered 1.2.1.1 from incarnation %d, want 3", inc.Member, inc.Incarnation, d.Incarnation)
			}
		}
	}
	if r := check.CheckGroup(h); !r.OK {
		t.Errorf("the history fails the check: %v", r)
	}

	torn := map[int][]string{1: {strings.Replace(groupRecords[1][1], `"final":true}`, `"fin`, 1) + "\n"}}
	if _, err := readGroupRuns(writeGroupRecords(t, torn)); err == nil {
		t.Error("a torn line followed by a newline was read without an error")
	}
}
