package membership

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/convoy-gcs/convoy/internal/ddargs"
)

// TestChangeScenarios runs the scripts in testdata/change against Decide.
// Commands (a member is written ID or ID.incarnation, incarnation 1 by
// default):
//
//	view epoch=3 start=100 members=(1,2,3) sent=(5,6,7) [joining=(3)]
//	                          a new current view; clears everything else
//	suspect 2 [3...]          record suspicions
//	join 4 [2.2...]           pending join requests
//	leave 3 [...]             graceful leave requests
//	caughtup 4 [...]          joiners that completed state transfer
//	report from=1 held=(10,4,7) delivered=110 [epoch=3] [inc=1] [as=2]
//	       [topics=3.0.1/0.0.0]
//	                          a final report (as= files it under another ID;
//	                          topics= holds per topic of the view, by sender)
//	topic name=a [mode=atomic] [subs=(1,2)] [start=0] [sent=(0,0,0)]
//	                          adds a topic to the current view
//	request from=1 topic=a [sub=false] [mode=total] [inc=1]
//	                          a topic request (subscribe unless sub=false)
//	decide self=1 [self=(1,2)]
//	                          prints each member's decision
func TestChangeScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/change", func(t *testing.T, path string) {
		var in ChangeInput
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			switch td.Cmd {
			case "view":
				in = ChangeInput{Current: View{
					Epoch:   ddargs.Uint(t, td, "epoch", 1),
					Start:   ddargs.Uint(t, td, "start", 0),
					Members: ddargs.Members(t, td, "members", newMember),
					Sent:    ddargs.Uints(t, td, "sent"),
					Joining: ddargs.Uints(t, td, "joining"),
				}}
				if in.Current.Sent == nil {
					in.Current.Sent = make([]uint64, len(in.Current.Members))
				}
				return describeView(&in.Current)
			case "suspect":
				in.Suspected = addIDs(t, in.Suspected, td)
			case "leave":
				in.Leaves = addIDs(t, in.Leaves, td)
			case "caughtup":
				in.CaughtUp = addIDs(t, in.CaughtUp, td)
			case "join":
				for _, a := range td.CmdArgs {
					in.Joins = append(in.Joins, parseMember(t, a.Key))
				}
			case "report":
				from := ddargs.Uint(t, td, "from", 0)
				inc := ddargs.Uint(t, td, "inc", 1)
				if r := in.Current.Rank(from); r >= 0 && !td.HasArg("inc") {
					inc = in.Current.Members[r].Incarnation
				}
				if in.Reports == nil {
					in.Reports = make(map[ID]Report)
				}
				rep := Report{
					Epoch:     ddargs.Uint(t, td, "epoch", in.Current.Epoch),
					Member:    Member{ID: from, Incarnation: inc},
					Held:      ddargs.Uints(t, td, "held"),
					Delivered: ddargs.Uint(t, td, "delivered", in.Current.Start),
				}
				if td.HasArg("topics") {
					var s string
					td.ScanArgs(t, "topics", &s)
					for _, per := range strings.Split(s, "/") {
						var held []uint64
						for _, f := range strings.Split(per, ".") {
							v, err := strconv.ParseUint(f, 10, 64)
							if err != nil {
								t.Fatal(err)
							}
							held = append(held, v)
						}
						rep.TopicHeld = append(rep.TopicHeld, held)
					}
				}
				in.Reports[ddargs.Uint(t, td, "as", from)] = rep
			case "topic":
				var name, mode string
				td.ScanArgs(t, "name", &name)
				mode = TopicAtomic
				if td.HasArg("mode") {
					td.ScanArgs(t, "mode", &mode)
				}
				in.Current.Topics = append(in.Current.Topics, Topic{
					Name: name, Mode: mode, Subscribers: ddargs.Uints(t, td, "subs"),
					Start: ddargs.Uint(t, td, "start", 0), Sent: ddargs.Uints(t, td, "sent"),
				})
				return describeView(&in.Current)
			case "request":
				from := ddargs.Uint(t, td, "from", 0)
				inc := ddargs.Uint(t, td, "inc", 1)
				if r := in.Current.Rank(from); r >= 0 && !td.HasArg("inc") {
					inc = in.Current.Members[r].Incarnation
				}
				req := TopicRequest{Member: Member{ID: from, Incarnation: inc}, Subscribe: true}
				td.ScanArgs(t, "topic", &req.Topic)
				if td.HasArg("mode") {
					td.ScanArgs(t, "mode", &req.Mode)
				}
				if td.HasArg("sub") {
					td.ScanArgs(t, "sub", &req.Subscribe)
				}
				in.Topics = append(in.Topics, req)
			case "decide":
				var out strings.Builder
				selves := ddargs.Uints(t, td, "self")
				for _, self := range selves {
					d, err := Decide(self, in)
					if len(selves) > 1 {
						fmt.Fprintf(&out, "self=%d: ", self)
					}
					if err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
						continue
					}
					out.WriteString(describeDecision(d))
				}
				return out.String()
			default:
				t.Fatalf("unknown command %q", td.Cmd)
			}
			return "ok"
		})
	})
}

