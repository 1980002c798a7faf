package vsync

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/convoy-gcs/convoy/internal/invariants"
	"github.com/convoy-gcs/convoy/membership"
)

// Config is what the core needs of a member's settings. Durations are on
// the member's clock (nanoseconds).
type Config struct {
	// InitialMembers is how many registered members found the group.
	InitialMembers int
	// Durable says the member keeps a durable log: the group can then
	// restart from the members' logs after most of a view failed.
	Durable bool
	// LeaseTTL is the etcd lease of registrations.
	LeaseTTL time.Duration
	// SuspectTimeout and HeartbeatInterval are the failure detector's.
	SuspectTimeout, HeartbeatInterval time.Duration
	// RestartWait is how long the leader of a restart waits for the
	// claims of the rest of the last view once a majority claimed.
	RestartWait time.Duration
	// Logger receives the core's few notable events; nil discards them.
	Logger *slog.Logger
}

// Core is the view-change state of one member of a view-managed group:
// its phase and incarnation, and what it decided so far about the views
// it takes part in. It does no I/O and reads no clock: the runtime hands
// it what it read from etcd and the time, and carries out the actions it
// returns, in order, telling it what came of them (Entered, Installed,
// Ending, Rereported, Excluded, Left, Failed).
//
// A Core is not safe for concurrent use.
type Core struct {
	cfg   Config
	log   *slog.Logger
	phase Phase
	self  membership.Member
	// epoch is the view the member takes part in (when phase.InView()).
	epoch uint64

	// Outside the views: when to ask to join again if no request is
	// recorded; when to write the first view again while none is
	// committed (its write may have been given up).
	joinRetry, bootRetry int64
	// A restart from the logs: whether and since when it looks needed,
	// whether and since when this member (as leader) saw a majority's
	// claims, and when to claim again if its claim is missing.
	restarting, quorum                  bool
	restartSeen, quorumSeen, claimRetry int64
	// waitClaims and waitDead are what this member last logged a restart
	// to wait for (the valid claims, and whether no member of the view
	// still lives), if waitNoted, so that it says so once per change, not
	// at every state read.
	waitNoted  bool
	waitClaims []membership.ID
	waitDead   bool
	// proposed is the etcd revision of the state this member last
	// proposed a view (or a restart) on, as leader.
	proposed int64
	// minority says the next view would hold no majority of this one.
	minority bool
	// missing holds the members of the current view whose registration
	// is missing, with when this member first saw it missing.
	missing map[membership.Member]int64
	// wedgedAt is when the member wedged; reportAt, if set, when its final
	// report is due; reportedAt, when the runtime last wrote it (Reported
	// only); retryAt, if set, when to decide again on retryState (a
	// proposal held back).
	wedgedAt, reportAt, reportedAt, retryAt int64
	retryState                              *membership.State
	// holds says the member holds the group's state (a joiner's
	// transfer ended, or it needed none); markRetry is when to write its
	// caught-up mark again if a state read still shows it missing.
	holds     bool
	markRetry int64
	// exclusions counts the exclusions that followed each other, the last
	// at lastExcluded.
	exclusions   int
	lastExcluded int64
	// decided is the last decision logged (debug): a decision is logged
	// when it differs from it.
	decided string
}

// NewCore returns the core of a member whose incarnation self has just
// registered; it starts Joining.
func NewCore(cfg Config, self membership.Member) *Core {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Core{cfg: cfg, log: log, self: self, phase: Joining}
}

// Phase returns the member's phase.
func (c *Core) Phase() Phase { return c.phase }

// Self returns the member's current incarnation.
func (c *Core) Self() membership.Member { return c.self }

// ActionKind says what an Action asks of the runtime.
type ActionKind uint8

