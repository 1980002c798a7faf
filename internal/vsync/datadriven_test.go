package vsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/convoy-gcs/convoy/internal/ddargs"

	"github.com/convoy-gcs/convoy/membership"
)

// TestCoreScenarios runs the scripts in testdata/core: one or more Cores
// driven by a model of the group's etcd state, a virtual clock, and the
// outcomes of the actions they return. Each command prints what the cores
// returned and every phase they changed to. A member is written ID or
// ID.incarnation (incarnation 1 by default); times and durations are Go
// durations on the virtual clock, which starts at 0.
//
// Settings and members:
//
//	init [durable] [initial=3] [ttl=2s] [suspect=200ms] [heartbeat=10ms] [restart-wait=1s]
//	                      every core's Config; forgets everything else
//	start 1 2.2 ...       new cores (Joining), each registered in etcd
//	crash 1 ...           the members' processes die: their cores are gone
//	                      (their registrations stay until unregistered)
//
// The etcd state (each change is one revision):
//
//	view epoch=3 members=(1,2,3) [start=100] [sent=(5,6,7)] [joining=(3)] [recovered]
//	     [cut=(4,2,0)]    a view committed by others, now current (the cut
//	                      counts per member of the previous view)
//	register 1.2 ...      registrations (leases) in etcd
//	unregister 1 ...      registrations gone with their leases
//	join 4.2 [log=(last,epoch,sender,seq)]
//	                      a join request, with the joiner's log position
//	leave 3               a leave request
//	suspect 3 by=1        a suspicion recorded in the current view
//	report 1 held=(4,2,0) delivered=104 [hears=(1,2)]
//	                      a final report for the current view
//	caughtup 4            a caught-up mark of the member's registered incarnation
//	claim 2.2 last=120    a claim to restart the current view from a log
//	                      whose last usable entry is 120 [beyond: the log
//	                      goes past it]; claim 3.2 wiped: a log that took
//	                      part in no view (a wiped or replaced disk)
//	state                 the etcd state
//
// The cores:
//
//	read [1 2 ...]        the named cores (default: every core that has
//	                      not ended) read the state, at the current time
//	advance 30ms          the clock moves; every core ticks
//	commit 1 [suffix=(3)] member 1's last bootstrap, proposal or restart
//	                      goes to etcd: it takes effect only if the view it
//	                      follows is still current and the store's rules
//	                      hold; the joiners in suffix get the messages after
//	                      their logs from member 1's log
//	wedge 1               the member's multicast group broke: the runtime wedges it
//	entered 4             the member opened the view its last enter named
//	installed 1           the member ended its view and opened the one its
//	                      last install named (read from etcd if need be)
//	ending 1              the member ends its view to install the next one
//	                      although it was active (the runtime does so first)
//	rereported 1          the member wrote its final report again (whom it
//	                      hears changed)
//	holds 4               the member holds the group's state: the runtime
//	                      writes its caught-up mark (caughtup: it landed)
//	excluded 1            the member left its view; it comes back as the next incarnation
//	left 1, failed 1      the member left the group on purpose, or stopped
//	phases                every core's phase, incarnation, view and deadline
func TestCoreScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		var h *harness
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd == "init" {
				h = newHarness(t, td)
				return "ok"
			}
			if h == nil {
				t.Fatalf("%s: %s before init", td.Pos, td.Cmd)
			}
			h.out.Reset()
			h.run(t, td)
			if h.out.Len() == 0 {
				return "ok"
			}
			return h.out.String()
		})
	})
}

// harness holds the cores, the etcd state they read and the clock.
type harness struct {
	cfg Config
	now time.Duration
	// st is the etcd state; views holds every committed view by epoch;
	// caught holds the caught-up marks by member ID.
	st     membership.State
	views  map[uint64]membership.View
	caught map[membership.ID]membership.Member
	cores  map[membership.ID]*Core
	// last holds the actions each member's core returned since its last
	// outcome (entered, installed, excluded), for the outcome commands
	// and commit.
	last map[membership.ID][]Action
	out  strings.Builder
}

