package membership

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Recovery is a restarted member's claim to take part in restarting the
// group after a failure of most of view Epoch: what its durable log holds
// of the group's sequence.
type Recovery struct {
	// Epoch is the view being recovered, the last committed one.
	Epoch uint64 `json:"epoch"`
	// Member is the restarted incarnation.
	Member Member `json:"member"`
	// LogLast is the index of the last entry of the member's log that
	// may stand: entries up to view Epoch's Start, then entries of Epoch
	// (a later entry of an older epoch lies beyond that view's cut).
	// LogEpoch is Epoch if LogLast is beyond the view's Start, else 0.
	// Logs compare by (LogEpoch, LogLast).
	LogEpoch uint64 `json:"log_epoch"`
	LogLast  uint64 `json:"log_last"`
	// Beyond: the member's log or state goes past LogLast, so it cannot
	// hold the chosen log as it is and receives the state instead.
	Beyond bool `json:"beyond,omitempty"`
	// InView: the member's log took part in view Epoch (see TookPart):
	// it holds what the member acknowledged. A claim without it (a wiped
	// or replaced disk) neither counts towards the majority nor is
	// chosen: such a member lost what it acknowledged.
	InView bool `json:"in_view"`
}

// TookPart reports whether member id's durable log took part in view v:
// whether it holds everything the member acknowledged up to the end of
// v. logged holds the epochs of the view records in the log that name
// the member; view reads a committed view.
//
// A log took part in v if it holds v's record. Without it, the member
// never installed v (it crashed first) and acknowledged
// nothing in it; its log still took part if v kept the member, not as a
// joiner, from the view before, and the log took part in that one:
//   - a view that follows by a view change keeps a member without a
//     transfer only after its final report of the view before, which it
//     installed: the log must hold that view's record;
//   - a recovered view keeps without a transfer only claimants whose
//     logs took part in the view it recovers: the same question, one
//     view earlier.
//
// The last view committed before a total failure may be on no member's
// disk: its leader commits it in etcd, and every member may crash before
// it installs it. A wiped or replaced disk holds no record of the views
// its member took part in.
func TookPart(id ID, v View, logged map[uint64]bool, view func(epoch uint64) (View, error)) (bool, error) {
	for {
		switch {
		case logged[v.Epoch]:
			return true, nil
		case v.Epoch < 2 || v.Rank(id) < 0 || slices.Contains(v.Joining, id):
			return false, nil
		case !v.Recovered:
			return logged[v.Epoch-1], nil
		}
		prev, err := view(v.Epoch - 1)
		if errors.Is(err, ErrNoView) {
			return false, nil // trimmed: nothing left to tell by
		}
		if err != nil {
			return false, err
		}
		v = prev
	}
}

// Less orders logs: by epoch, then by index.
func (r Recovery) Less(o Recovery) bool {
	return cmp.Or(cmp.Compare(r.LogEpoch, o.LogEpoch), cmp.Compare(r.LogLast, o.LogLast)) < 0
}

// RecoveryInput is what DecideRecovery looks at: a consistent read of the
// store.
type RecoveryInput struct {
	Current    View
	Registered map[ID]Member
	CaughtUp   map[ID]bool
	Recoveries map[ID]Recovery
}

// RecoveryDecision is DecideRecovery's answer.
type RecoveryDecision struct {
	// Needed: fewer than a majority of Current's caught-up members live
	// on in their incarnation of Current, so no view change can follow
	// it; members restart it from their logs instead.
	Needed bool
	// Dead: no member of Current lives on in its incarnation there, so a
	// recovered view may be committed.
	Dead bool
	// Voters are Current's caught-up members (by ID), Claims those of
	// them with a valid claim from a live registration.
	Voters, Claims []ID
	// Leader is the member that commits the recovered view: the lowest
	// ID among the valid claims (0 if none).
	Leader ID
	// Propose is the recovered view, once Dead and a majority of Voters
	// have claimed: every valid claimant is a member, in Current's rank
	// order; the claimants whose log is not the highest join (receive
	// the state or, if their log is a prefix of the highest, the messages
	// after it: Suffixes). Nil otherwise.
	Propose *View
	// Complete: every voter has claimed (no point waiting for more).
	Complete bool
}

// ErrBadRecovery: a recovery claim does not fit the view it names.
var ErrBadRecovery = errors.New("membership: inconsistent recovery claim")