// The actions.
const (
	// Bootstrap: write View, the group's first view.
	Bootstrap ActionKind = iota + 1
	// RequestJoin: register Self and ask to join (with the position of
	// the member's durable log, if its state is that log's).
	RequestJoin
	// Enter: open View, this incarnation's first, in which it has Rank.
	Enter
	// Install: end the current view and open View, its successor (read
	// it from etcd first if View is nil: epoch Epoch).
	Install
	// Exclude: leave the views (View, if set, is the view that leaves
	// this member out), for Reason.
	Exclude
	// Wedge: stop in the current view for Reason (the core is Wedged
	// already); the report is due at the deadline.
	Wedge
	// Report: write the final report for the current view.
	Report
	// Propose: as leader, commit View as the next view.
	Propose
	// Minority: the next view would, or would no longer (Minority false),
	// lack a majority of the current one.
	Minority
	// DonorsDone: every joiner of the current view holds its state; stop
	// serving them. It comes with every state read once it holds (a
	// donor may start after the first), and never in a view that admits
	// nobody.
	DonorsDone
	// Claim: claim the member's durable log for restarting View.
	Claim
	// Recover: as leader, commit View, which restarts the group from the
	// members' logs.
	Recover
	// MarkCaughtUp: write the member's caught-up mark again: it holds
	// the group's state (CaughtUp), but a state read a retry interval
	// later shows the mark missing (its write was given up while etcd
	// was out of reach). Without the mark the member would stay a joiner,
	// counting towards no majority, in every view from then on.
	MarkCaughtUp
	// RefreshReport: the final report was written a suspect timeout ago
	// or more; write it again if whom the member hears changed since, or
	// if its last write failed (given up while etcd was out of reach),
	// and say so (Rereported). What it holds and delivered is final from the wedge
	// on, whom it hears is not: a partition that healed after the
	// reports were written would otherwise stand in them for good, and a
	// view change that waits for a majority of reporters who hear each
	// other (membership.Suspected) would wait forever once the
	// suspicions on both sides leave no side a majority. Likewise for a
	// write given up while etcd was out of reach. It comes with every
	// Tick from then on until the report is written again, with no
	// deadline of its own: the loop ticks often enough anyway (its
	// heartbeats).
	RefreshReport
)

