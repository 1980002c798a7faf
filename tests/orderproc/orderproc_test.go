package orderproc

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/testproc"
)

// TestMain runs the tests, or, in a process started as a member (see
// TestProcesses), the member.
func TestMain(m *testing.M) {
	testproc.Run(envMember, memberTimeout, func(ctx context.Context) error {
		s, err := memberSpecFromEnv()
		if err != nil {
			return err
		}
		if err := runMember(ctx, s, os.Stdin, os.Stdout); err != nil {
			return fmt.Errorf("member %d: %w", s.self, err)
		}
		return nil
	})
	os.Exit(m.Run())
}

// TestProcesses runs a group whose members are separate processes, all
// sending at once, and checks that every member delivers every message
// once, each sender's in the order sent, and in atomic and total mode all
// in the same order.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes; skipped with -short")
	}
	for _, tc := range []struct {
		mode    convoy.Mode
		members int
		count   int
	}{
		{convoy.Atomic, 4, 2000},
		{convoy.TotalOrder, 3, 2000},
		{convoy.Unordered, 3, 2000},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			sums := runGroup(t, tc.mode, tc.members, tc.count)
			checkSummaries(t, tc.mode, sums, tc.count)
		})
	}
}

// groupTimeout bounds one group's run, from starting the processes to
// their exit.
const groupTimeout = memberTimeout + 30*time.Second

// runGroup starts n member processes and returns their summaries, by rank.
func runGroup(t *testing.T, mode convoy.Mode, n, count int) []summary {
	t.Helper()
	members := make([]convoy.Member, n)
	for i, addr := range testproc.FreeAddrs(t, n) {
		members[i] = convoy.Member{ID: convoy.NodeID(i + 1), Addr: addr}
	}
	sums := testproc.Summaries[summary](t, groupTimeout, n, summaryPrefix, func(i int) []string {
		return encodeSpec(members[i].ID, members, mode, count)
	})
	for i, s := range sums {
		if s.Member != members[i].ID {
			t.Fatalf("member %d's summary names member %d", members[i].ID, s.Member)
		}
	}
	return sums
}

// checkSummaries compares the members' summaries: each delivered every
// message exactly once in its sender's order, and in atomic and total mode
// all delivered the same sequence.
func checkSummaries(t *testing.T, mode convoy.Mode, sums []summary, count int) {
	t.Helper()
	total := count * len(sums)
	for _, s := range sums {
		if s.Err != "" {
			t.Errorf("member %d: %s", s.Member, s.Err)
			continue
		}
		if s.Count != total {
			t.Errorf("member %d delivered %d messages, want %d", s.Member, s.Count, total)
		}
		for r, n := range s.PerSender {
			if n != uint64(count) {
				t.Errorf("member %d delivered %d messages from member %d, want %d", s.Member, n, r+1, count)
			}
		}
	}
	if mode == convoy.Unordered {
		return
	}
	first := sums[0]
	for _, s := range sums[1:] {
		if s.Hash == first.Hash {
			continue
		}
		t.Errorf("members %d and %d delivered different sequences: %s", first.Member, s.Member, divergence(first, s))
	}
}

// divergence says where two members' delivery sequences first differ, at
// checkpoint resolution.
func divergence(a, b summary) string {
	for i := range min(len(a.Checkpoints), len(b.Checkpoints)) {
		if a.Checkpoints[i] != b.Checkpoints[i] {
			return fmt.Sprintf("within deliveries %d to %d", i*checkpointEvery+1, (i+1)*checkpointEvery)
		}
	}
	return fmt.Sprintf("after delivery %d", min(len(a.Checkpoints), len(b.Checkpoints))*checkpointEvery)
}