// DecideRecovery decides whether and how to restart the group from its
// members' logs after most of the current view failed. The recovered view
// keeps every message any claimant's log holds up to the highest (epoch,
// index) log among the claims of Current's caught-up members: a message is
// durable only once every member of its view has it on disk, so a majority
// of Current's caught-up members includes one that holds all durable
// messages, in place.
func DecideRecovery(in RecoveryInput) (RecoveryDecision, error) {
	cur := &in.Current
	var d RecoveryDecision
	if cur.Epoch == 0 {
		return d, nil
	}
	joining := make(map[ID]bool, len(cur.Joining))
	for _, id := range cur.Joining {
		joining[id] = true
	}
	live := 0
	d.Dead = true
	for _, m := range cur.Members {
		voter := !joining[m.ID] || in.CaughtUp[m.ID]
		if voter {
			d.Voters = append(d.Voters, m.ID)
		}
		if reg, ok := in.Registered[m.ID]; ok && reg.Incarnation == m.Incarnation {
			d.Dead = false
			if voter {
				live++
			}
		}
	}
	d.Needed = 2*live <= len(d.Voters)
	if !d.Needed {
		return d, nil
	}
	// Valid claims: for this epoch, from the member's live registration,
	// with one count per member of Current.
	var claims []Recovery
	for _, m := range cur.Members {
		rc, ok := in.Recoveries[m.ID]
		if !ok {
			continue
		}
		if rc.Epoch != cur.Epoch || rc.Member.ID != m.ID || rc.LogEpoch != 0 && (rc.LogEpoch != cur.Epoch || rc.LogLast <= cur.Start) {
			return d, fmt.Errorf("%w: claim of member %d for view %d", ErrBadRecovery, m.ID, cur.Epoch)
		}
		if reg, ok := in.Registered[m.ID]; !ok || reg != rc.Member || rc.Member.Incarnation == m.Incarnation {
			continue // stale: from an earlier restart, or not a restart
		}
		claims = append(claims, rc)
	}
	var best *Recovery
	for i := range claims {
		c := &claims[i]
		if !c.InView || !slices.Contains(d.Voters, c.Member.ID) {
			continue
		}
		d.Claims = append(d.Claims, c.Member.ID)
		if best == nil || best.Less(*c) || !c.Less(*best) && best.Beyond && !c.Beyond {
			best = c
		}
	}
	if len(claims) > 0 {
		d.Leader = claims[0].Member.ID
		for _, c := range claims {
			d.Leader = min(d.Leader, c.Member.ID)
		}
	}
	d.Complete = len(d.Claims) == len(d.Voters)
	if !d.Dead || 2*len(d.Claims) <= len(d.Voters) {
		return d, nil
	}
	// The cut names the previous view's members (the members that come
	// from it and hold the chosen log serve its state); its counts are
	// not known from the logs and play no part in a recovered view.
	next := View{Epoch: cur.Epoch + 1, Recovered: true, Start: best.LogLast}
	for _, m := range cur.Members {
		next.Cut = append(next.Cut, SenderCut{ID: m.ID})
	}
	for _, c := range claims {
		next.Members = append(next.Members, c.Member)
		next.Sent = append(next.Sent, 0)
		if c.Beyond || c.LogEpoch != best.LogEpoch || c.LogLast != best.LogLast || !slices.Contains(d.Claims, c.Member.ID) {
			next.Joining = append(next.Joining, c.Member.ID)
		}
	}
	next.Suffixes = recoverySuffixes(&next, claims, d.Claims)
	d.Propose = &next
	return d, nil
}

// checkRecovered checks a recovered view against the store's state it
// would follow: DecideRecovery on that state must propose exactly it.
func checkRecovered(in RecoveryInput, v *View) error {
	d, err := DecideRecovery(in)
	if err != nil {
		return err
	}
	switch {
	case !d.Dead:
		return fmt.Errorf("membership: recover view %d: a member of view %d is alive: %w", v.Epoch, in.Current.Epoch, ErrConflict)
	case d.Propose == nil:
		return fmt.Errorf("membership: recover view %d: %d of %d voters claimed: %w", v.Epoch, len(d.Claims), len(d.Voters), ErrNoMajority)
	case !sameRecord(d.Propose, v):
		return fmt.Errorf("membership: recover view %d: the claims changed: %w", v.Epoch, ErrConflict)
	}
	return nil
}

func sameRecord(a, b *View) bool {
	return a.Epoch == b.Epoch && a.Start == b.Start && a.Recovered == b.Recovered &&
		slices.Equal(a.Members, b.Members) && slices.Equal(a.Cut, b.Cut) &&
		slices.Equal(a.Sent, b.Sent) && slices.Equal(a.Joining, b.Joining) &&
		slices.Equal(a.Suffixes, b.Suffixes)
}

// MaxSuffixes bounds the suffix transfers of one view.
const MaxSuffixes = 200

// recoverySuffixes returns the suffix transfers of next, the recovered
// view proposed from claims: a joiner whose claim counted (voted: a
// caught-up member of the failed view whose log took part in it) and
// whose log holds nothing beyond its claim keeps its log, which is a
// prefix of the chosen one (the logs of a view's members hold one
// sequence), and receives only the messages after it from a member that
// holds the chosen log. So the restart leaves the
// whole sequence on every such member's disk, also in a group whose
// members have no state to transfer, where a joiner would otherwise
// start from nothing and only the chosen log's holders would keep the
// messages.
func recoverySuffixes(next *View, claims []Recovery, voted []ID) []Suffix {
	var donor ID
	for _, c := range claims {
		if !slices.Contains(next.Joining, c.Member.ID) {
			donor = c.Member.ID
			break
		}
	}
	if donor == 0 {
		return nil
	}
	var out []Suffix
	for _, c := range claims {
		if !slices.Contains(next.Joining, c.Member.ID) || !slices.Contains(voted, c.Member.ID) || c.Beyond || c.LogLast > next.Start || len(out) == MaxSuffixes {
			continue
		}
		out = append(out, Suffix{ID: c.Member.ID, From: c.LogLast + 1, Donor: donor})
	}
	return out
}
