package netns

import (
	"context"
	"fmt"
	"strconv"
)

// SetHostRate shapes host i's link to rateMbit Mbit/s in each direction
// (host to switch and switch to host), replacing the shaping New applied
// from Config.RateMbit, or adding it if the switch was built unshaped. The
// burst is the switch's (Config.BurstBytes); the queue limit holds
// DefaultQueueMillis of traffic at the new rate plus 64 KiB, and the
// host's bound on what one connection may queue (Config.FlowQueueBytes)
// DefaultFlowQueueMillis of it, at least 64 KiB.
//
// It lets one host have a faster or slower link than the others, such as
// a recovering node whose inbound link several senders share.
func (s *Switch) SetHostRate(ctx context.Context, i, rateMbit int) error {
	if i < 0 || i >= len(s.hosts) {
		return fmt.Errorf("netns: no host %d", i)
	}
	if rateMbit <= 0 {
		return fmt.Errorf("netns: host %d: rate %d Mbit/s must be positive", i, rateMbit)
	}
	if err := s.setFlowQueue(i, hostFlowQueueBytes(rateMbit)); err != nil {
		return err
	}
	limit := hostLimitBytes(rateMbit)
	if err := s.reshape(ctx, s.hosts[i].Namespace, "eth0", rateMbit, limit); err != nil { // host to switch
		return err
	}
	return s.reshape(ctx, s.sw, "p"+strconv.Itoa(i), rateMbit, limit) // switch to host
}

// linkBytes is what a link at rateMbit carries in millis milliseconds.
func linkBytes(rateMbit, millis int) int {
	return rateMbit * 1_000_000 / 8 * millis / 1000
}

// hostLimitBytes is the tbf queue limit of a link at rateMbit: what
// withDefaults picks for Config.LimitBytes.
func hostLimitBytes(rateMbit int) int {
	return linkBytes(rateMbit, DefaultQueueMillis) + 64<<10
}

// hostFlowQueueBytes is the bound on what one connection of a host whose
// link runs at rateMbit may queue: what withDefaults picks for
// Config.FlowQueueBytes.
func hostFlowQueueBytes(rateMbit int) int {
	return max(linkBytes(rateMbit, DefaultFlowQueueMillis), minFlowQueueBytes)
}

// reshape installs, or replaces, the tbf qdisc of dev in namespace ns.
func (s *Switch) reshape(ctx context.Context, ns, dev string, rateMbit, limit int) error {
	return s.run(ctx, "tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
		"rate", strconv.Itoa(rateMbit)+"mbit",
		"burst", strconv.Itoa(s.cfg.BurstBytes),
		"limit", strconv.Itoa(limit))
}
