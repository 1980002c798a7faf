package membership

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// This file replays view changes step by step under a seeded scheduler:
// members send, receive, announce and deliver messages of their view,
// crash, restart as new incarnations, join, leave and are (rightly or
// wrongly) suspected, and each reads an in-memory model of the store at
// its own moments, so its snapshot may be stale when it acts on it. Every
// decision is Decide's; every installation goes through the store's
// compare-and-swap. After every step a checker looks at everything
// committed and delivered so far.

// decideFunc has Decide's signature, so that the simulator can run a
// deliberately broken decision.
type decideFunc func(self ID, in ChangeInput) (Decision, error)

// simFaults plants faults in the simulated store.
type simFaults struct {
	noCAS      bool // install without checking that the base view is current
	noMajority bool // install without checking the majority rule
}

// simCommit is one successful installation, with what the checker needs
// to judge it, captured when it happened.
type simCommit struct {
	view View
	by   Member
	// caughtUp says which members of the predecessor had caught up;
	// reports holds the final reports on the predecessor; held what every
	// process of the predecessor actually held.
	caughtUp map[ID]bool
	reports  map[ID]Report
	held     map[ID][]uint64
}

// simStore models the store's keys for views (an append-only log of
// committed records, the first one given), suspicions, leases, join and
// leave requests, caught-up marks and final reports, with etcd-like
// compare-and-swap installation. Suspicions, leaves and caught-up marks
// are kept per incarnation, so that a mark on an old incarnation never
// applies to the member's next one; snapshot turns them into the by-ID
// maps of ChangeInput for the members of the current view.
type simStore struct {
	faults   simFaults
	log      []simCommit
	suspects map[Member]bool
	joins    map[ID]Member // the newest request per ID
	leaves   map[Member]bool
	caughtUp map[Member]bool
	reports  map[int]map[ID]Report // by log index of the view reported on
}

func (st *simStore) current() *View { return &st.log[len(st.log)-1].view }

// caughtUpIn returns the caught-up members of v, by ID.
func (st *simStore) caughtUpIn(v *View) map[ID]bool {
	out := make(map[ID]bool)
	for _, m := range v.Members {
		if st.caughtUp[m] {
			out[m.ID] = true
		}
	}
	return out
}

// snapshot reads everything Decide needs in one consistent read.
func (st *simStore) snapshot() ChangeInput {
	cur := st.current()
	in := ChangeInput{Current: cloneView(cur), CaughtUp: st.caughtUpIn(cur),
		Suspected: make(map[ID]bool), Leaves: make(map[ID]bool), Reports: make(map[ID]Report)}
	for _, m := range cur.Members {
		if st.suspects[m] {
			in.Suspected[m.ID] = true
		}
		if st.leaves[m] {
			in.Leaves[m.ID] = true
		}
	}
	for _, id := range sortedIDs(st.joins) {
		in.Joins = append(in.Joins, st.joins[id])
	}
	for id, r := range st.reports[len(st.log)-1] {
		r.Held = slices.Clone(r.Held)
		in.Reports[id] = r
	}
	return in
}

// install commits v if the view it was built on is still current and it
// keeps a majority of that view's caught-up members — one etcd
// transaction in the real store.
func (st *simStore) install(v *View, by Member) error {
	cur := st.current()
	if !st.faults.noCAS && v.Epoch != cur.Epoch+1 {
		return ErrConflict
	}
	caughtUp := st.caughtUpIn(cur)
	if !st.faults.noMajority && !HasMajority(cur, func(id ID) bool { return caughtUp[id] }, v.Members) {
		return ErrNoMajority
	}
	reports := make(map[ID]Report)
	for id, r := range st.reports[len(st.log)-1] {
		reports[id] = r
	}
	st.log = append(st.log, simCommit{view: cloneView(v), by: by, caughtUp: caughtUp, reports: reports})
	for _, m := range v.Members {
		if st.joins[m.ID] == m {
			delete(st.joins, m.ID)
		}
	}
	return nil
}

// simState is a process's state in one view.
type simState struct {
	held, ann []uint64 // by sender rank: held complete, and announced
	sent      uint64   // own messages sent in the view
	deliv     int      // how many of the view's messages it delivered (a prefix)
	wedged    bool
	reported  bool
}

