package schedule

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Validate checks that a schedule is well-formed:
//
//   - steps are in time order, from 0, and name members and etcd members
//     that exist;
//   - network faults do not overlap, each is healed by a Heal, and
//     partitions place every member on some side (halves and bridges
//     with the majorities they promise) and name etcd members that
//     exist;
//   - a member is killed, paused or filled only while it is up and not
//     otherwise faulty; every kill is followed by a Restart,
//     RestartWiped or Lose of the same members, every pause by a
//     Continue no sooner than the pause promises, every full disk by a
//     DiskFree; Lose leaves a majority of the members; KillOne and
//     KillMinority kill one member and a minority;
//   - every clock set off is put right by a ClockReset;
//   - every etcd member killed or paused is restarted or continued, and
//     an EtcdQuorumLoss loses the quorum for longer than a lease;
//   - the last step is HealAll, with nothing left to heal, and the run
//     ends a quiet period after it; Lost lists the members lost;
//   - the workload is one of the Config's, or none if it names none.
func (s Schedule) Validate() error {
	var errs []error
	fail := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("step %d (%v): %s", i, s.Steps[i].Kind, fmt.Sprintf(format, args...)))
	}
	cfg := s.Config
	n := cfg.Members
	if n < 3 || cfg.Etcd < 1 {
		return fmt.Errorf("schedule for %d members and %d etcd members", n, cfg.Etcd)
	}
	if len(s.Steps) == 0 {
		return errors.New("no steps")
	}

	type memberState int
	const (
		up memberState = iota
		down
		paused
		lost
	)
	members := make([]memberState, n+1)
	pausedAt := make([]time.Duration, n+1)
	pauseKind := make([]Kind, n+1)
	killKind := make([]Kind, n+1)
	full := make([]bool, n+1)
	skewed := make([]bool, n+1)
	etcdDown := make([]bool, cfg.Etcd+1)
	etcdPaused := make([]bool, cfg.Etcd+1)
	var netFault Kind
	var quorumLostAt time.Duration
	quorumLost := false
	var prev time.Duration

	validMembers := func(i int, ms []int) bool {
		if len(ms) == 0 {
			fail(i, "no members")
			return false
		}
		for k, m := range ms {
			if m < 1 || m > n || k > 0 && ms[k-1] >= m {
				fail(i, "members %v are not distinct members of 1..%d in order", ms, n)
				return false
			}
		}
		return true
	}
	etcdUp := func() int {
		c := 0
		for e := 1; e <= cfg.Etcd; e++ {
			if !etcdDown[e] && !etcdPaused[e] {
				c++
			}
		}
		return c
	}

	for i, st := range s.Steps {
		if st.At < prev || st.At < 0 {
			fail(i, "at %v, before the step before it (%v)", st.At, prev)
		}
		prev = st.At
		if st.Kind == HealAll && i != len(s.Steps)-1 {
			fail(i, "HealAll before the last step")
		}
		switch st.Kind {
		case IsolateOne, SplitHalves, Bridge, OneWayCut, PacketLoss, PacketDelay, EtcdPartition:
			if netFault != 0 {
				fail(i, "while %v is in effect", netFault)
			}
			netFault = st.Kind
		}
		switch st.Kind {
		case IsolateOne, SplitHalves, Bridge:
			checkSides(st, n, func(format string, args ...any) { fail(i, format, args...) })
			for k, e := range st.Etcd {
				if e < 1 || e > cfg.Etcd || k > 0 && st.Etcd[k-1] >= e {
					fail(i, "etcd members %v are not distinct etcd members of 1..%d in order", st.Etcd, cfg.Etcd)
					break
				}
			}
		case OneWayCut:
			if validMembers(i, st.Members) && validMembers(i, st.To) && len(st.Members)+len(st.To) != n {
				fail(i, "cuts %v from %v, not every member", st.Members, st.To)
			}
		case PacketLoss:
			validMembers(i, st.Members)
			if st.Loss < 1 || st.Loss > 100 {
				fail(i, "loss of %d%%", st.Loss)
			}
		case PacketDelay:
			validMembers(i, st.Members)
			if st.Delay <= 0 || st.Jitter < 0 {
				fail(i, "delay %v±%v", st.Delay, st.Jitter)
			}
		case EtcdPartition:
			validMembers(i, st.Members)
		case Heal:
			if netFault == 0 {
				fail(i, "nothing to heal")
			}
			netFault = 0
		case KillOne, KillMinority, KillAll:
			if !validMembers(i, st.Members) {
				break
			}
			switch c := len(st.Members); {
			case st.Kind == KillOne && c != 1:
				fail(i, "kills %d members", c)
			case st.Kind == KillMinority && (c < 1 || c > (n-1)/2):
				fail(i, "kills %d of %d members, not a minority", c, n)
			}
			for _, m := range st.Members {
				if members[m] != up || full[m] {
					fail(i, "member %d is not up, or its disk is full", m)
				}
				members[m], killKind[m] = down, st.Kind
			}
			if st.Kind == KillAll {
				for m := 1; m <= n; m++ {
					if members[m] == up {
						fail(i, "leaves member %d up", m)
					}
				}
			}
		case Restart, RestartWiped, Lose:
			if !validMembers(i, st.Members) {
				break
			}
			if st.Kind == RestartWiped && len(st.Members) > (n-1)/2 {
				fail(i, "wipes %d of %d members' data", len(st.Members), n)
			}
			for _, m := range st.Members {
				if members[m] != down {
					fail(i, "member %d is not down", m)
				}
				if st.Kind == RestartWiped && killKind[m] != KillOne {
					fail(i, "member %d was killed by %v, not kill-one", m, killKind[m])
				}
				members[m] = up
				if st.Kind == Lose {
					members[m] = lost
				}
			}
		case PauseDetection, PauseLease:
			if validMembers(i, st.Members) {
				for _, m := range st.Members {
					if members[m] != up || full[m] {
						fail(i, "member %d is not up, or its disk is full", m)
					}
					members[m], pausedAt[m], pauseKind[m] = paused, st.At, st.Kind
				}
			}
		case Continue:
			if validMembers(i, st.Members) {
				for _, m := range st.Members {
					if members[m] != paused {
						fail(i, "member %d is not paused", m)
						continue
					}
					d := st.At - pausedAt[m]
					if pauseKind[m] == PauseDetection && d <= cfg.DetectionTimeout || pauseKind[m] == PauseLease && d <= cfg.LeaseTTL {
						fail(i, "member %d paused by %v for %v only", m, pauseKind[m], d)
					}
					members[m] = up
				}
			}
		case ClockSkew, ClockDrift:
			if len(st.Clocks) == 0 {
				fail(i, "no clocks")
			}
			for _, c := range st.Clocks {
				if c.Member < 1 || c.Member > n || skewed[c.Member] {
					fail(i, "clock of member %d is not one of 1..%d, or is set off already", c.Member, n)
					continue
				}
				if c.Offset > cfg.MaxSkew || c.Offset < -cfg.MaxSkew {
					fail(i, "clock of member %d off by %v, beyond %v", c.Member, c.Offset, cfg.MaxSkew)
				}
				skewed[c.Member] = true
			}
		case ClockReset:
			if validMembers(i, st.Members) {
				for _, m := range st.Members {
					if !skewed[m] {
						fail(i, "clock of member %d is right", m)
					}
					skewed[m] = false
				}
			}
		case EtcdKill, EtcdPause, EtcdQuorumLoss:
			if len(st.Etcd) == 0 {
				fail(i, "no etcd members")
			}
			before := etcdUp()
			for _, e := range st.Etcd {
				if e < 1 || e > cfg.Etcd || etcdDown[e] || etcdPaused[e] {
					fail(i, "etcd member %d is not one of 1..%d that is up", e, cfg.Etcd)
					continue
				}
				if st.Kind == EtcdPause {
					etcdPaused[e] = true
				} else {
					etcdDown[e] = true
				}
			}
			if st.Kind == EtcdQuorumLoss && etcdUp() > cfg.Etcd/2 {
				fail(i, "leaves %d of %d etcd members up: a quorum", etcdUp(), cfg.Etcd)
			}
			if st.Kind == EtcdQuorumLoss && before > cfg.Etcd/2 {
				quorumLost, quorumLostAt = true, st.At
			}
		case EtcdRestart, EtcdContinue:
			if len(st.Etcd) == 0 {
				fail(i, "no etcd members")
			}
			for _, e := range st.Etcd {
				switch {
				case e < 1 || e > cfg.Etcd:
					fail(i, "etcd member %d is not one of 1..%d", e, cfg.Etcd)
				case st.Kind == EtcdRestart && !etcdDown[e], st.Kind == EtcdContinue && !etcdPaused[e]:
					fail(i, "etcd member %d is not down, or not paused", e)
				}
				if e >= 1 && e <= cfg.Etcd {
					etcdDown[e], etcdPaused[e] = false, false
				}
			}
			if quorumLost && etcdUp() > cfg.Etcd/2 {
				if d := st.At - quorumLostAt; d <= cfg.LeaseTTL {
					fail(i, "etcd quorum lost for %v only, not longer than a lease (%v)", d, cfg.LeaseTTL)
				}
				quorumLost = false
			}
		case DiskFull:
			if validMembers(i, st.Members) {
				for _, m := range st.Members {
					if members[m] != up || full[m] {
						fail(i, "member %d is not up, or its disk is full already", m)
					}
					full[m] = true
				}
			}
		case DiskFree:
			if validMembers(i, st.Members) {
				for _, m := range st.Members {
					if !full[m] {
						fail(i, "member %d's disk is not full", m)
					}
					full[m] = false
				}
			}
		case HealAll:
		default:
			fail(i, "unknown kind")
		}
	}

	last := s.Steps[len(s.Steps)-1]
	if last.Kind != HealAll {
		errs = append(errs, fmt.Errorf("the last step is %v, not %v", last.Kind, HealAll))
	}
	if s.End-last.At != cfg.Quiet || cfg.Quiet <= 0 {
		errs = append(errs, fmt.Errorf("ends at %v, not a quiet period (%v) after the last step at %v", s.End, cfg.Quiet, last.At))
	}
	if netFault != 0 {
		errs = append(errs, fmt.Errorf("%v never healed", netFault))
	}
	var gone []int
	for m := 1; m <= n; m++ {
		switch {
		case members[m] == down:
			errs = append(errs, fmt.Errorf("member %d killed, never restarted nor lost", m))
		case members[m] == paused:
			errs = append(errs, fmt.Errorf("member %d paused, never continued", m))
		case members[m] == lost:
			gone = append(gone, m)
		}
		if full[m] {
			errs = append(errs, fmt.Errorf("member %d's disk never freed", m))
		}
		if skewed[m] {
			errs = append(errs, fmt.Errorf("member %d's clock never put right", m))
		}
	}
	if 2*(n-len(gone)) <= n {
		errs = append(errs, fmt.Errorf("members %v lost: no majority of %d left", gone, n))
	}
	if !slices.Equal(gone, s.Lost) {
		errs = append(errs, fmt.Errorf("members %v lost, the schedule says %v", gone, s.Lost))
	}
	for e := 1; e <= cfg.Etcd; e++ {
		if etcdDown[e] || etcdPaused[e] {
			errs = append(errs, fmt.Errorf("etcd member %d never restarted nor continued", e))
		}
	}
	if s.Workload != "" && !slices.Contains(cfg.Workloads, s.Workload) || s.Workload == "" && len(cfg.Workloads) > 0 {
		errs = append(errs, fmt.Errorf("workload %q, not one of %q", s.Workload, cfg.Workloads))
	}
	return errors.Join(errs...)
}

// checkSides checks the sides of a partition step over n members.
func checkSides(st Step, n int, fail func(format string, args ...any)) {
	if len(st.Sides) != 2 {
		fail("%d sides, want 2", len(st.Sides))
		return
	}
	in := make([]int, n+1)
	for _, side := range st.Sides {
		for _, m := range side {
			if m < 1 || m > n {
				fail("member %d is not one of 1..%d", m, n)
				return
			}
			in[m]++
		}
	}
	shared := 0
	for m := 1; m <= n; m++ {
		switch in[m] {
		case 0:
			fail("member %d on no side", m)
		case 2:
			shared++
		}
	}
	a, b := len(st.Sides[0]), len(st.Sides[1])
	switch st.Kind {
	case IsolateOne:
		if shared != 0 || min(a, b) != 1 {
			fail("sides %v do not isolate one member", st.Sides)
		}
	case SplitHalves:
		if shared != 0 || 2*max(a, b) <= n || min(a, b) == 0 {
			fail("sides %v are not a minority and a majority", st.Sides)
		}
	case Bridge:
		if shared == 0 || 2*a <= n || 2*b <= n || a == n || b == n {
			fail("sides %v are not two majorities bridged", st.Sides)
		}
	}
}