// describeDecision prints a decision on one line, and the proposed record
// if any on a second.
func describeDecision(d Decision) string {
	var b strings.Builder
	leader := "none"
	if d.HasLeader {
		leader = strconv.FormatUint(d.Leader, 10)
	}
	if !d.Change {
		fmt.Fprintf(&b, "no change; leader %s\n", leader)
		return b.String()
	}
	fmt.Fprintf(&b, "change; leader %s; next %s; waiting %s", leader, describeMembers(d.Next), describeIDs(d.Waiting))
	if d.Minority {
		b.WriteString("; MINORITY")
	}
	if d.Excluded {
		b.WriteString("; self excluded")
	}
	b.WriteString("\n")
	if d.Propose != nil {
		b.WriteString("propose " + describeView(d.Propose))
	}
	return b.String()
}

// describeView prints a view record on one line.
func describeView(v *View) string {
	var cut []string
	for _, c := range v.Cut {
		cut = append(cut, fmt.Sprintf("%d:%d", c.ID, c.Seq))
	}
	out := fmt.Sprintf("epoch=%d members=%s cut=(%s) start=%d sent=%s joining=%s\n",
		v.Epoch, describeMembers(v.Members), strings.Join(cut, " "), v.Start, describeIDs(v.Sent), describeIDs(v.Joining))
	for _, tp := range v.Topics {
		var cut []string
		for _, c := range tp.Cut {
			cut = append(cut, fmt.Sprintf("%d:%d", c.ID, c.Seq))
		}
		out += fmt.Sprintf("  topic %s %s subs=%s cut=(%s) start=%d sent=%s\n",
			tp.Name, tp.Mode, describeIDs(tp.Subscribers), strings.Join(cut, " "), tp.Start, describeIDs(tp.Sent))
	}
	return out
}

func describeMembers(ms []Member) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.String())
	}
	return "(" + strings.Join(s, " ") + ")"
}

func describeIDs(ids []uint64) string {
	var s []string
	for _, id := range ids {
		s = append(s, strconv.FormatUint(id, 10))
	}
	return "(" + strings.Join(s, " ") + ")"
}

// addIDs adds the command's bare arguments (suspect 2 3) to set.
func addIDs(t *testing.T, set map[ID]bool, td *datadriven.TestData) map[ID]bool {
	t.Helper()
	if set == nil {
		set = make(map[ID]bool)
	}
	for _, a := range td.CmdArgs {
		id, err := strconv.ParseUint(a.Key, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", td.Cmd, err)
		}
		set[id] = true
	}
	return set
}

// threeMembers is view 3 of members 1, 2, 3 starting at index 100.
func threeMembers() View {
	return View{Epoch: 3, Start: 100, Sent: []uint64{5, 6, 7},
		Members: []Member{{ID: 1, Incarnation: 1}, {ID: 2, Incarnation: 1}, {ID: 3, Incarnation: 1}}}
}

func report(id ID, delivered uint64, held ...uint64) Report {
	return Report{Epoch: 3, Member: Member{ID: id, Incarnation: 1}, Held: held, Delivered: delivered}
}

// TestDecideRejectsBadInput: malformed views and reports get errors that
// name the culprit, never a panic or a proposal.
func TestDecideRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(in *ChangeInput)
		wantErr error
		want    string
	}{
		{"no members", func(in *ChangeInput) { in.Current.Members, in.Current.Sent = nil, nil }, ErrBadView, "no members"},
		{"sent size", func(in *ChangeInput) { in.Current.Sent = []uint64{1} }, ErrBadView, "1 sent counts"},
		{"duplicate member", func(in *ChangeInput) { in.Current.Members[2].ID = 1 }, ErrBadView, "member 1 twice"},
		{"filed under another ID", func(in *ChangeInput) { in.Reports[1] = report(2, 100, 0, 0, 0) }, ErrBadReport, "report from 1: filed by member 2.1"},
		{"from a non-member", func(in *ChangeInput) { in.Reports[9] = report(9, 100, 0, 0, 0) }, ErrBadReport, "report from 9: not a member"},
		{"wrong epoch", func(in *ChangeInput) { r := in.Reports[2]; r.Epoch = 2; in.Reports[2] = r }, ErrBadReport, "report from 2: for view 2"},
		{"held too short", func(in *ChangeInput) { in.Reports[2] = report(2, 100, 1, 2) }, ErrBadReport, "report from 2: holds 2 senders"},
		{"delivered before start", func(in *ChangeInput) { in.Reports[2] = report(2, 99, 1, 2, 3) }, ErrBadReport, "report from 2: delivered 99 before"},
		{"delivered beyond cut", func(in *ChangeInput) { in.Reports[2] = report(2, 107, 1, 2, 3) }, ErrBadReport, "report from 2: delivered 107 beyond the cut's end 106"},
		{"leaver delivered beyond cut", func(in *ChangeInput) {
			in.Suspected, in.Leaves = nil, map[ID]bool{3: true}
			in.Reports[3] = report(3, 120, 9, 9, 9)
		}, ErrBadReport, "report from 3: delivered 120 beyond"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := threeMembers()
			in := ChangeInput{Current: cur, Suspected: map[ID]bool{3: true},
				Reports: map[ID]Report{1: report(1, 100, 1, 2, 3), 2: report(2, 100, 1, 2, 3)}}
			tc.edit(&in)
			d, err := Decide(1, in)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.want)
			}
			if !reflect.DeepEqual(d, Decision{}) {
				t.Fatalf("decision %+v alongside an error", d)
			}
		})
	}
}

