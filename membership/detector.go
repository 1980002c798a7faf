package membership

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for DetectorConfig fields left zero.
const (
	DefaultHeartbeatInterval = 10 * time.Millisecond
	// DefaultTimeout: several missed heartbeats before a neighbour is
	// suspected.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultProbes is how many other neighbours of a suspect are asked.
	DefaultProbes = 2
	// MaxPauseCredit bounds, in timeouts, how much of a neighbour's
	// silence the detector puts down to its own member's pauses (see
	// Detector) before it suspects the neighbour anyway.
	MaxPauseCredit = 4
)

// DetectorConfig configures a member's failure detector.
type DetectorConfig struct {
	// Self is this member's rank in the view, Members the view's size.
	Self, Members int
	// HeartbeatInterval is how often heartbeats go to every neighbour;
	// Timeout how long a neighbour may stay silent before it is suspected.
	HeartbeatInterval, Timeout time.Duration
	// StallTimeout, if positive, is how long a neighbour's receive frontier
	// may stay put, below this member's, while its heartbeats continue,
	// before it is suspected of stalling the group.
	StallTimeout time.Duration
	// Probes is how many other neighbours of a suspect are asked to
	// confirm (CubicRing's multi-path confirmation).
	Probes int
	// StartGrace is how long a neighbour not heard from yet may stay
	// silent (default 3×Timeout): members take up a new view at slightly
	// different times.
	StartGrace time.Duration
}

