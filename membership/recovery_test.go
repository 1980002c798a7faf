package membership

import (
	"errors"
	"testing"
)

// TestDecideRecovery: when the group restarts from its members' logs
// after most of its last view failed, and from which log.
func TestDecideRecovery(t *testing.T) {
	old := func(id ID) Member { return Member{ID: id, Incarnation: 1} }
	fresh := func(id ID) Member { return Member{ID: id, Incarnation: 2} }
	// View 5 of members 1, 2, 3 starts at 100; 4 joins in it and has not
	// caught up.
	cur := View{Epoch: 5, Start: 100, Members: []Member{old(1), old(2), old(3)}, Sent: []uint64{0, 0, 0}}
	claim := func(id ID, epoch, last uint64) Recovery {
		return Recovery{Epoch: 5, Member: fresh(id), LogEpoch: epoch, LogLast: last, InView: true}
	}
	regs := func(ms ...Member) map[ID]Member {
		out := make(map[ID]Member)
		for _, m := range ms {
			out[m.ID] = m
		}
		return out
	}
	claims := func(rs ...Recovery) map[ID]Recovery {
		out := make(map[ID]Recovery)
		for _, r := range rs {
			out[r.Member.ID] = r
		}
		return out
	}
	for _, tc := range []struct {
		name                   string
		in                     RecoveryInput
		needed, dead, complete bool
		leader                 ID
		// propose: Start, members and joiners of the recovered view (nil:
		// none yet).
		start   uint64
		members []ID
		joining []ID
		wantErr error
	}{
		{
			name:   "a majority alive: no recovery",
			in:     RecoveryInput{Current: cur, Registered: regs(old(1), old(2), fresh(3)), Recoveries: claims(claim(3, 5, 103))},
			needed: false, dead: false,
		},
		{
			name:   "one survivor: recovery needed, but it must give way first",
			in:     RecoveryInput{Current: cur, Registered: regs(old(1), fresh(2), fresh(3)), Recoveries: claims(claim(2, 5, 103), claim(3, 5, 101))},
			needed: true, dead: false, leader: 2,
		},
		{
			name:   "all restarted, a minority claimed: wait",
			in:     RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)), Recoveries: claims(claim(2, 5, 103))},
			needed: true, dead: true, leader: 2,
		},
		{
			name: "a majority claimed: the highest log wins, the other joins",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(2, 5, 101), claim(3, 5, 103))},
			needed: true, dead: true, leader: 2, start: 103, members: []ID{2, 3}, joining: []ID{2},
		},
		{
			name: "highest epoch beats a longer log of an older epoch",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(1, 0, 100), claim(2, 0, 100), claim(3, 5, 102))},
			needed: true, dead: true, complete: true, leader: 1, start: 102, members: []ID{1, 2, 3}, joining: []ID{1, 2},
		},
		{
			name: "equal logs all hold the state",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(1, 5, 102), claim(3, 5, 102))},
			needed: true, dead: true, leader: 1, start: 102, members: []ID{1, 3},
		},
		{
			name: "a claim from a registration that is gone does not count",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1)),
				Recoveries: claims(claim(1, 5, 102), claim(3, 5, 102))},
			needed: true, dead: true, leader: 1,
		},
		{
			name: "a joiner that never caught up neither votes nor wins",
			in: RecoveryInput{
				Current:    View{Epoch: 5, Start: 100, Members: []Member{old(1), old(2), old(3), old(4)}, Sent: []uint64{0, 0, 0, 0}, Joining: []ID{4}},
				Registered: regs(fresh(1), fresh(2), fresh(4)),
				Recoveries: claims(
					Recovery{Epoch: 5, Member: fresh(1), LogEpoch: 0, LogLast: 100, InView: true},
					Recovery{Epoch: 5, Member: fresh(2), LogEpoch: 5, LogLast: 101, InView: true},
					Recovery{Epoch: 5, Member: fresh(4), LogEpoch: 5, LogLast: 104, InView: true}),
			},
			needed: true, dead: true, leader: 1, start: 101, members: []ID{1, 2, 4}, joining: []ID{1, 4},
		},
		{
			name: "a log that went beyond what may stand receives the state",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(Recovery{Epoch: 5, Member: fresh(1), LogEpoch: 5, LogLast: 102, Beyond: true, InView: true}, claim(2, 5, 102))},
			needed: true, dead: true, leader: 1, start: 102, members: []ID{1, 2}, joining: []ID{1},
		},
		{
			name: "wiped disks do not make a majority",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(1, 5, 102), Recovery{Epoch: 5, Member: fresh(2)}, Recovery{Epoch: 5, Member: fresh(3)})},
			needed: true, dead: true, complete: false, leader: 1,
		},
		{
			name: "a wiped disk joins the restart of the others",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(1, 5, 102), claim(2, 0, 100), Recovery{Epoch: 5, Member: fresh(3)})},
			needed: true, dead: true, leader: 1, start: 102, members: []ID{1, 2, 3}, joining: []ID{2, 3},
		},
		{
			name: "a claim of the view's messages ending at its start is refused",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(1, 5, 100), claim(3, 0, 100))},
			wantErr: ErrBadRecovery,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecideRecovery(tc.in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Needed != tc.needed || d.Dead != tc.dead || d.Complete != tc.complete || d.Leader != tc.leader {
				t.Fatalf("needed %v dead %v complete %v leader %d; want %v %v %v %d",
					d.Needed, d.Dead, d.Complete, d.Leader, tc.needed, tc.dead, tc.complete, tc.leader)
			}
			if tc.members == nil {
				if d.Propose != nil {
					t.Fatalf("proposed %+v, want nothing yet", *d.Propose)
				}
				return
			}
			p := d.Propose
			if p == nil {
				t.Fatal("no view proposed")
			}
			var ids []ID
			for _, m := range p.Members {
				ids = append(ids, m.ID)
				if m.Incarnation != 2 {
					t.Fatalf("member %v is not the restarted incarnation", m)
				}
			}
			if p.Epoch != 6 || !p.Recovered || p.Start != tc.start || !equalIDs(ids, tc.members) || !equalIDs(p.Joining, tc.joining) {
				t.Fatalf("proposed epoch %d recovered %v start %d members %v joining %v; want 6 true %d %v %v",
					p.Epoch, p.Recovered, p.Start, ids, p.Joining, tc.start, tc.members, tc.joining)
			}
			if err := validRecord(p); err != nil {
				t.Fatal(err)
			}
			if err := checkRecovered(tc.in, p); err != nil {
				t.Fatalf("checkRecovered refuses the proposal: %v", err)
			}
		})
	}
}

func equalIDs(a, b []ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