var actionNames = [...]string{"", "bootstrap", "request-join", "enter", "install", "exclude", "wedge", "report",
	"propose", "minority", "donors-done", "claim", "recover", "mark-caught-up", "refresh-report"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k > 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Action is one thing the runtime must do, with what it needs.
type Action struct {
	Kind     ActionKind
	View     *membership.View
	Epoch    uint64
	Rank     int
	Reason   string
	Minority bool
	// Next lists the members the next view would have (Minority).
	Next []membership.Member
	// Logs holds the log positions of joiners that restarted with their
	// durable logs (Propose).
	Logs map[membership.ID]membership.LogPos
}

// State applies a state of the group read from etcd, at time now, and
// returns what to do about it. While the member is in a view and the
// state holds later views, it returns one Install for the view that
// follows the current one: the runtime carries it out (Installed or
// Excluded) and calls State again with the same state.
func (c *Core) State(now int64, st *membership.State) []Action {
	cur := &st.Current
	switch {
	case c.phase.Final():
		return nil
	case cur.Epoch == 0:
		return c.bootstrap(now, st)
	case !c.phase.InView():
		return c.outside(now, st)
	case cur.Epoch < c.epoch:
		return nil // an older read
	case cur.Epoch > c.epoch:
		a := Action{Kind: Install, Epoch: c.epoch + 1}
		if cur.Epoch == c.epoch+1 {
			a.View = cur
		}
		return []Action{a}
	}
	if out := c.giveWay(st); out != nil {
		return out
	}
	return c.decide(now, st)
}

// bootstrap founds the group once enough members have registered: the
// one with the lowest ID writes the first view, and again a retry
// interval later while none is committed.
func (c *Core) bootstrap(now int64, st *membership.State) []Action {
	if c.phase != Joining || now < c.bootRetry || len(st.Registered) < c.cfg.InitialMembers {
		return nil
	}
	ids := make([]uint64, 0, len(st.Registered))
	for id := range st.Registered {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if ids[0] != c.self.ID {
		return nil
	}
	first := membership.View{Epoch: 1, Sent: make([]uint64, len(ids))}
	for _, id := range ids {
		first.Members = append(first.Members, st.Registered[id])
	}
	c.bootRetry = now + c.retryInterval()
	return []Action{{Kind: Bootstrap, View: &first}}
}

// outside handles a state read while the member takes part in no view.
func (c *Core) outside(now int64, st *membership.State) []Action {
	cur := &st.Current
	if rank := cur.Rank(c.self.ID); rank >= 0 && cur.Members[rank].Incarnation == c.self.Incarnation {
		return []Action{{Kind: Enter, View: cur, Rank: rank}}
	}
	if c.cfg.Durable {
		if out, restarting := c.recovering(now, st); restarting {
			return out
		}
	}
	// Ask to join, and ask again if the request is gone (it hangs on the
	// lease, which may have been renewed).
	asked := slices.ContainsFunc(st.Joins, func(m membership.Member) bool { return m == c.self })
	if asked || now < c.joinRetry {
		return nil
	}
	c.joinRetry = now + c.retryInterval()
	return []Action{{Kind: RequestJoin}}
}

// retryInterval is how long to wait before asking etcd again for what a
// state read shows missing (a join request, a claim).
func (c *Core) retryInterval() int64 {
	return int64(max(4*c.cfg.SuspectTimeout, time.Second))
}

// recovering handles a state read while the member takes part in no view,
// with a durable log: if most of the last view failed, it claims its log
// and, as leader, commits the view that restarts the group. It reports
// false if the group needs no restart (the member joins as usual).
func (c *Core) recovering(now int64, st *membership.State) ([]Action, bool) {
	d, err := membership.DecideRecovery(recoveryInput(st))
	if err != nil {
		c.log.Error("restart of the group", "epoch", st.Current.Epoch, "err", err)
		return nil, true
	}
	if !d.Needed {
		c.restarting = false
		if c.phase == Recovering {
			c.to(Joining)
		}
		return nil, false
	}
	if !c.restarting {
		c.restarting, c.restartSeen = true, now
		c.to(Recovering)
		c.log.Warn("most of the last view failed: restarting the group from the members' logs",
			"epoch", st.Current.Epoch, "voters", len(d.Voters), "claims", len(d.Claims))
	}
	if now-c.restartSeen < int64(c.cfg.LeaseTTL/2) {
		// Registrations all vanish for a moment when etcd was out of reach
		// for longer than the leases: give them time to come back.
		return nil, true
	}
	var out []Action
	if rc, ok := st.Recoveries[c.self.ID]; (!ok || rc.Member != c.self) && now >= c.claimRetry {
		c.claimRetry = now + c.retryInterval()
		out = append(out, Action{Kind: Claim, View: &st.Current})
	}
	if d.Propose == nil {
		c.noteRestartWait(st, d)
	}
	if d.Leader != c.self.ID || d.Propose == nil {
		return out, true
	}
	if !c.quorum {
		c.quorum, c.quorumSeen = true, now
	}
	if !d.Complete && now-c.quorumSeen < int64(c.cfg.RestartWait) {
		return out, true // the others get a while to come back
	}
	if st.Revision <= c.proposed {
		return out, true
	}
	c.proposed = st.Revision
	return append(out, Action{Kind: Recover, View: d.Propose}), true
}

// noteRestartWait logs, once per change, why a restart cannot be
// committed yet: a member of the last view still lives in it, or fewer
// than a majority of the view's caught-up members claimed their logs. A
// member whose disk was wiped claims no log of the view: with too few
// left, the group waits for members with their logs, and an operator
// reads here which.
func (c *Core) noteRestartWait(st *membership.State, d membership.RecoveryDecision) {
	if c.waitNoted && d.Dead == c.waitDead && slices.Equal(d.Claims, c.waitClaims) {
		return
	}
	c.waitNoted, c.waitDead = true, d.Dead
	c.waitClaims = append(c.waitClaims[:0], d.Claims...)
	if !d.Dead {
		c.log.Info("restart of the group waits: a member of the last view still lives in it (its registration is still there)",
			"epoch", st.Current.Epoch)
		return
	}
	c.log.Info("restart of the group waits for a majority of the last view's members to claim their logs",
		"epoch", st.Current.Epoch, "members", d.Voters, "claimed", d.Claims, "needed", len(d.Voters)/2+1)
}

func recoveryInput(st *membership.State) membership.RecoveryInput {
	return membership.RecoveryInput{Current: st.Current, Registered: st.Registered, CaughtUp: st.CaughtUp, Recoveries: st.Recoveries}
}

// giveWay ends this member's incarnation when most of its view failed
// and the others restart the group from their logs: it then claims its
// own log like them.
func (c *Core) giveWay(st *membership.State) []Action {
	if !c.cfg.Durable || len(st.Recoveries) == 0 {
		return nil
	}
	d, err := membership.DecideRecovery(recoveryInput(st))
	if err != nil || !d.Needed || len(d.Claims) == 0 {
		return nil
	}
	return []Action{{Kind: Exclude, Reason: fmt.Sprintf("most of view %d failed: the group restarts from its logs", st.Current.Epoch)}}
}

// decide runs the view-change decision on a state of the current view.
func (c *Core) decide(now int64, st *membership.State) []Action {
	in := membership.ChangeInput{
		Current: st.Current, CaughtUp: st.CaughtUp,
		Joins: st.Joins, Leaves: st.Leaves, Reports: st.Reports, Topics: st.Topics,
	}
	in.Suspected = membership.Suspected(&st.Current, st.Suspects, st.Reports)
	for id := range c.unregistered(now, st) {
		in.Suspected[id] = true
	}
	d, err := membership.Decide(c.self.ID, in)
	if err != nil {
		c.log.Error("view change", "epoch", c.epoch, "err", err)
		return nil
	}
	c.logDecision(in.Suspected, d)
	var out []Action
	if d.Change {
		out = c.wedge(now, "view change under way", out)
	}
	if accused(&st.Current, st.Suspects) {
		// A recorded suspicion counts only once a majority has reported
		// (membership.Suspected), and members report once wedged: a
		// suspicion is reason enough to wedge, even when no connection
		// broke (a partition that silently drops packets).
		out = c.wedge(now, "suspicion recorded", out)
	}
	if d.Minority != c.minority {
		c.minority = d.Minority
		out = append(out, Action{Kind: Minority, Minority: d.Minority, Next: d.Next})
	}
	if d.Propose != nil && st.Revision > c.proposed {
		if sameMembers(d.Propose.Members, st.Current.Members) {
			// Nobody is suspected yet, but the view broke: give the
			// detector time to find out who is gone before starting the
			// same members again, or broken views would follow each other.
			if at := c.wedgedAt + 2*int64(c.cfg.SuspectTimeout); now < at {
				c.retryAt, c.retryState = at, st
				return out
			}
		}
		c.proposed = st.Revision
		out = append(out, Action{Kind: Propose, View: d.Propose, Logs: st.JoinLogs})
	}
	if len(st.Current.Joining) > 0 && allCaughtUp(&st.Current, st.CaughtUp) {
		out = append(out, Action{Kind: DonorsDone})
	}
	if c.holds && !st.CaughtUp[c.self.ID] && slices.Contains(st.Current.Joining, c.self.ID) && now >= c.markRetry {
		c.markRetry = now + c.retryInterval()
		out = append(out, Action{Kind: MarkCaughtUp})
	}
	return out
}

// logDecision logs (debug) a view-change decision that differs from the
// last one logged.
func (c *Core) logDecision(suspected map[membership.ID]bool, d membership.Decision) {
	if !d.Change || !c.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	ids := make([]membership.ID, 0, len(suspected))
	for id, ok := range suspected {
		if ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	next := make([]membership.ID, len(d.Next))
	for i, m := range d.Next {
		next[i] = m.ID
	}
	s := fmt.Sprint("suspected=", ids, " next=", next, " waiting=", d.Waiting, " leader=", d.Leader, " minority=", d.Minority)
	if s == c.decided {
		return
	}
	c.decided = s
	c.log.Debug("view change decision", "epoch", c.epoch, "suspected", ids, "next", next, "waiting", d.Waiting,
		"leader", d.Leader, "minority", d.Minority, "propose", d.Propose != nil)
}

// unregistered returns the members of the current view that the etcd
// registrations give up for dead, a second, coarse signal beside the
// failure detector: a member whose registration names a newer
// incarnation, or whose registration has been missing for a whole lease
// period as this member saw it. A registration goes missing for a moment
// whenever a live member's lease lapses (etcd was out of reach, or slow
// to answer a renewal) and the member registers again: counting that as
// a suspicion would end a view each time.
//
// A registration the store refused (membership.State.Refused: it does
// not decode, or the store's JoinAuth refused its proof) says nothing
// either way: whoever wrote it over the member's cannot prove the
// member's id, so it names no newer incarnation, and counting the
// member's own as missing would let that writer have it excluded.
// The failure detector still judges such a member.
func (c *Core) unregistered(now int64, st *membership.State) map[uint64]bool {
	out := make(map[uint64]bool)
	missing := make(map[membership.Member]int64)
	forged := make(map[uint64]bool)
	for _, r := range st.Refused {
		if r.Kind == membership.RefusedRegistration {
			forged[r.Member.ID] = true
		}
	}
	for _, m := range st.Current.Members {
		reg, ok := st.Registered[m.ID]
		switch {
		case ok && reg.Incarnation != m.Incarnation:
			out[m.ID] = true
		case !ok && !forged[m.ID]:
			key := membership.Member{ID: m.ID, Incarnation: m.Incarnation}
			since, seen := c.missing[key]
			if !seen {
				since = now
			}
			missing[key] = since
			if now-since >= int64(c.cfg.LeaseTTL) {
				out[m.ID] = true
			}
		}
	}
	c.missing = missing
	return out
}

// accused reports whether a member of v suspects another.
func accused(v *membership.View, suspects map[uint64]map[uint64]string) bool {
	for suspect, by := range suspects {
		if v.Rank(suspect) < 0 {
			continue
		}
		for accuser := range by {
			if accuser != suspect && v.Rank(accuser) >= 0 {
				return true
			}
		}
	}
	return false
}

// sameMembers reports whether two member lists hold the same incarnations.
func sameMembers(a, b []membership.Member) bool {
	return slices.EqualFunc(a, b, func(x, y membership.Member) bool { return x.ID == y.ID && x.Incarnation == y.Incarnation })
}

// allCaughtUp reports whether every joiner of v holds its state.
func allCaughtUp(v *membership.View, caughtUp map[uint64]bool) bool {
	for _, id := range v.Joining {
		if !caughtUp[id] {
			return false
		}
	}
	return true
}

// Wedge stops the member in its view at time now: it returns true if it
// was Active, and the runtime then stops the view's machinery (the final
// report is due at Deadline).
func (c *Core) Wedge(now int64) bool {
	if c.phase != Active {
		return false
	}
	c.to(Wedged)
	c.wedgedAt = now
	// The report goes out after a few heartbeats to everyone, so that it
	// can say whom this member still reaches.
	c.reportAt = now + 3*int64(c.cfg.HeartbeatInterval)
	return true
}

// wedge appends a Wedge action to out if the member was Active.
func (c *Core) wedge(now int64, reason string, out []Action) []Action {
	if c.Wedge(now) {
		out = append(out, Action{Kind: Wedge, Reason: reason})
	}
	return out
}

// WedgedAt returns when the member wedged.
func (c *Core) WedgedAt() int64 { return c.wedgedAt }

// Tick tells the core the time: it returns the final report when due,
// a chance to refresh it later on, and the decision held back until
// then, if any.
func (c *Core) Tick(now int64) []Action {
	var out []Action
	if c.retryAt != 0 && now >= c.retryAt {
		st := c.retryState
		c.retryAt, c.retryState = 0, nil
		if c.phase.InView() && st.Current.Epoch == c.epoch {
			out = append(out, c.decide(now, st)...)
		}
	}
	switch {
	case c.reportAt != 0 && now >= c.reportAt && c.phase == Wedged:
		c.reportAt, c.reportedAt = 0, now
		c.to(Reported)
		out = append(out, Action{Kind: Report})
	case c.phase == Reported && now-c.reportedAt >= int64(c.cfg.SuspectTimeout):
		out = append(out, Action{Kind: RefreshReport})
	}
	return out
}

// Rereported says the runtime wrote the final report again at now
// (RefreshReport): the next chance to refresh it comes a suspect timeout
// later.
func (c *Core) Rereported(now int64) { c.reportedAt = now }

// Deadline returns when Tick next has something to do (0: nothing).
func (c *Core) Deadline() int64 {
	d := int64(0)
	for _, at := range []int64{c.retryAt, c.reportAt} {
		if at != 0 && (d == 0 || at < d) {
			d = at
		}
	}
	return d
}

// Entered says the member opened rec, its incarnation's first view.
func (c *Core) Entered(rec *membership.View) {
	c.to(Active)
	c.inView(rec)
}

// Installed says the member ended its view and opened rec, its
// successor. A member that was still Active wedges on the way.
func (c *Core) Installed(rec *membership.View) {
	if c.phase == Active {
		c.to(Wedged)
	}
	c.to(Active)
	c.inView(rec)
}

// Ending says the member ends its view to install a later one although
// it was Active (its report was not needed, or the view is one of those
// in between): it wedges without a report.
func (c *Core) Ending(now int64) {
	if c.phase == Active {
		c.to(Wedged)
		c.wedgedAt, c.reportAt = now, 0
	}
}

func (c *Core) inView(rec *membership.View) {
	c.epoch = rec.Epoch
	c.reportAt, c.retryAt, c.retryState, c.decided = 0, 0, nil, ""
}

// Excluded says the member left its view at time now, and not to leave
// the group (that is Left): it comes back Joining as incarnation next.
// It returns how long the runtime waits before it registers next and
// asks to join: nothing the first time, then from a suspect timeout up,
// doubling while exclusions follow each other within a minute (a member
// cut off from the others, whose every view breaks at once, lets the
// others make progress meanwhile). The core asks to join again
// (RequestJoin) only if the request is still missing a retry interval
// after that wait.
func (c *Core) Excluded(now int64, next membership.Member) time.Duration {
	c.to(Joining)
	if now-c.lastExcluded > int64(time.Minute) {
		c.exclusions = 0
	}
	c.lastExcluded = now
	c.exclusions++
	wait := time.Duration(0)
	if c.exclusions > 1 {
		wait = min(c.cfg.SuspectTimeout<<(c.exclusions-2), 30*time.Second)
	}
	*c = Core{cfg: c.cfg, log: c.log, phase: Joining, self: next, exclusions: c.exclusions, lastExcluded: c.lastExcluded}
	c.joinRetry = now + int64(wait) + c.retryInterval()
	return wait
}

// CaughtUp says the member, a joiner of its view, holds the group's state
// from time now on, and the runtime is writing its caught-up mark: the
// core asks for the mark again (MarkCaughtUp) while state reads a retry
// interval apart show it missing.
func (c *Core) CaughtUp(now int64) {
	c.holds = true
	c.markRetry = now + c.retryInterval()
}

// Left says the member left the group on purpose.
func (c *Core) Left() { c.to(Left) }

// Failed says the member stopped for good.
func (c *Core) Failed() {
	if !c.phase.Final() {
		c.to(Failed)
	}
}

// to moves the member to phase p. A transition the protocol does not
// allow is a bug in the runtime that drives the core: it panics when
// invariants are checked (tests), and is logged otherwise.
func (c *Core) to(p Phase) {
	if err := Check(c.phase, p); err != nil {
		if invariants.Enabled {
			panic(fmt.Sprintf("vsync: member %d: %v", c.self.ID, err))
		}
		c.log.Error("phase transition", "member", c.self.ID, "err", err)
	}
	c.log.Debug("phase", "from", c.phase, "to", p)
	c.phase = p
}
