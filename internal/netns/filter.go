package netns

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Rule drops frames that the switch forwards from a host of From to a
// host of To: every such frame, or Percent percent of them at random.
// Frames in the other direction pass, unless another rule drops them.
type Rule struct {
	From, To []int
	// Percent is the share of frames dropped, from 1 to 100; 0 means
	// 100.
	Percent int
}

// Filter replaces the switch's filter (a partition, or the rules of an
// earlier Filter) with rules, atomically: the switch drops what some
// rule drops and forwards everything else. Rules that name no host on
// one of their ends drop nothing. Heal removes them.
//
// A rule with a Percent below 100 emulates packet loss: nftables drops
// each frame with that probability (numgen random). With TSO a frame can
// carry up to 64 KiB of a TCP stream, so the loss comes in bursts.
func (s *Switch) Filter(ctx context.Context, rules ...Rule) error {
	var b strings.Builder
	for i, r := range rules {
		if r.Percent < 0 || r.Percent > 100 {
			return fmt.Errorf("netns: rule %d drops %d%% of frames", i, r.Percent)
		}
		from, err := s.ports(r.From)
		if err != nil {
			return fmt.Errorf("netns: rule %d: %w", i, err)
		}
		to, err := s.ports(r.To)
		if err != nil {
			return fmt.Errorf("netns: rule %d: %w", i, err)
		}
		if from == "" || to == "" {
			continue
		}
		fmt.Fprintf(&b, "\t\tiifname { %s } oifname { %s }", from, to)
		if r.Percent != 0 && r.Percent != 100 {
			fmt.Fprintf(&b, " numgen random mod 100 < %d", r.Percent)
		}
		b.WriteString(" drop\n")
	}
	return s.replaceFilter(ctx, b.String())
}

// ports returns the bridge ports of hosts as an nftables set's elements.
func (s *Switch) ports(hosts []int) (string, error) {
	var out []string
	for _, h := range hosts {
		if h < 0 || h >= len(s.hosts) {
			return "", fmt.Errorf("no host %d, have %d hosts", h, len(s.hosts))
		}
		out = append(out, strconv.Quote(port(h)))
	}
	return strings.Join(out, ", "), nil
}

// replaceFilter replaces the forward filter of the switch's bridge with
// one that holds rules, nftables statements one a line.
func (s *Switch) replaceFilter(ctx context.Context, rules string) error {
	// Adding the table first makes the deletion succeed whether or not a
	// filter exists; nft applies the whole script as one transaction.
	script := fmt.Sprintf("table bridge %[1]s\ndelete table bridge %[1]s\n"+
		"table bridge %[1]s {\n\tchain forward_filter {\n\t\ttype filter hook forward priority 0; policy accept;\n%[2]s\t}\n}\n",
		partitionTable, rules)
	return s.nft(ctx, script)
}