func newHarness(t *testing.T, td *datadriven.TestData) *harness {
	h := &harness{
		views:  make(map[uint64]membership.View),
		caught: make(map[membership.ID]membership.Member),
		cores:  make(map[membership.ID]*Core),
		last:   make(map[membership.ID][]Action),
	}
	h.cfg = Config{
		InitialMembers:    int(ddargs.Uint(t, td, "initial", 3)),
		Durable:           td.HasArg("durable"),
		LeaseTTL:          ddargs.Duration(t, td, "ttl", 2*time.Second),
		SuspectTimeout:    ddargs.Duration(t, td, "suspect", 200*time.Millisecond),
		HeartbeatInterval: ddargs.Duration(t, td, "heartbeat", 10*time.Millisecond),
		RestartWait:       ddargs.Duration(t, td, "restart-wait", time.Second),
		// The core's warnings and errors (a transition it does not allow
		// among them) appear in the output; with "info", its
		// informational messages too.
		Logger: slog.New(&outHandler{out: &h.out, info: td.HasArg("info")}),
	}
	h.st = membership.State{
		Registered: make(map[membership.ID]membership.Member),
		JoinLogs:   make(map[membership.ID]membership.LogPos),
		Leaves:     make(map[membership.ID]bool),
		Suspects:   make(map[membership.ID]map[membership.ID]string),
		Reports:    make(map[membership.ID]membership.Report),
		Recoveries: make(map[membership.ID]membership.Recovery),
	}
	return h
}