// TestDecideIgnoresIrrelevantReports: reports from suspected members and
// from other incarnations are not needed, so nothing in them can hold up
// the change.
func TestDecideIgnoresIrrelevantReports(t *testing.T) {
	in := ChangeInput{Current: threeMembers(), Suspected: map[ID]bool{3: true}, Reports: map[ID]Report{
		1: report(1, 104, 2, 2, 2),
		2: report(2, 104, 2, 2, 2),
		3: {Epoch: 1, Member: Member{ID: 3, Incarnation: 1}, Held: []uint64{99}, Delivered: 5000}, // suspected
	}}
	old := report(2, 999, 9)
	old.Member.Incarnation = 0
	d, err := Decide(1, in)
	if err != nil || d.Propose == nil || d.Propose.Start != 106 {
		t.Fatalf("Decide = %+v, %v; want a proposal starting at 106", d, err)
	}
	in.Reports[2] = old // an earlier incarnation's report does not count
	d, err = Decide(1, in)
	if err != nil || d.Propose != nil || !reflect.DeepEqual(d.Waiting, []ID{2}) {
		t.Fatalf("Decide = %+v, %v; want to wait for 2", d, err)
	}
}

// TestDecideDoesNotAlias: Decide leaves its input alone and returns slices
// that do not share memory with it or with each other.
func TestDecideDoesNotAlias(t *testing.T) {
	in := ChangeInput{Current: threeMembers(), Leaves: map[ID]bool{2: true}, Joins: []Member{{ID: 4, Incarnation: 1}},
		Reports: map[ID]Report{1: report(1, 100, 1, 1, 1), 3: report(3, 100, 1, 1, 1)}}
	before := threeMembers()
	d, err := Decide(1, in)
	if err != nil || d.Propose == nil {
		t.Fatalf("Decide = %+v, %v", d, err)
	}
	d.Propose.Members[0].ID = 77
	d.Propose.Sent[0] = 77
	d.Next[1].ID = 78
	if !reflect.DeepEqual(in.Current, before) || d.Next[0].ID != 1 || d.Propose.Members[1].ID != 3 {
		t.Fatalf("input or decision aliased: current %+v, next %v, proposal %v", in.Current, d.Next, d.Propose.Members)
	}
}

// TestDecideSameForEveryone: members that read the same snapshot agree on
// everything but who proposes, and only the leader does.
func TestDecideSameForEveryone(t *testing.T) {
	in := ChangeInput{Current: threeMembers(), Suspected: map[ID]bool{1: true},
		Reports: map[ID]Report{2: report(2, 101, 1, 1, 1), 3: report(3, 102, 2, 1, 1)}}
	var decisions []Decision
	for self := ID(1); self <= 4; self++ {
		d, err := Decide(self, in)
		if err != nil {
			t.Fatal(err)
		}
		if (d.Propose != nil) != (self == 2) {
			t.Fatalf("self %d: proposal %v", self, d.Propose)
		}
		if d.Excluded != (self == 1) {
			t.Fatalf("self %d: excluded=%v", self, d.Excluded)
		}
		d.Propose, d.Excluded = nil, false
		decisions = append(decisions, d)
	}
	for _, d := range decisions[1:] {
		if !reflect.DeepEqual(d, decisions[0]) {
			t.Fatalf("decisions differ: %+v vs %+v", d, decisions[0])
		}
	}
}

// parseMember reads ID or ID.incarnation (incarnation 1 by default).
func parseMember(t *testing.T, s string) Member {
	t.Helper()
	return newMember(ddargs.Member(t, s))
}

func newMember(id, incarnation uint64) Member {
	return Member{ID: id, Incarnation: incarnation}
}