// simProc is one incarnation of a member process.
type simProc struct {
	m        Member
	alive    bool
	fenced   bool // learned that a view excludes it
	cur      int  // log index of its installed view, -1 while it waits to join
	joinedAt int  // log index of the first view it installed, -1 if none
	views    map[int]*simState
	pending  *View // a proposal it has yet to commit
}

// simMsg is a message of a view: its sender's rank and sequence.
type simMsg struct {
	rank int
	seq  uint64
}

// simStats counts what the runs exercised.
type simStats struct {
	commits, conflicts, noMajority, minority   int
	rivalLeaders                               int // epochs for which two members proposed
	crashedProposing, crashedAfterCommit       int
	restarts, replaced, batched, left, fenced  int
	falseSuspicions, joinerUncaught, stepsDone int
}

func (a *simStats) add(b simStats) {
	a.commits += b.commits
	a.conflicts += b.conflicts
	a.noMajority += b.noMajority
	a.minority += b.minority
	a.rivalLeaders += b.rivalLeaders
	a.crashedProposing += b.crashedProposing
	a.crashedAfterCommit += b.crashedAfterCommit
	a.restarts += b.restarts
	a.replaced += b.replaced
	a.batched += b.batched
	a.left += b.left
	a.fenced += b.fenced
	a.falseSuspicions += b.falseSuspicions
	a.joinerUncaught += b.joinerUncaught
	a.stepsDone += b.stepsDone
}

type changeSim struct {
	r        *rand.Rand
	decide   decideFunc
	st       *simStore
	procs    []*simProc
	byMember map[Member]*simProc
	nextID   ID
	maxID    ID
	// Per view (log index): its messages in delivery order, how many each
	// rank sent, the longest prefix anyone delivered and, per rank, the
	// highest sequence in that prefix.
	msgs      map[int][]simMsg
	sentBy    map[int][]uint64
	delivered map[int]int
	maxSeq    map[int][]uint64
	proposers map[uint64]map[ID]bool
	// violations found while acting (installing without the cut, Decide
	// failing on honest input); the checker reports them.
	violations []error
	checked    int // log index of the last commit the checker judged
	stats      simStats
	trace      []string
}

func newChangeSim(seed uint64, decide decideFunc, faults simFaults) *changeSim {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 3 + r.IntN(3)
	first := View{Epoch: 1, Sent: make([]uint64, n)}
	for i := 1; i <= n; i++ {
		first.Members = append(first.Members, Member{ID: ID(i), Incarnation: 1})
	}
	s := &changeSim{r: r, decide: decide,
		st: &simStore{faults: faults, log: []simCommit{{view: first}}, suspects: map[Member]bool{},
			joins: map[ID]Member{}, leaves: map[Member]bool{}, caughtUp: map[Member]bool{}, reports: map[int]map[ID]Report{}},
		byMember: map[Member]*simProc{}, nextID: ID(n + 1), maxID: ID(n + 3),
		msgs: map[int][]simMsg{}, sentBy: map[int][]uint64{}, delivered: map[int]int{}, maxSeq: map[int][]uint64{},
		proposers: map[uint64]map[ID]bool{}}
	for _, m := range first.Members {
		p := s.addProc(m)
		s.install(p, 0)
	}
	return s
}

func (s *changeSim) addProc(m Member) *simProc {
	p := &simProc{m: m, alive: true, cur: -1, joinedAt: -1, views: map[int]*simState{}}
	s.procs = append(s.procs, p)
	s.byMember[m] = p
	return p
}

func (s *changeSim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%d: ", len(s.trace))+fmt.Sprintf(format, args...))
}

func (s *changeSim) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Errorf(format, args...))
}