func (h *harness) run(t *testing.T, td *datadriven.TestData) {
	switch td.Cmd {
	case "start":
		for _, m := range bareMembers(t, td) {
			h.cores[m.ID] = NewCore(h.cfg, m)
			h.last[m.ID] = nil
			h.st.Registered[m.ID] = m
		}
		h.changed()
	case "view":
		v := membership.View{
			Epoch:     ddargs.Uint(t, td, "epoch", 1),
			Start:     ddargs.Uint(t, td, "start", 0),
			Members:   ddargs.Members(t, td, "members", newMember),
			Sent:      ddargs.Uints(t, td, "sent"),
			Joining:   ddargs.Uints(t, td, "joining"),
			Recovered: td.HasArg("recovered"),
		}
		if v.Sent == nil {
			v.Sent = make([]uint64, len(v.Members))
		}
		if cut := ddargs.Uints(t, td, "cut"); cut != nil {
			prev, ok := h.views[v.Epoch-1]
			if !ok || len(prev.Members) != len(cut) {
				t.Fatalf("%s: a cut needs view %d, with one count per member", td.Pos, v.Epoch-1)
			}
			for i, m := range prev.Members {
				v.Cut = append(v.Cut, membership.SenderCut{ID: m.ID, Seq: cut[i]})
			}
		}
		h.setView(v)
	case "crash":
		for _, id := range h.selected(t, td) {
			delete(h.cores, id)
			delete(h.last, id)
		}
	case "register":
		for _, m := range bareMembers(t, td) {
			h.st.Registered[m.ID] = m
		}
		h.changed()
	case "unregister":
		for _, m := range bareMembers(t, td) {
			delete(h.st.Registered, m.ID)
		}
		h.changed()
	case "join":
		m := bareMembers(t, td)[0]
		h.st.Joins = slices.DeleteFunc(h.st.Joins, func(j membership.Member) bool { return j.ID == m.ID })
		h.st.Joins = append(h.st.Joins, m)
		slices.SortFunc(h.st.Joins, func(a, b membership.Member) int { return cmp.Compare(a.ID, b.ID) })
		delete(h.st.JoinLogs, m.ID)
		if pos := ddargs.Uints(t, td, "log"); pos != nil {
			if len(pos) != 4 {
				t.Fatalf("%s: log=(last,epoch,sender,seq)", td.Pos)
			}
			h.st.JoinLogs[m.ID] = membership.LogPos{Last: pos[0], Epoch: pos[1], Sender: pos[2], Seq: pos[3]}
		}
		h.changed()
	case "leave":
		for _, m := range bareMembers(t, td) {
			h.st.Leaves[m.ID] = true
		}
		h.changed()
	case "suspect":
		by := ddargs.Uint(t, td, "by", 0)
		for _, m := range bareMembers(t, td) {
			if h.st.Suspects[m.ID] == nil {
				h.st.Suspects[m.ID] = make(map[membership.ID]string)
			}
			h.st.Suspects[m.ID][by] = "no heartbeat"
		}
		h.changed()
	case "report":
		id := bareMembers(t, td)[0].ID
		cur := &h.st.Current
		rank := cur.Rank(id)
		if rank < 0 {
			t.Fatalf("%s: %d is not a member of view %d", td.Pos, id, cur.Epoch)
		}
		h.st.Reports[id] = membership.Report{
			Epoch: cur.Epoch, Member: cur.Members[rank],
			Held: ddargs.Uints(t, td, "held"), Delivered: ddargs.Uint(t, td, "delivered", cur.Start),
			Hears: ddargs.Uints(t, td, "hears"),
		}
		h.changed()
	case "caughtup":
		for _, m := range bareMembers(t, td) {
			reg, ok := h.st.Registered[m.ID]
			if !ok {
				t.Fatalf("%s: %d is not registered", td.Pos, m.ID)
			}
			h.caught[m.ID] = reg
		}
		h.changed()
	case "claim":
		m := bareMembers(t, td)[0]
		cur := &h.st.Current
		rc := membership.Recovery{Epoch: cur.Epoch, Member: m, InView: !td.HasArg("wiped"), Beyond: td.HasArg("beyond")}
		if rc.InView {
			rc.LogLast = ddargs.Uint(t, td, "last", cur.Start)
			if rc.LogLast > cur.Start {
				rc.LogEpoch = cur.Epoch
			}
		}
		h.st.Recoveries[m.ID] = rc
		h.changed()
	case "state":
		h.describeState()
	case "read":
		now := int64(h.now)
		for _, id := range h.selected(t, td) {
			st := h.snapshot()
			h.step(id, func(c *Core) []Action { return c.State(now, &st) })
		}
	case "advance":
		h.now += ddargs.Duration(t, td, "", 0)
		if len(td.CmdArgs) != 1 {
			t.Fatalf("%s: advance <duration>", td.Pos)
		}
		fmt.Fprintf(&h.out, "t=%v\n", h.now)
		for _, id := range h.ids() {
			h.step(id, func(c *Core) []Action { return c.Tick(int64(h.now)) })
		}
	case "commit":
		for _, id := range h.selected(t, td) {
			h.commit(id, ddargs.Uints(t, td, "suffix"))
		}
	case "wedge":
		for _, id := range h.selected(t, td) {
			h.step(id, func(c *Core) []Action {
				if !c.Wedge(int64(h.now)) {
					fmt.Fprintf(&h.out, "m%d: not active: nothing to wedge\n", id)
				}
				return nil
			})
		}
	case "entered":
		for _, id := range h.selected(t, td) {
			a, ok := h.pending(id, Enter)
			if !ok {
				continue
			}
			h.step(id, func(c *Core) []Action { c.Entered(a.View); return nil })
			h.last[id] = nil
		}
	case "installed":
		for _, id := range h.selected(t, td) {
			a, ok := h.pending(id, Install)
			if !ok {
				continue
			}
			rec := a.View
			if rec == nil {
				v, ok := h.views[a.Epoch]
				if !ok {
					t.Fatalf("%s: view %d was never committed", td.Pos, a.Epoch)
				}
				rec = &v
			}
			if r := rec.Rank(id); r < 0 || rec.Members[r] != h.cores[id].Self() {
				t.Fatalf("%s: m%d is not a member of view %d: it is excluded, not installed", td.Pos, id, rec.Epoch)
			}
			h.step(id, func(c *Core) []Action { c.Installed(rec); return nil })
			h.last[id] = nil
		}
	case "excluded":
		for _, id := range h.selected(t, td) {
			next := h.cores[id].Self()
			next.Incarnation++
			var wait time.Duration
			h.step(id, func(c *Core) []Action { wait = c.Excluded(int64(h.now), next); return nil })
			fmt.Fprintf(&h.out, "m%d: rejoins as %v after %v\n", id, next, wait)
			h.last[id] = nil
		}
	case "ending":
		for _, id := range h.selected(t, td) {
			h.step(id, func(c *Core) []Action { c.Ending(int64(h.now)); return nil })
		}
	case "rereported":
		for _, id := range h.selected(t, td) {
			h.step(id, func(c *Core) []Action { c.Rereported(int64(h.now)); return nil })
		}
	case "holds":
		for _, id := range h.selected(t, td) {
			h.step(id, func(c *Core) []Action { c.CaughtUp(int64(h.now)); return nil })
		}
	case "left":
		for _, id := range h.selected(t, td) {
			h.step(id, func(c *Core) []Action { c.Left(); return nil })
		}
	case "failed":
		for _, id := range h.selected(t, td) {
			h.step(id, func(c *Core) []Action { c.Failed(); return nil })
		}
	case "phases":
		for _, id := range h.ids() {
			c := h.cores[id]
			fmt.Fprintf(&h.out, "m%d: %v as %v", id, c.Phase(), c.Self())
			if c.Phase().InView() {
				fmt.Fprintf(&h.out, " in view %d", c.epoch)
			}
			if d := c.Deadline(); d != 0 {
				fmt.Fprintf(&h.out, "; next tick due at t=%v", time.Duration(d))
			}
			h.out.WriteString("\n")
		}
	default:
		t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	}
}

