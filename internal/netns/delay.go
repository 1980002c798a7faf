package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"
)

// iptables is the iptables front end delay rules need: nftables' own
// queue statement is not built into every kernel, while the NFQUEUE
// target of iptables-nft is.
const iptables = "iptables-nft"

// delayQueue is the netfilter queue a host's delayer reads.
const delayQueue = 0

// CheckDelay reports, wrapped in ErrUnsupported, why Delay cannot work
// here: Partition cannot (see CheckPartition), or iptables-nft is not
// installed (install iptables).
func CheckDelay() error {
	if err := CheckPartition(); err != nil {
		return err
	}
	if _, err := exec.LookPath(iptables); err != nil {
		return fmt.Errorf("%w: %s not found (install iptables): %w", ErrUnsupported, iptables, err)
	}
	return nil
}

// DelayRule delays the packets host From sends to the hosts To by Delay,
// give or take up to Jitter (each packet drawn at random, so that a
// jitter reorders them).
type DelayRule struct {
	From          int
	To            []int
	Delay, Jitter time.Duration
}

// Delay replaces the delays of the switch (those of an earlier Delay)
// with rules, at most one for each host: an NFQUEUE rule in the host's
// output hands the packets to a goroutine of this process that lets each
// go when it is due. Seed seeds the jitter. Heal removes them, as does
// Close.
//
// Packet delay needs userspace because kernels without the netem qdisc
// cannot delay; the packets wait in the kernel, and only their ids travel
// to this process.
func (s *Switch) Delay(ctx context.Context, seed uint64, rules ...DelayRule) error {
	if len(s.created) == 0 {
		return errors.New("netns: the switch is closed")
	}
	seen := make(map[int]bool)
	for i, r := range rules {
		if r.From < 0 || r.From >= len(s.hosts) || seen[r.From] {
			return fmt.Errorf("netns: delay rule %d: host %d is not a host, or has a rule already", i, r.From)
		}
		seen[r.From] = true
		if r.Delay < 0 || r.Jitter < 0 {
			return fmt.Errorf("netns: delay rule %d: delay %v±%v", i, r.Delay, r.Jitter)
		}
		for _, h := range r.To {
			if h < 0 || h >= len(s.hosts) {
				return fmt.Errorf("netns: delay rule %d: no host %d", i, h)
			}
		}
	}
	if err := CheckDelay(); err != nil {
		return err
	}
	if err := s.stopDelays(ctx); err != nil {
		return err
	}
	for _, r := range rules {
		if len(r.To) == 0 {
			continue
		}
		closeDelayer, err := s.startDelayer(r.From, delayQueue, r.Delay, r.Jitter, seed)
		if err != nil {
			return errors.Join(err, s.stopDelays(ctx))
		}
		ns := s.hosts[r.From].Namespace
		s.delays = append(s.delays, func(ctx context.Context) error {
			// No more packets to the queue, then the held ones go.
			return errors.Join(s.run(ctx, "ip", "netns", "exec", ns, iptables, "-t", "mangle", "-F", "OUTPUT"), closeDelayer())
		})
		var to []string
		for _, h := range r.To {
			to = append(to, netip.PrefixFrom(s.hosts[h].Addr, 32).String())
		}
		if err := s.run(ctx, "ip", "netns", "exec", ns, iptables, "-t", "mangle", "-A", "OUTPUT",
			"-d", strings.Join(to, ","), "-j", "NFQUEUE", "--queue-num", fmt.Sprint(delayQueue), "--queue-bypass"); err != nil {
			return errors.Join(err, s.stopDelays(ctx))
		}
	}
	return nil
}

// stopDelays removes every delay: the rules, then the delayers, which let
// the packets they hold go.
func (s *Switch) stopDelays(ctx context.Context) error {
	var errs []error
	for _, stop := range s.delays {
		errs = append(errs, stop(ctx))
	}
	s.delays = nil
	return errors.Join(errs...)
}
