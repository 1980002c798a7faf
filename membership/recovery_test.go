package membership

import (
	"errors"
	"slices"
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
		// suffixes: the joiners that keep their logs and receive the
		// messages after them.
		suffixes []Suffix
		wantErr  error
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
			suffixes: []Suffix{{ID: 2, From: 102, Donor: 3}},
		},
		{
			name: "highest epoch beats a longer log of an older epoch",
			in: RecoveryInput{Current: cur, Registered: regs(fresh(1), fresh(2), fresh(3)),
				Recoveries: claims(claim(1, 0, 100), claim(2, 0, 100), claim(3, 5, 102))},
			needed: true, dead: true, complete: true, leader: 1, start: 102, members: []ID{1, 2, 3}, joining: []ID{1, 2},
			suffixes: []Suffix{{ID: 1, From: 101, Donor: 3}, {ID: 2, From: 101, Donor: 3}},
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
			// The joiner of the failed view keeps no log of its own.
			suffixes: []Suffix{{ID: 1, From: 101, Donor: 2}},
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
			// The wiped disk holds nothing to keep.
			suffixes: []Suffix{{ID: 2, From: 101, Donor: 1}},
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
			if !slices.Equal(p.Suffixes, tc.suffixes) {
				t.Fatalf("proposed suffixes %+v, want %+v", p.Suffixes, tc.suffixes)
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

// TestTookPart: whether a restarted member's log counts for the restart
// of the last view, also when no member installed that view.
func TestTookPart(t *testing.T) {
	m := func(ids ...ID) []Member {
		var out []Member
		for _, id := range ids {
			out = append(out, Member{ID: id, Incarnation: 1})
		}
		return out
	}
	// Views 1 to 4 of members 1, 2, 3: 3 joins in view 2; view 3 is
	// recovered from view 2's logs (3's was not chosen: it joins again);
	// view 4 follows by a view change; view 5 is recovered from view 4,
	// and view 6 from view 5 (2's log was not chosen).
	views := map[uint64]View{
		1: {Epoch: 1, Members: m(1, 2)},
		2: {Epoch: 2, Members: m(1, 2, 3), Joining: []ID{3}},
		3: {Epoch: 3, Members: m(1, 2, 3), Joining: []ID{3}, Recovered: true},
		4: {Epoch: 4, Members: m(1, 2, 3)},
		5: {Epoch: 5, Members: m(1, 2, 3), Recovered: true},
		6: {Epoch: 6, Members: m(1, 2), Joining: []ID{2}, Recovered: true},
	}
	errEtcd := errors.New("etcd unreachable")
	for _, tc := range []struct {
		name   string
		id     ID
		epoch  uint64
		logged []uint64
		// gone lists the views no longer in the store; broken makes
		// reading any view fail.
		gone    []uint64
		broken  bool
		want    bool
		wantErr error
	}{
		{name: "the log holds the view's record", id: 1, epoch: 4, logged: []uint64{1, 2, 3, 4}, want: true},
		{name: "kept by a view change, the log holds the view before", id: 2, epoch: 4, logged: []uint64{1, 2, 3}, want: true},
		{name: "kept by a view change, the log holds an older view only", id: 2, epoch: 4, logged: []uint64{1, 2}},
		{name: "wiped", id: 1, epoch: 4},
		{name: "not a member", id: 7, epoch: 4, logged: []uint64{1, 2, 3}},
		{name: "a joiner that never installed the view", id: 3, epoch: 3, logged: []uint64{2}},
		{name: "a joiner that installed the view", id: 3, epoch: 3, logged: []uint64{2, 3}, want: true},
		{name: "the first view, never installed", id: 1, epoch: 1},
		{name: "kept by a recovery, the log holds the view recovered", id: 1, epoch: 5, logged: []uint64{1, 2, 3, 4}, want: true},
		{name: "kept by two recoveries and a view change", id: 1, epoch: 6, logged: []uint64{1, 2, 3}, want: true},
		{name: "kept by two recoveries and a view change, wiped", id: 1, epoch: 6},
		{name: "a joiner of a recovered view", id: 2, epoch: 6, logged: []uint64{1, 2, 3}},
		{name: "kept by a recovery, the view recovered is gone", id: 1, epoch: 6, logged: []uint64{1, 2, 3}, gone: []uint64{5}},
		{name: "kept by a recovery, the store unreachable", id: 1, epoch: 6, logged: []uint64{1, 2, 3}, broken: true, wantErr: errEtcd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logged := make(map[uint64]bool)
			for _, e := range tc.logged {
				logged[e] = true
			}
			view := func(e uint64) (View, error) {
				v, ok := views[e]
				switch {
				case tc.broken:
					return View{}, errEtcd
				case !ok || slices.Contains(tc.gone, e):
					return View{}, ErrNoView
				}
				return v, nil
			}
			got, err := TookPart(tc.id, views[tc.epoch], logged, view)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("TookPart: %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
