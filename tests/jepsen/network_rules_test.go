package jepsen

import (
	"slices"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// reach returns, for the rules of a filter over hosts 0..n-1, which
// host reaches which, and the share of frames lost on each link.
func reach(n int, rules []netns.Rule) (cut [][]bool, loss [][]int) {
	cut, loss = make([][]bool, n), make([][]int, n)
	for i := range n {
		cut[i], loss[i] = make([]bool, n), make([]int, n)
	}
	for _, r := range rules {
		for _, a := range r.From {
			for _, b := range r.To {
				if r.Percent == 0 || r.Percent == 100 {
					cut[a][b] = true
				} else {
					loss[a][b] += r.Percent
				}
			}
		}
	}
	return cut, loss
}

// TestRules checks the filter of each network fault on the layout of a
// campaign: five members on hosts 0-4, etcd on hosts 5-7, the clients on
// host 8.
func TestRules(t *testing.T) {
	nw := &network{members: 5, etcd: 3}
	const hosts = 9
	type link struct{ from, to int }
	for _, tc := range []struct {
		name string
		st   schedule.Step
		// cut lists the links dropped; every other link passes.
		cut []link
		// loss is the share lost on each lossy link.
		loss map[link]int
	}{
		{
			name: "isolate member 2",
			st:   schedule.Step{Kind: schedule.IsolateOne, Sides: [][]int{{2}, {1, 3, 4, 5}}},
			cut:  []link{{1, 0}, {1, 2}, {1, 3}, {1, 4}, {0, 1}, {2, 1}, {3, 1}, {4, 1}},
		},
		{
			name: "halves, etcd 1 with the minority",
			st:   schedule.Step{Kind: schedule.SplitHalves, Sides: [][]int{{1, 2}, {3, 4, 5}}, Etcd: []int{1}},
			cut: []link{
				// {0, 1, 5} against {2, 3, 4, 6, 7}, both ways.
				{0, 2}, {0, 3}, {0, 4}, {0, 6}, {0, 7}, {1, 2}, {1, 3}, {1, 4}, {1, 6}, {1, 7}, {5, 2}, {5, 3}, {5, 4}, {5, 6}, {5, 7},
				{2, 0}, {3, 0}, {4, 0}, {6, 0}, {7, 0}, {2, 1}, {3, 1}, {4, 1}, {6, 1}, {7, 1}, {2, 5}, {3, 5}, {4, 5}, {6, 5}, {7, 5},
			},
		},
		{
			name: "bridge through member 3",
			st:   schedule.Step{Kind: schedule.Bridge, Sides: [][]int{{1, 2, 3}, {3, 4, 5}}},
			cut:  []link{{0, 3}, {0, 4}, {1, 3}, {1, 4}, {3, 0}, {4, 0}, {3, 1}, {4, 1}},
		},
		{
			name: "one way from 1 and 2",
			st:   schedule.Step{Kind: schedule.OneWayCut, Members: []int{1, 2}, To: []int{3, 4, 5}},
			cut:  []link{{0, 2}, {0, 3}, {0, 4}, {1, 2}, {1, 3}, {1, 4}},
		},
		{
			name: "members 4 and 5 off etcd",
			st:   schedule.Step{Kind: schedule.EtcdPartition, Members: []int{4, 5}},
			cut:  []link{{3, 5}, {3, 6}, {3, 7}, {4, 5}, {4, 6}, {4, 7}, {5, 3}, {6, 3}, {7, 3}, {5, 4}, {6, 4}, {7, 4}},
		},
		{
			name: "loss at members 1 and 2",
			st:   schedule.Step{Kind: schedule.PacketLoss, Members: []int{1, 2}, Loss: 20},
			loss: map[link]int{
				{0, 1}: 20, {0, 2}: 20, {0, 3}: 20, {0, 4}: 20, {1, 0}: 20, {1, 2}: 20, {1, 3}: 20, {1, 4}: 20,
				{2, 0}: 20, {3, 0}: 20, {4, 0}: 20, {2, 1}: 20, {3, 1}: 20, {4, 1}: 20,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := nw.rules(tc.st)
			if err != nil {
				t.Fatal(err)
			}
			cut, loss := reach(hosts, rules)
			want := make(map[link]bool)
			for _, l := range tc.cut {
				want[l] = true
			}
			for a := range hosts {
				for b := range hosts {
					if l := (link{a, b}); cut[a][b] != want[l] || loss[a][b] != tc.loss[l] {
						t.Errorf("host %d to host %d: cut %v, loss %d%%; want cut %v, loss %d%%", a, b, cut[a][b], loss[a][b], want[l], tc.loss[l])
					}
				}
			}
		})
	}
	if _, err := nw.rules(schedule.Step{Kind: schedule.KillOne, Members: []int{1}}); err == nil {
		t.Error("a kill has filter rules")
	}
}

// TestDelays checks the delay rules of a PacketDelay: every link that
// touches a delayed member, each way, once.
func TestDelays(t *testing.T) {
	nw := &network{members: 4, etcd: 3}
	st := schedule.Step{Kind: schedule.PacketDelay, Members: []int{2}, Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond}
	got := nw.delays(st)
	want := []netns.DelayRule{
		{From: 0, To: []int{1}},
		{From: 1, To: []int{0, 2, 3}},
		{From: 2, To: []int{1}},
		{From: 3, To: []int{1}},
	}
	if len(got) != len(want) {
		t.Fatalf("rules %+v, want %+v", got, want)
	}
	for i, r := range got {
		if r.From != want[i].From || !slices.Equal(r.To, want[i].To) || r.Delay != st.Delay || r.Jitter != st.Jitter {
			t.Errorf("rule %d: %+v, want %+v with %v±%v", i, r, want[i], st.Delay, st.Jitter)
		}
	}
}