// step runs f on member id's core and prints the phase it moved to, if
// any, and the actions it returned.
func (h *harness) step(id membership.ID, f func(c *Core) []Action) {
	c := h.cores[id]
	before := c.Phase()
	acts := f(c)
	if after := c.Phase(); after != before {
		fmt.Fprintf(&h.out, "m%d: %v → %v\n", id, before, after)
	}
	for _, a := range acts {
		fmt.Fprintf(&h.out, "m%d: %s\n", id, describeAction(a))
	}
	h.last[id] = append(h.last[id], acts...)
}

// pending returns member id's last action of kind k, if any.
func (h *harness) pending(id membership.ID, k ActionKind) (Action, bool) {
	for _, a := range slices.Backward(h.last[id]) {
		if a.Kind == k {
			return a, true
		}
	}
	fmt.Fprintf(&h.out, "m%d: no %v to carry out\n", id, k)
	return Action{}, false
}

// commit carries out member id's last bootstrap, proposal or restart
// against the etcd state, with the checks the store makes in the same
// transaction. The joiners listed in suffix receive the messages after
// their logs' ends from the leader's log (its runtime adds them to a
// proposal when its own log holds the joiner's last entry).
func (h *harness) commit(id membership.ID, suffix []membership.ID) {
	var a Action
	for _, b := range slices.Backward(h.last[id]) {
		if b.Kind == Bootstrap || b.Kind == Propose || b.Kind == Recover {
			a = b
			break
		}
	}
	if a.View == nil {
		fmt.Fprintf(&h.out, "m%d: no view to commit\n", id)
		return
	}
	v := *a.View
	for _, j := range suffix {
		pos, ok := a.Logs[j]
		if !ok {
			fmt.Fprintf(&h.out, "m%d: joiner %d gave no log position\n", id, j)
			return
		}
		v.Suffixes = append(v.Suffixes, membership.Suffix{ID: j, From: pos.Last + 1, Donor: id})
	}
	cur := &h.st.Current
	var err error
	switch {
	case a.Kind == Bootstrap && cur.Epoch != 0:
		err = errors.New("a view exists already")
	case a.Kind != Bootstrap && cur.Epoch != v.Epoch-1:
		err = fmt.Errorf("view %d is current", cur.Epoch)
	case a.Kind == Propose && !membership.HasMajority(cur, func(id membership.ID) bool { return h.caughtUp()[id] }, v.Members):
		err = errors.New("no majority of the current view")
	case a.Kind == Recover:
		d, derr := membership.DecideRecovery(membership.RecoveryInput{Current: *cur, Registered: h.st.Registered, CaughtUp: h.caughtUp(), Recoveries: h.st.Recoveries})
		switch {
		case derr != nil:
			err = derr
		case d.Propose == nil || describeView(d.Propose) != describeView(&v):
			err = errors.New("the claims changed")
		}
	}
	if err != nil {
		fmt.Fprintf(&h.out, "m%d: view %d refused: %v\n", id, v.Epoch, err)
		return
	}
	// The store drops the join requests a view admits and the leave
	// requests of the members it leaves out.
	h.st.Joins = slices.DeleteFunc(h.st.Joins, func(j membership.Member) bool {
		if v.Rank(j.ID) >= 0 {
			delete(h.st.JoinLogs, j.ID)
			return true
		}
		return false
	})
	for id := range h.st.Leaves {
		if v.Rank(id) < 0 {
			delete(h.st.Leaves, id)
		}
	}
	fmt.Fprintf(&h.out, "m%d: committed %s", id, describeView(&v))
	h.setView(v)
}