func (c DetectorConfig) withDefaults() (DetectorConfig, error) {
	if c.Members < 1 || c.Self < 0 || c.Self >= c.Members {
		return c, fmt.Errorf("membership: rank %d in a view of %d", c.Self, c.Members)
	}
	if c.HeartbeatInterval < 0 || c.Timeout < 0 || c.StallTimeout < 0 || c.Probes < 0 || c.StartGrace < 0 {
		return c, errors.New("membership: negative detector setting")
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Probes == 0 {
		c.Probes = DefaultProbes
	}
	if c.StartGrace == 0 {
		c.StartGrace = 3 * c.Timeout
	}
	if c.Timeout <= c.HeartbeatInterval {
		return c, fmt.Errorf("membership: timeout %v must exceed the heartbeat interval %v", c.Timeout, c.HeartbeatInterval)
	}
	return c, nil
}

// MsgKind says what a detector message is.
type MsgKind uint8

const (
	// MsgHeartbeat: the sender is alive; Frontier is its receive frontier.
	MsgHeartbeat MsgKind = iota + 1
	// MsgProbe asks the receiver whether it still hears from Suspect.
	MsgProbe
	// MsgProbeReply answers a probe: Alive says whether the replier heard
	// from Suspect within the timeout (and saw its frontier move).
	MsgProbeReply
)

func (k MsgKind) String() string {
	switch k {
	case MsgHeartbeat:
		return "heartbeat"
	case MsgProbe:
		return "probe"
	case MsgProbeReply:
		return "probe-reply"
	}
	return fmt.Sprintf("MsgKind(%d)", uint8(k))
}

// Message is a detector message between two members (ranks).
type Message struct {
	Kind     MsgKind
	From, To int
	Suspect  int
	Alive    bool
	Frontier uint64
}

// Verdict is a confirmed failure: the runtime records it and starts a view
// change without the member.
type Verdict struct {
	Rank   int
	Reason string
}

// DetectorReady is what the runtime must carry out.
type DetectorReady struct {
	Messages []Message
	// Raised lists the neighbours newly suspected: other paths are asked
	// about each, which then comes back Confirmed or Refuted (unless the
	// view ends first). A suspicion with no other path to ask is raised
	// and confirmed at once.
	Raised    []int
	Confirmed []Verdict
	// Refuted lists suspicions a second path contradicted: the link to
	// that neighbour is bad, the neighbour is not.
	Refuted []int
}

// ErrNotNeighbour is returned by Step for a message naming a rank outside
// the view.
var ErrNotNeighbour = errors.New("membership: not a neighbour")

type watch struct {
	lastHeard     int64
	refutedAt     int64 // when another path last vouched for it
	connLost      bool  // the connection broke, nothing heard since
	frontier      uint64
	frontierSince int64 // when frontier last advanced
	// credit is how much of the silence since lastHeard, stallCredit how
	// much of the stall since frontierSince, was put down to this
	// member's own pauses: each at most MaxPauseCredit timeouts.
	credit, stallCredit int64
	// probing: a suspicion waiting for probe replies until deadline.
	probing  bool
	reason   string
	asked    int
	dead     int
	deadline int64
}

// Detector is one member's failure detector (CubicRing §4): heartbeats to
// and from its neighbours, suspicion after a timeout, confirmation through
// other neighbours of the suspect. It is not safe for concurrent use.
//
// Silence is measured on this member's own time, as Lifeguard's local
// health does: a member that did not run for a while (its process
// starved of CPU, its loop busy) could not take in the heartbeats that
// came meanwhile, which wait in its queues. The detector sees such a
// pause in its own heartbeats: one due at t and sent at t+L shows a
// pause of L. It then moves the time each neighbour was last heard from,
// each probe's deadline and each stall's start L later, so that a pause
// makes no suspect by itself, and queued heartbeats are taken in before
// anyone is suspected. At most MaxPauseCredit timeouts of a neighbour's
// silence are put down to pauses, so a member that is always late still
// suspects a neighbour that died.
type Detector struct {
	cfg       DetectorConfig
	now       int64
	lastBeat  int64
	frontier  uint64
	nbrs      []int
	watches   map[int]*watch
	confirmed map[int]bool
	// wedged: the view is ending and every frontier stops, so stalls are
	// no longer evidence; heartbeats then go to every member, so that
	// each can report whom it still reaches.
	wedged bool
	// heard[r] is when a heartbeat from rank r last arrived.
	heard map[int]int64
	ready DetectorReady
}

// NewDetector returns the detector of member cfg.Self at time now (in
// nanoseconds on its monotonic clock).
func NewDetector(cfg DetectorConfig, now int64) (*Detector, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Detector{cfg: c, now: now, lastBeat: now - int64(c.HeartbeatInterval), nbrs: Neighbours(c.Members, c.Self),
		watches: make(map[int]*watch), confirmed: make(map[int]bool), heard: make(map[int]int64)}
	for _, n := range d.nbrs {
		// A neighbour is first suspected after StartGrace rather than
		// Timeout: it may not have taken up the view yet.
		d.watches[n] = &watch{lastHeard: now + int64(c.StartGrace-c.Timeout), frontierSince: now}
	}
	return d, nil
}

// SetFrontier records this member's receive frontier, sent with
// heartbeats and compared with the neighbours'.
func (d *Detector) SetFrontier(f uint64) { d.frontier = max(d.frontier, f) }

// Tick tells the detector that time now has come: it sends heartbeats when
// due, suspects silent or stalled neighbours, and settles probes whose
// time is up.
func (d *Detector) Tick(now int64) {
	d.now = max(d.now, now)
	if d.now-d.lastBeat >= int64(d.cfg.HeartbeatInterval) {
		if late := d.now - d.lastBeat - int64(d.cfg.HeartbeatInterval); late > 0 {
			d.paused(late)
		}
		d.lastBeat = d.now
		if d.wedged {
			for r := range d.cfg.Members {
				if r != d.cfg.Self {
					d.send(Message{Kind: MsgHeartbeat, To: r, Frontier: d.frontier})
				}
			}
		} else {
			for _, n := range d.nbrs {
				d.send(Message{Kind: MsgHeartbeat, To: n, Frontier: d.frontier})
			}
		}
	}
	for _, n := range d.nbrs {
		w := d.watches[n]
		if d.confirmed[n] {
			continue
		}
		switch {
		case w.probing && d.now >= w.deadline:
			// No one refuted the suspicion in time: the probes that did
			// not come back count against the suspect too.
			d.confirm(n, w.reason)
		case w.probing:
		case d.now-w.refutedAt < d.reprobe():
			// Refuted a moment ago: asked again only after a while, or a
			// suspicion the others refute at once would be raised again at
			// once, and probes would go back and forth without pause.
		case d.now-w.lastHeard >= int64(d.cfg.Timeout):
			reason := fmt.Sprintf("no heartbeat for %v", time.Duration(d.now-w.lastHeard+w.credit))
			if w.credit > 0 {
				reason += fmt.Sprintf(" (%v of it this member's own pauses)", time.Duration(w.credit))
			}
			d.suspect(n, w, reason)
		case d.stalled(w):
			d.suspect(n, w, fmt.Sprintf("frontier stuck at %d for %v", w.frontier, time.Duration(d.now-w.frontierSince)))
		}
	}
}

// paused credits every neighbour's silence, probe and stall with a pause
// of this member's of length l (see Detector).
func (d *Detector) paused(l int64) {
	limit := MaxPauseCredit * int64(d.cfg.Timeout)
	for _, w := range d.watches {
		// Never past now: silence that began within the pause is not
		// credited beyond its start.
		if c := min(l, limit-w.credit, d.now-w.lastHeard); c > 0 {
			w.credit += c
			w.lastHeard += c
			if w.probing {
				w.deadline += c
			}
		}
		if c := min(l, limit-w.stallCredit, d.now-w.frontierSince); c > 0 {
			w.stallCredit += c
			w.frontierSince += c
		}
	}
}

// Wedge tells the detector that the view is ending: frontiers stop moving
// everywhere, so from now on only silence makes a suspect, and heartbeats
// go to every member (see Heard).
func (d *Detector) Wedge() {
	if !d.wedged {
		d.wedged = true
		d.lastBeat = d.now - int64(d.cfg.HeartbeatInterval) // beat at the next Tick
	}
}

// Heard returns the ranks whose heartbeats arrived at or after since, in
// order. Once every member is wedged and beats to all, this is whom the
// member reaches.
func (d *Detector) Heard(since int64) []int {
	var out []int
	for r := range d.cfg.Members {
		if at, ok := d.heard[r]; ok && at >= since && r != d.cfg.Self {
			out = append(out, r)
		}
	}
	return out
}

// reprobe is how long after a refutation a silent neighbour is probed
// again: the members that vouched for it may only have heard from it a
// little later than this one did.
func (d *Detector) reprobe() int64 {
	return max(2*int64(d.cfg.HeartbeatInterval), int64(d.cfg.Timeout)/4)
}

// Disconnected tells the detector that the connection to rank broke (the
// peer's host reset it, as when its process dies). The neighbour is
// suspected at once rather than after a timeout, and this member answers
// probes about it with "dead" until it hears from it again; other paths
// still have to confirm, so a broken link alone excludes no one.
func (d *Detector) Disconnected(rank int) {
	w := d.watches[rank]
	if w == nil {
		return
	}
	w.connLost = true
	if !w.probing && !d.confirmed[rank] {
		d.suspect(rank, w, "connection lost")
	}
}

// stalled reports whether a neighbour's frontier has stayed below this
// member's for the stall timeout while its heartbeats kept coming.
func (d *Detector) stalled(w *watch) bool {
	return d.cfg.StallTimeout > 0 && !d.wedged && w.frontier < d.frontier && d.now-w.frontierSince >= int64(d.cfg.StallTimeout)
}

// suspect starts multi-path confirmation: other neighbours of the suspect
// are asked whether they still hear from it.
func (d *Detector) suspect(s int, w *watch, reason string) {
	d.ready.Raised = append(d.ready.Raised, s)
	probers := d.probers(s)
	if len(probers) == 0 {
		d.confirm(s, reason+" (no other path to ask)")
		return
	}
	*w = watch{lastHeard: w.lastHeard, frontier: w.frontier, frontierSince: w.frontierSince, connLost: w.connLost, refutedAt: w.refutedAt,
		credit: w.credit, stallCredit: w.stallCredit, probing: true, reason: reason, asked: len(probers), deadline: d.now + int64(d.cfg.Timeout)}
	for _, p := range probers {
		d.send(Message{Kind: MsgProbe, To: p, Suspect: s})
	}
}

// probers returns up to Probes neighbours of s other than this member,
// starting at a position derived from this member's rank so that the
// watchers of one suspect spread their probes.
func (d *Detector) probers(s int) []int {
	var cands []int
	for _, p := range Neighbours(d.cfg.Members, s) {
		if p != d.cfg.Self && !d.confirmed[p] {
			cands = append(cands, p)
		}
	}
	var out []int
	for i := 0; i < len(cands) && len(out) < d.cfg.Probes; i++ {
		out = append(out, cands[(d.cfg.Self+i)%len(cands)])
	}
	return out
}

func (d *Detector) confirm(s int, reason string) {
	d.confirmed[s] = true
	d.watches[s].probing = false
	d.ready.Confirmed = append(d.ready.Confirmed, Verdict{Rank: s, Reason: reason})
}

func (d *Detector) send(m Message) {
	m.From = d.cfg.Self
	d.ready.Messages = append(d.ready.Messages, m)
}

// Step applies a message received at time now.
func (d *Detector) Step(now int64, m Message) error {
	d.now = max(d.now, now)
	if m.From < 0 || m.From >= d.cfg.Members || m.From == d.cfg.Self {
		return fmt.Errorf("%w: message from rank %d", ErrNotNeighbour, m.From)
	}
	switch m.Kind {
	case MsgHeartbeat:
		d.heard[m.From] = d.now
		w := d.watches[m.From]
		if w == nil {
			return nil // a wedged member beating to all
		}
		w.lastHeard, w.connLost, w.credit = d.now, false, 0
		if m.Frontier > w.frontier {
			w.frontier, w.frontierSince, w.stallCredit = m.Frontier, d.now, 0
		}
		if w.probing && !d.stalled(w) {
			// Direct evidence beats the probes.
			w.probing = false
			d.ready.Refuted = append(d.ready.Refuted, m.From)
		}
	case MsgProbe:
		w := d.watches[m.Suspect]
		alive := w != nil && !d.confirmed[m.Suspect] && !w.connLost && d.now-w.lastHeard < int64(d.cfg.Timeout) && !d.stalled(w)
		d.send(Message{Kind: MsgProbeReply, To: m.From, Suspect: m.Suspect, Alive: alive})
	case MsgProbeReply:
		w := d.watches[m.Suspect]
		if w == nil || !w.probing {
			return nil // a late reply
		}
		if m.Alive {
			// Another path reaches the suspect: only our link is bad. The
			// suspect is not heard from for that (probes are answered from
			// direct heartbeats only, or two members whose timeouts fire
			// apart would keep vouching for a dead one through each
			// other); it is probed again a timeout later.
			w.probing = false
			w.refutedAt = d.now
			d.ready.Refuted = append(d.ready.Refuted, m.Suspect)
			return nil
		}
		if w.dead++; w.dead >= w.asked {
			d.confirm(m.Suspect, w.reason+fmt.Sprintf("; confirmed by %d other neighbours", w.dead))
		}
	default:
		return fmt.Errorf("membership: unknown detector message kind %d", m.Kind)
	}
	return nil
}

// Deadline returns the time at which Tick next has something to do.
func (d *Detector) Deadline() int64 {
	next := d.lastBeat + int64(d.cfg.HeartbeatInterval)
	for _, n := range d.nbrs {
		w := d.watches[n]
		switch {
		case d.confirmed[n]:
		case w.probing:
			next = min(next, w.deadline)
		default:
			next = min(next, max(w.lastHeard+int64(d.cfg.Timeout), w.refutedAt+d.reprobe()))
		}
	}
	return next
}

// Ready returns what the runtime must carry out and clears it.
func (d *Detector) Ready() DetectorReady {
	rd := d.ready
	d.ready = DetectorReady{}
	return rd
}