// run takes steps random steps, checking the properties after each.
func (s *changeSim) run(steps int) error {
	actions := []struct {
		weight int
		do     func()
	}{
		{20, s.send}, {30, s.receive}, {15, s.announce}, {15, s.deliver},
		{50, s.read}, {25, s.report}, {3, s.commit},
		{4, s.suspect}, {1, s.crash}, {2, s.join}, {1, s.leave}, {3, s.catchUp},
	}
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	for step := 0; step < steps; step++ {
		n := s.r.IntN(total)
		for _, a := range actions {
			if n -= a.weight; n < 0 {
				a.do()
				break
			}
		}
		s.stats.stepsDone++
		if err := checkChangeSim(s); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	return nil
}

// pick returns a random process satisfying ok, or nil.
func (s *changeSim) pick(ok func(p *simProc) bool) *simProc {
	var cands []*simProc
	for _, p := range s.procs {
		if ok(p) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[s.r.IntN(len(cands))]
}

// active: alive, in a view, not wedged in it.
func (s *changeSim) active(p *simProc) bool {
	return p.alive && !p.fenced && p.cur >= 0 && !p.views[p.cur].wedged
}

func (s *changeSim) send() {
	p := s.pick(s.active)
	if p == nil {
		return
	}
	st, rank := p.views[p.cur], s.st.log[p.cur].view.Rank(p.m.ID)
	st.sent++
	st.held[rank] = st.sent
	s.msgs[p.cur] = append(s.msgs[p.cur], simMsg{rank: rank, seq: st.sent})
	s.sentBy[p.cur][rank]++
}

// receive completes some of one sender's messages at a process (relayed
// by anyone, so also after the sender crashed).
func (s *changeSim) receive() {
	p := s.pick(func(p *simProc) bool {
		return s.active(p) && slices.ContainsFunc(s.missing(p), func(n uint64) bool { return n > 0 })
	})
	if p == nil {
		return
	}
	missing := s.missing(p)
	var senders []int
	for rank, n := range missing {
		if n > 0 {
			senders = append(senders, rank)
		}
	}
	rank := senders[s.r.IntN(len(senders))]
	p.views[p.cur].held[rank] += 1 + uint64(s.r.IntN(int(missing[rank])))
}

// missing returns, per sender, how many of its sent messages p lacks.
func (s *changeSim) missing(p *simProc) []uint64 {
	st := p.views[p.cur]
	out := make([]uint64, len(st.held))
	for rank, n := range s.sentBy[p.cur] {
		out[rank] = n - st.held[rank]
	}
	return out
}

func (s *changeSim) announce() {
	if p := s.pick(s.active); p != nil {
		st := p.views[p.cur]
		st.ann = slices.Clone(st.held)
	}
}

// deliver delivers at a process every message below the commit barrier:
// the longest prefix of the view's order that every member of the view
// announced holding (atomic mode).
func (s *changeSim) deliver() {
	p := s.pick(s.active)
	if p == nil {
		return
	}
	st, v, msgs := p.views[p.cur], &s.st.log[p.cur].view, s.msgs[p.cur]
	for st.deliv < len(msgs) {
		m := msgs[st.deliv]
		if slices.ContainsFunc(v.Members, func(q Member) bool {
			qp := s.byMember[q]
			return qp == nil || qp.views[p.cur] == nil || qp.views[p.cur].ann[m.rank] < m.seq
		}) {
			break
		}
		st.deliv++
	}
	for ; s.delivered[p.cur] < st.deliv; s.delivered[p.cur]++ {
		m := msgs[s.delivered[p.cur]]
		s.maxSeq[p.cur][m.rank] = max(s.maxSeq[p.cur][m.rank], m.seq)
	}
}

// read makes a process read the store: it installs the views committed
// since its own, in order (one that learns of e+2 without having
// installed e+1 installs e+1 first), or stops at one that excludes it, then
// decides on a fresh snapshot, wedging if a change is under way and
// keeping any proposal to commit later.
func (s *changeSim) read() {
	p := s.pick(func(p *simProc) bool { return p.alive && !p.fenced })
	if p == nil {
		return
	}
	for j := p.cur + 1; j < len(s.st.log); j++ {
		if isMember(&s.st.log[j].view, p.m) {
			s.install(p, j)
			continue
		}
		if p.cur >= 0 {
			p.fenced = true
			s.stats.fenced++
			s.logf("%v fenced by epoch %d", p.m, s.st.log[j].view.Epoch)
			return
		}
	}
	if p.cur < 0 {
		return
	}
	in := s.st.snapshot()
	d, err := s.decide(p.m.ID, in)
	if err != nil {
		s.violate("%v: Decide on epoch %d: %v", p.m, in.Current.Epoch, err)
		return
	}
	if d.Minority {
		s.stats.minority++
	}
	if d.Change && !p.views[p.cur].wedged {
		p.views[p.cur].wedged = true
		s.logf("%v wedges in epoch %d", p.m, in.Current.Epoch)
	}
	if d.Propose != nil {
		p.pending = d.Propose
		who := s.proposers[d.Propose.Epoch]
		if who == nil {
			who = map[ID]bool{}
			s.proposers[d.Propose.Epoch] = who
		}
		if who[p.m.ID] = true; len(who) == 2 {
			s.stats.rivalLeaders++
		}
		s.logf("%v proposes %s", p.m, strings.TrimSpace(describeView(d.Propose)))
	}
}

// install moves p into view j, first checking that it holds the cut that
// ends its previous view (it must deliver all of it: nothing past the
// commit barrier is delivered before the cut is committed).
func (s *changeSim) install(p *simProc, j int) {
	v := &s.st.log[j].view
	if p.cur >= 0 {
		old := p.views[p.cur]
		if len(v.Cut) != len(old.held) {
			s.violate("%v installs epoch %d whose cut has %d senders, not %d", p.m, v.Epoch, len(v.Cut), len(old.held))
		}
		for k, c := range v.Cut {
			if k < len(old.held) && old.held[k] < c.Seq {
				s.violate("%v installs epoch %d holding %d of sender %d's messages, short of the cut's %d", p.m, v.Epoch, old.held[k], c.ID, c.Seq)
			}
		}
	}
	p.cur = j
	if p.joinedAt < 0 {
		p.joinedAt = j
	}
	p.views[j] = &simState{held: make([]uint64, len(v.Members)), ann: make([]uint64, len(v.Members))}
	if s.sentBy[j] == nil {
		s.sentBy[j] = make([]uint64, len(v.Members))
		s.maxSeq[j] = make([]uint64, len(v.Members))
	}
	if j > 0 {
		s.logf("%v installs epoch %d", p.m, v.Epoch)
	}
}

func (s *changeSim) report() {
	p := s.pick(func(p *simProc) bool {
		return p.alive && !p.fenced && p.cur >= 0 && p.views[p.cur].wedged && !p.views[p.cur].reported
	})
	if p == nil {
		return
	}
	st, v := p.views[p.cur], &s.st.log[p.cur].view
	st.reported = true
	if s.st.reports[p.cur] == nil {
		s.st.reports[p.cur] = map[ID]Report{}
	}
	r := Report{Epoch: v.Epoch, Member: p.m, Held: slices.Clone(st.held), Delivered: v.Start + uint64(st.deliv)}
	s.st.reports[p.cur][p.m.ID] = r
	s.logf("%v reports on epoch %d: held %v delivered %d", p.m, v.Epoch, r.Held, r.Delivered)
}

// commit makes a process with a proposal try to install it; now and then
// the process crashes right after, before anyone has read the new view.
func (s *changeSim) commit() {
	p := s.pick(func(p *simProc) bool { return p.alive && p.pending != nil })
	if p == nil {
		return
	}
	v := p.pending
	p.pending = nil
	pred := len(s.st.log) - 1
	switch err := s.st.install(v, p.m); {
	case errors.Is(err, ErrConflict):
		s.stats.conflicts++
		s.logf("%v: epoch %d: %v", p.m, v.Epoch, err)
		return
	case errors.Is(err, ErrNoMajority):
		s.stats.noMajority++
		s.logf("%v: epoch %d: %v", p.m, v.Epoch, err)
		return
	case err != nil:
		s.violate("install: %v", err)
		return
	}
	c := &s.st.log[len(s.st.log)-1]
	c.held = map[ID][]uint64{}
	for _, m := range s.st.log[pred].view.Members {
		if q := s.byMember[m]; q != nil && q.views[pred] != nil {
			c.held[m.ID] = slices.Clone(q.views[pred].held)
		}
	}
	s.stats.commits++
	s.countChange(&s.st.log[pred].view, v)
	s.logf("%v commits %s", p.m, strings.TrimSpace(describeView(v)))
	if s.r.IntN(4) == 0 {
		p.alive = false
		s.stats.crashedAfterCommit++
		s.logf("%v crashes after committing", p.m)
	}
}

// countChange tallies what kind of change a committed view made.
func (s *changeSim) countChange(pred, v *View) {
	var out, in bool
	for _, m := range pred.Members {
		if !isMember(v, m) {
			out = true
			if v.Rank(m.ID) >= 0 {
				s.stats.replaced++
			}
			if s.st.leaves[m] {
				s.stats.left++
			}
		}
	}
	for _, m := range v.Members {
		if !isMember(pred, m) {
			in = true
		}
	}
	if in && out {
		s.stats.batched++
	}
	if slices.ContainsFunc(pred.Joining, func(id ID) bool { return slices.Contains(v.Joining, id) }) {
		s.stats.joinerUncaught++
	}
}

// suspect records a suspicion of a member of the current view: mostly of
// a member that crashed or was fenced (its lease is gone), sometimes of a
// live one (a bad link).
func (s *changeSim) suspect() {
	cur := s.st.current()
	var dead, live []Member
	for _, m := range cur.Members {
		if s.st.suspects[m] {
			continue
		}
		if p := s.byMember[m]; p == nil || !p.alive || p.fenced {
			dead = append(dead, m)
		} else {
			live = append(live, m)
		}
	}
	switch {
	case len(dead) > 0 && s.r.IntN(5) > 0:
		m := dead[s.r.IntN(len(dead))]
		s.st.suspects[m] = true
		s.logf("suspect %v (gone)", m)
	case len(live) > 0 && s.r.IntN(8) == 0:
		m := live[s.r.IntN(len(live))]
		s.st.suspects[m] = true
		s.stats.falseSuspicions++
		s.logf("suspect %v (alive)", m)
	}
}

func (s *changeSim) crash() {
	p := s.pick(func(p *simProc) bool { return p.alive && !p.fenced })
	if p == nil {
		return
	}
	p.alive = false
	if p.pending != nil {
		p.pending = nil
		s.stats.crashedProposing++
	}
	s.logf("%v crashes", p.m)
}

// join restarts a crashed or fenced member as its next incarnation, or
// starts a new member, and registers its join request.
func (s *changeSim) join() {
	if s.r.IntN(3) == 0 && s.nextID <= s.maxID {
		m := Member{ID: s.nextID, Incarnation: 1}
		s.nextID++
		s.addProc(m)
		s.st.joins[m.ID] = m
		s.logf("%v asks to join", m)
		return
	}
	latest := map[ID]*simProc{}
	for _, p := range s.procs {
		latest[p.m.ID] = p // procs are in creation order
	}
	var cands []*simProc
	for _, id := range sortedIDs(latest) {
		if p := latest[id]; !p.alive || p.fenced {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return
	}
	old := cands[s.r.IntN(len(cands))]
	old.alive = false
	m := Member{ID: old.m.ID, Incarnation: old.m.Incarnation + 1}
	s.addProc(m)
	s.st.joins[m.ID] = m
	s.stats.restarts++
	s.logf("%v asks to join (restart of %v)", m, old.m)
}

// leave makes a member ask to leave, one at a time and only from views of
// four or more.
func (s *changeSim) leave() {
	cur := s.st.current()
	if len(cur.Members) < 4 || slices.ContainsFunc(cur.Members, func(m Member) bool { return s.st.leaves[m] }) {
		return
	}
	p := s.pick(func(p *simProc) bool { return p.alive && !p.fenced && isMember(cur, p.m) && !s.st.leaves[p.m] })
	if p != nil {
		s.st.leaves[p.m] = true
		s.logf("%v asks to leave", p.m)
	}
}

// catchUp marks a joiner whose state transfer completed.
func (s *changeSim) catchUp() {
	p := s.pick(func(p *simProc) bool {
		return p.alive && !p.fenced && p.joinedAt > 0 && !s.st.caughtUp[p.m] &&
			slices.Contains(s.st.log[p.joinedAt].view.Joining, p.m.ID)
	})
	if p != nil {
		s.st.caughtUp[p.m] = true
		s.logf("%v caught up", p.m)
	}
}

// checkChangeSim checks the properties of everything committed and
// delivered so far. What a commit decided cannot change, so each commit is
// judged once, when the checker first sees it; what members deliver and
// report in an ended view can, so that is checked at every step.
func checkChangeSim(s *changeSim) error {
	if len(s.violations) > 0 {
		return s.violations[0]
	}
	log := s.st.log
	for ; s.checked+1 < len(log); s.checked++ {
		if err := checkCommit(log, s.checked+1); err != nil {
			return err
		}
	}
	for j := 1; j < len(log); j++ {
		pred, v := &log[j-1].view, &log[j].view
		var late *Report
		for _, r := range s.st.reports[j-1] {
			if r.Delivered > v.Start && (late == nil || r.Member.ID < late.Member.ID) {
				late = &r
			}
		}
		if late != nil {
			return fmt.Errorf("%v delivered up to %d in epoch %d, beyond the cut's end %d", late.Member, late.Delivered, pred.Epoch, v.Start)
		}
		for rank, seq := range s.maxSeq[j-1] {
			if seq > v.Cut[rank].Seq {
				return fmt.Errorf("sender %d's #%d was delivered in epoch %d but lies beyond the cut's %d",
					v.Cut[rank].ID, seq, pred.Epoch, v.Cut[rank].Seq)
			}
		}
	}
	return nil
}

// checkCommit judges the commit of log[j] on log[j-1]: one view per epoch,
// a chain, a well-formed record keeping a majority, and every continuing
// member reported and holds the cut.
func checkCommit(log []simCommit, j int) error {
	c, pred, v := &log[j], &log[j-1].view, &log[j].view
	for i := range j {
		if log[i].view.Epoch == v.Epoch {
			return fmt.Errorf("two views for epoch %d: %s by %v and %s by %v", v.Epoch,
				strings.TrimSpace(describeView(&log[i].view)), log[i].by, strings.TrimSpace(describeView(v)), c.by)
		}
	}
	if v.Epoch != pred.Epoch+1 {
		return fmt.Errorf("epoch %d installed on epoch %d: not a chain", v.Epoch, pred.Epoch)
	}
	if err := checkRecord(pred, v); err != nil {
		return fmt.Errorf("epoch %d: %w", v.Epoch, err)
	}
	if !HasMajority(pred, func(id ID) bool { return c.caughtUp[id] }, v.Members) {
		return fmt.Errorf("epoch %d %s keeps no majority of epoch %d %s (caught up %v)", v.Epoch,
			describeMembers(v.Members), pred.Epoch, describeMembers(pred.Members), sortedIDs(c.caughtUp))
	}
	for _, m := range continuing(pred, v.Members) {
		r, ok := c.reports[m.ID]
		if !ok || r.Member != m {
			return fmt.Errorf("epoch %d committed without %v's final report on epoch %d", v.Epoch, m, pred.Epoch)
		}
		held := c.held[m.ID]
		if len(r.Held) != len(v.Cut) || len(held) != len(v.Cut) {
			return fmt.Errorf("epoch %d: %v reported on %d senders and holds %d, the cut has %d", v.Epoch, m, len(r.Held), len(held), len(v.Cut))
		}
		for k, cut := range v.Cut {
			if r.Held[k] < cut.Seq || held[k] < cut.Seq {
				return fmt.Errorf("epoch %d: %v reported holding %d (holds %d) of sender %d's messages, below the cut's %d",
					v.Epoch, m, r.Held[k], held[k], cut.ID, cut.Seq)
			}
		}
	}
	return nil
}

// checkRecord checks that v is a well-formed successor record of pred:
// its cut covers pred's senders in rank order, its Start ends pred at the
// cut and Sent carries every continuing member's count on.
func checkRecord(pred, v *View) error {
	if len(v.Cut) != len(pred.Members) {
		return fmt.Errorf("cut of %d senders for a view of %d", len(v.Cut), len(pred.Members))
	}
	for k, c := range v.Cut {
		if c.ID != pred.Members[k].ID {
			return fmt.Errorf("cut names sender %d at rank %d, which is %v", c.ID, k, pred.Members[k])
		}
	}
	if end := End(pred, v.Cut); v.Start != end {
		return fmt.Errorf("start %d, but the cut ends the previous view at %d", v.Start, end)
	}
	if len(v.Sent) != len(v.Members) {
		return fmt.Errorf("%d sent counts for %d members", len(v.Sent), len(v.Members))
	}
	for i, m := range v.Members {
		want := uint64(0)
		if r := pred.Rank(m.ID); r >= 0 && pred.Members[r] == m {
			want = pred.Sent[r] + v.Cut[r].Seq
		}
		if v.Sent[i] != want {
			return fmt.Errorf("%v sent %d before, want %d", m, v.Sent[i], want)
		}
	}
	return nil
}

func isMember(v *View, m Member) bool {
	r := v.Rank(m.ID)
	return r >= 0 && v.Members[r] == m
}

func cloneView(v *View) View {
	c := *v
	c.Members = slices.Clone(v.Members)
	c.Cut = slices.Clone(v.Cut)
	c.Sent = slices.Clone(v.Sent)
	c.Joining = slices.Clone(v.Joining)
	return c
}

const simSteps = 1000

func simSeeds() int {
	if testing.Short() {
		return 100
	}
	return 500
}

// TestChangeSim runs the simulator over many seeds with Decide and an
// honest store: at most one view per epoch, views form a chain, each keeps
// a majority of its predecessor's caught-up members, every continuing
// member reported and holds the cut, and the cut covers everything anyone
// delivered. A failure names the seed and shows the end of its trace.
func TestChangeSim(t *testing.T) {
	var total simStats
	for seed := uint64(1); seed <= uint64(simSeeds()); seed++ {
		s := newChangeSim(seed, Decide, simFaults{})
		if err := s.run(simSteps); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, s.traceTail(40))
		}
		total.add(s.stats)
	}
	t.Logf("%+v", total)
	if testing.Short() {
		return
	}
	// The runs must have exercised what they are meant to.
	for what, n := range map[string]int{
		"views committed":                      total.commits,
		"proposals on a stale view":            total.conflicts,
		"proposals refused for no majority":    total.noMajority,
		"minority decisions":                   total.minority,
		"epochs with two would-be leaders":     total.rivalLeaders,
		"leaders crashing with a proposal":     total.crashedProposing,
		"leaders crashing after committing":    total.crashedAfterCommit,
		"new incarnations replacing a member":  total.replaced,
		"failures and joins batched":           total.batched,
		"graceful leaves":                      total.left,
		"members fenced":                       total.fenced,
		"false suspicions":                     total.falseSuspicions,
		"joiners still joining in a next view": total.joinerUncaught,
	} {
		if n == 0 {
			t.Errorf("no run saw %s", what)
		}
	}
}

func (s *changeSim) traceTail(n int) string {
	return strings.Join(s.trace[max(0, len(s.trace)-n):], "\n")
}

// continuing returns the members of next that were members of cur.
func continuing(cur *View, next []Member) []Member {
	var out []Member
	for _, m := range next {
		if isMember(cur, m) {
			out = append(out, m)
		}
	}
	return out
}

// TestChangeSimCatchesFaults plants one fault at a time — in the decision
// or in the store — and checks that some seed makes the checker report it,
// so that TestChangeSim's silence means something.
func TestChangeSimCatchesFaults(t *testing.T) {
	maxCut := func(self ID, in ChangeInput) (Decision, error) {
		d, err := Decide(self, in)
		if err != nil || d.Propose == nil {
			return d, err
		}
		cut := finalCut(&in.Current, continuing(&in.Current, d.Next), in.Reports)
		for _, m := range continuing(&in.Current, d.Next) {
			for k, h := range in.Reports[m.ID].Held {
				cut[k].Seq = max(cut[k].Seq, h)
			}
		}
		d.Propose = proposal(&in, d.Next, cut)
		return d, nil
	}
	// proposeAnyway proposes whenever self leads, even in a minority
	// (minority) or before every report is in (early).
	proposeAnyway := func(minority, early bool) decideFunc {
		return func(self ID, in ChangeInput) (Decision, error) {
			d, err := Decide(self, in)
			stay := continuing(&in.Current, d.Next)
			if err != nil || d.Propose != nil || !d.Change || self != d.Leader || len(stay) == 0 ||
				(d.Minority && !minority) || (len(d.Waiting) > 0 && !early) {
				return d, err
			}
			reports := map[ID]Report{}
			for _, m := range stay {
				if r, ok := in.Reports[m.ID]; ok && r.Member == m {
					reports[m.ID] = r
				}
			}
			if len(reports) > 0 {
				d.Propose = proposal(&in, d.Next, finalCut(&in.Current, stay, reports))
			}
			return d, nil
		}
	}
	for _, tc := range []struct {
		name   string
		decide decideFunc
		faults simFaults
		want   []string // the violation names one of these
	}{
		{"cut is the maximum", maxCut, simFaults{}, []string{"below the cut"}},
		{"no majority rule", proposeAnyway(true, false), simFaults{noMajority: true}, []string{"keeps no majority"}},
		{"no compare-and-swap", Decide, simFaults{noCAS: true}, []string{"two views for epoch"}},
		{"proposes before all reports", proposeAnyway(false, true), simFaults{}, []string{"without", "below the cut"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(simSeeds()); seed++ {
				s := newChangeSim(seed, tc.decide, tc.faults)
				err := s.run(simSteps)
				if err == nil {
					continue
				}
				if !slices.ContainsFunc(tc.want, func(w string) bool { return strings.Contains(err.Error(), w) }) {
					t.Fatalf("seed %d: caught %q, want a violation mentioning one of %q", seed, err, tc.want)
				}
				t.Logf("seed %d: %v", seed, err)
				return
			}
			t.Fatalf("no seed out of %d exposed the fault", simSeeds())
		})
	}
}