// setView makes v the current view; the suspicions, reports and claims
// of the previous one no longer show.
func (h *harness) setView(v membership.View) {
	h.views[v.Epoch] = v
	h.st.Current = v
	clear(h.st.Suspects)
	clear(h.st.Reports)
	clear(h.st.Recoveries)
	h.changed()
}

// changed counts one more etcd revision.
func (h *harness) changed() { h.st.Revision++ }

// caughtUp returns the members with a caught-up mark, a member of the
// current view only for its incarnation there.
func (h *harness) caughtUp() map[membership.ID]bool {
	out := make(map[membership.ID]bool)
	for id, m := range h.caught {
		if r := h.st.Current.Rank(id); r < 0 || h.st.Current.Members[r].Incarnation == m.Incarnation {
			out[id] = true
		}
	}
	return out
}

// snapshot returns a copy of the etcd state, as one read returns it.
func (h *harness) snapshot() membership.State {
	st := h.st
	st.Current.Members = slices.Clone(st.Current.Members)
	st.Registered = maps.Clone(st.Registered)
	st.Joins = slices.Clone(st.Joins)
	st.JoinLogs = maps.Clone(st.JoinLogs)
	st.Leaves = maps.Clone(st.Leaves)
	st.Suspects = make(map[membership.ID]map[membership.ID]string)
	for id, by := range h.st.Suspects {
		st.Suspects[id] = maps.Clone(by)
	}
	st.Reports = maps.Clone(st.Reports)
	st.Recoveries = maps.Clone(st.Recoveries)
	st.CaughtUp = h.caughtUp()
	return st
}

// ids returns the members' IDs in order.
func (h *harness) ids() []membership.ID { return slices.Sorted(maps.Keys(h.cores)) }

// selected returns the members a command names, or every member whose
// core has not ended.
func (h *harness) selected(t *testing.T, td *datadriven.TestData) []membership.ID {
	t.Helper()
	var out []membership.ID
	for _, m := range bareMembers(t, td) {
		if h.cores[m.ID] == nil {
			t.Fatalf("%s: no member %d", td.Pos, m.ID)
		}
		out = append(out, m.ID)
	}
	if len(td.CmdArgs) == 0 {
		for _, id := range h.ids() {
			if !h.cores[id].Phase().Final() {
				out = append(out, id)
			}
		}
	}
	return out
}

func (h *harness) describeState() {
	st := h.snapshot()
	fmt.Fprintf(&h.out, "revision %d\nview %s", st.Revision, describeView(&st.Current))
	var regs []string
	for _, id := range slices.Sorted(maps.Keys(st.Registered)) {
		regs = append(regs, st.Registered[id].String())
	}
	fmt.Fprintf(&h.out, "registered (%s)\n", strings.Join(regs, " "))
	if len(st.Joins) > 0 {
		fmt.Fprintf(&h.out, "joins %s\n", describeMembers(st.Joins))
	}
	if len(st.Leaves) > 0 {
		fmt.Fprintf(&h.out, "leaves %s\n", describeIDs(slices.Sorted(maps.Keys(st.Leaves))))
	}
	for _, id := range slices.Sorted(maps.Keys(st.Suspects)) {
		fmt.Fprintf(&h.out, "suspect %d by %s\n", id, describeIDs(slices.Sorted(maps.Keys(st.Suspects[id]))))
	}
	for _, id := range slices.Sorted(maps.Keys(st.Reports)) {
		r := st.Reports[id]
		fmt.Fprintf(&h.out, "report %v held=%s delivered=%d hears=%s\n", r.Member, describeIDs(r.Held), r.Delivered, describeIDs(r.Hears))
	}
	if len(st.CaughtUp) > 0 {
		fmt.Fprintf(&h.out, "caught up %s\n", describeIDs(slices.Sorted(maps.Keys(st.CaughtUp))))
	}
	for _, id := range slices.Sorted(maps.Keys(st.Recoveries)) {
		rc := st.Recoveries[id]
		fmt.Fprintf(&h.out, "claim %v log=(%d,%d) beyond=%v in-view=%v\n", rc.Member, rc.LogEpoch, rc.LogLast, rc.Beyond, rc.InView)
	}
}

