package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// partitionTable is the nftables table, in the switch's namespace, that
// holds the rules of the current partition or filter.
const partitionTable = "convoy_partition"

// CheckPartition reports, wrapped in ErrUnsupported, why Partition cannot
// work here: namespaces cannot be built (see Check) or nft (nftables) is
// not installed.
func CheckPartition() error {
	if err := Check(); err != nil {
		return err
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("%w: nft not found (install nftables): %w", ErrUnsupported, err)
	}
	return nil
}

// Partition splits the network: the switch stops forwarding frames
// between hosts on different sides, in both directions, while hosts on
// the same side still reach each other. Each side lists host indexes;
// hosts on no side are left alone and still reach every host (a service
// both sides need, say). It replaces any earlier partition or filter
// (see Filter), atomically.
//
// The rules live in a bridge-family nftables table in the switch's
// namespace, so the hosts' own configuration is untouched. Frames are
// dropped, not refused: a connection across the cut goes silent, as
// after a cable is pulled.
func (s *Switch) Partition(ctx context.Context, sides ...[]int) error {
	if len(sides) < 2 {
		return fmt.Errorf("netns: a partition needs at least two sides, got %d", len(sides))
	}
	seen := make(map[int]bool)
	ports := make([][]string, len(sides))
	for i, side := range sides {
		if len(side) == 0 {
			return fmt.Errorf("netns: side %d of the partition is empty", i)
		}
		for _, h := range side {
			if h < 0 || h >= len(s.hosts) {
				return fmt.Errorf("netns: partition names host %d, have %d hosts", h, len(s.hosts))
			}
			if seen[h] {
				return fmt.Errorf("netns: host %d is on two sides of the partition", h)
			}
			seen[h] = true
			ports[i] = append(ports[i], strconv.Quote(port(h)))
		}
	}
	var rules strings.Builder
	for i := range ports {
		for j := range ports {
			if i != j {
				fmt.Fprintf(&rules, "\t\tiifname { %s } oifname { %s } drop\n",
					strings.Join(ports[i], ", "), strings.Join(ports[j], ", "))
			}
		}
	}
	return s.replaceFilter(ctx, rules.String())
}

// Heal removes the partition or filter and the delays, if any: every host
// reaches every other again, at once. Connections that went silent
// resume once TCP retransmits.
func (s *Switch) Heal(ctx context.Context) error {
	return errors.Join(s.stopDelays(ctx), s.nft(ctx, fmt.Sprintf("table bridge %[1]s\ndelete table bridge %[1]s\n", partitionTable)))
}

// nft runs an nft script in the switch's namespace.
func (s *Switch) nft(ctx context.Context, script string) error {
	if err := CheckPartition(); err != nil {
		return err
	}
	if len(s.created) == 0 {
		return errors.New("netns: the switch is closed")
	}
	s.log.Debug("netns: nft", "script", script)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", s.sw, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netns: nft in %s: %w: %s", s.sw, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// port returns the name of host i's port on the bridge.
func port(i int) string { return "p" + strconv.Itoa(i) }