// describeAction prints an action on one line.
func describeAction(a Action) string {
	switch a.Kind {
	case Bootstrap, Recover:
		return a.Kind.String() + " " + strings.TrimSuffix(describeView(a.View), "\n")
	case Propose:
		s := "propose " + strings.TrimSuffix(describeView(a.View), "\n")
		for _, id := range slices.Sorted(maps.Keys(a.Logs)) {
			p := a.Logs[id]
			s += fmt.Sprintf(" log[%d]=(%d,%d,%d,%d)", id, p.Last, p.Epoch, p.Sender, p.Seq)
		}
		return s
	case Enter:
		return fmt.Sprintf("enter view %d at rank %d", a.View.Epoch, a.Rank)
	case Install:
		if a.View == nil {
			return fmt.Sprintf("install view %d (read from etcd)", a.Epoch)
		}
		return fmt.Sprintf("install view %d", a.View.Epoch)
	case Exclude, Wedge:
		return fmt.Sprintf("%v: %s", a.Kind, a.Reason)
	case Minority:
		if a.Minority {
			return "minority: the next view " + describeMembers(a.Next) + " would hold no majority"
		}
		return "minority over"
	case Claim:
		return fmt.Sprintf("claim the log for view %d", a.View.Epoch)
	}
	return a.Kind.String()
}

// describeView prints a view record on one line.
func describeView(v *membership.View) string {
	var cut []string
	for _, c := range v.Cut {
		cut = append(cut, fmt.Sprintf("%d:%d", c.ID, c.Seq))
	}
	s := fmt.Sprintf("epoch=%d members=%s cut=(%s) start=%d sent=%s joining=%s",
		v.Epoch, describeMembers(v.Members), strings.Join(cut, " "), v.Start, describeIDs(v.Sent), describeIDs(v.Joining))
	if v.Recovered {
		s += " recovered"
	}
	for _, sf := range v.Suffixes {
		s += fmt.Sprintf(" suffix[%d]=(from=%d donor=%d)", sf.ID, sf.From, sf.Donor)
	}
	return s + "\n"
}

func describeMembers(ms []membership.Member) string {
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

// outHandler writes the core's warnings and errors (and, with info, its
// informational messages) to a script's output: the message and its
// attributes, in order, on one line.
type outHandler struct {
	out   *strings.Builder
	info  bool
	attrs []slog.Attr
}

func (o *outHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || o.info && l >= slog.LevelInfo
}

func (o *outHandler) Handle(_ context.Context, r slog.Record) error {
	fmt.Fprintf(o.out, "log %v: %s", r.Level, r.Message)
	for _, a := range o.attrs {
		fmt.Fprintf(o.out, " %v", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(o.out, " %v", a)
		return true
	})
	o.out.WriteString("\n")
	return nil
}

func (o *outHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &outHandler{out: o.out, info: o.info, attrs: append(slices.Clone(o.attrs), as...)}
}

func (o *outHandler) WithGroup(string) slog.Handler { return o }

// bareMembers returns the command's arguments that have no value
// (start 1 2.2), as members.
func bareMembers(t *testing.T, td *datadriven.TestData) []membership.Member {
	t.Helper()
	var out []membership.Member
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 && a.Key != "durable" && a.Key != "wiped" && a.Key != "beyond" && a.Key != "recovered" {
			out = append(out, parseMember(t, a.Key))
		}
	}
	return out
}

// parseMember reads ID or ID.incarnation (incarnation 1 by default).
func parseMember(t *testing.T, s string) membership.Member {
	t.Helper()
	return newMember(ddargs.Member(t, s))
}

func newMember(id, incarnation uint64) membership.Member {
	return membership.Member{ID: id, Incarnation: incarnation}
}
