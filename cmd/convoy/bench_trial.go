package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/rdma"
)

// trialSpec describes one trial: one message of size bytes from node 0 to
// nodes 1..members-1.
type trialSpec struct {
	members int
	algo    multicast.Algorithm
	size    int
	block   int
}

// trialRunner runs trials one after another on a fleet, each in a fresh
// group.
type trialRunner struct {
	fleet   fleet
	log     *slog.Logger
	timeout time.Duration // per trial
	// lastGroup is the id of the latest group; ids are never reused.
	lastGroup uint64
}

// waitKey is an event the coordinator waits for from one node.
type waitKey struct {
	node  rdma.NodeID
	event string
}

// run runs one trial and returns the time from the root's Send call to the
// last receiver's Complete. It fails if any member reports an error or
// receives anything but the message sent.
func (r *trialRunner) run(ctx context.Context, s trialSpec) (time.Duration, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, r.timeout, fmt.Errorf("trial took longer than %v", r.timeout))
	defer cancel()
	r.lastGroup++
	gid := r.lastGroup
	members := nodeIDs(s.members)
	root := members[0]
	fail := func(phase string, err error) (time.Duration, error) {
		return 0, fmt.Errorf("%s with %d members, %d bytes, group %d: %s: %w", s.algo, s.members, s.size, gid, phase, err)
	}

	// Set up the group on every member.
	setup := nodeCommand{Op: opSetup, Group: gid, Members: members, Algo: s.algo.String(),
		BlockBytes: s.block, Size: s.size, Seed: gid}
	if err := r.broadcast(ctx, s.members, setup); err != nil {
		return fail("setup", err)
	}
	var want uint32
	err := r.await(ctx, gid, expect(members, evReady), func(ev nodeEvent) error {
		if ev.Node == root {
			want = ev.Checksum
		}
		return nil
	})
	if err != nil {
		return fail("setup", err)
	}

	// Send, and wait for every member's Complete.
	if err := r.fleet.command(ctx, 0, nodeCommand{Op: opSend, Group: gid}); err != nil {
		return fail("send", err)
	}
	waits := expect(members, evComplete)
	waits[waitKey{root, evSent}] = true
	var start, end int64
	err = r.await(ctx, gid, waits, func(ev nodeEvent) error {
		switch {
		case ev.Event == evSent:
			start = ev.UnixNano
		case ev.Node != root:
			end = max(end, ev.UnixNano)
		}
		return nil
	})
	if err != nil {
		return fail("transfer", err)
	}

	// Close the group; receivers verify what they got.
	if err := r.broadcast(ctx, s.members, nodeCommand{Op: opClose, Group: gid}); err != nil {
		return fail("close", err)
	}
	err = r.await(ctx, gid, expect(members, evClosed), func(ev nodeEvent) error {
		switch {
		case ev.Node == root:
		case ev.Err != "":
			return fmt.Errorf("node %d received a wrong message: %s", ev.Node, ev.Err)
		case ev.Checksum != want:
			return fmt.Errorf("node %d received a message with checksum %08x, root sent %08x", ev.Node, ev.Checksum, want)
		}
		return nil
	})
	if err != nil {
		return fail("verification", err)
	}
	d := time.Duration(end - start)
	r.log.Debug("trial", "algo", s.algo, "members", s.members, "bytes", s.size, "group", gid, "seconds", d.Seconds())
	return d, nil
}

// expect returns the set of one event from each member.
func expect(members []rdma.NodeID, event string) map[waitKey]bool {
	m := make(map[waitKey]bool, len(members))
	for _, id := range members {
		m[waitKey{id, event}] = true
	}
	return m
}

// broadcast hands c to nodes 0..n-1.
func (r *trialRunner) broadcast(ctx context.Context, n int, c nodeCommand) error {
	for i := range n {
		if err := r.fleet.command(ctx, i, c); err != nil {
			return err
		}
	}
	return nil
}

// await consumes events until every one in waits has arrived for group
// gid, passing each to f. An error event for the group, or one about no
// group (a node process failing), ends the wait with an error; events of
// earlier groups are ignored.
func (r *trialRunner) await(ctx context.Context, gid uint64, waits map[waitKey]bool, f func(nodeEvent) error) error {
	for len(waits) > 0 {
		select {
		case ev := <-r.fleet.events():
			switch {
			case ev.Event == evError && (ev.Group == gid || ev.Group == 0):
				return fmt.Errorf("node %d: %s", ev.Node, ev.Err)
			case ev.Group != gid:
				r.log.Debug("stale event", "event", ev.Event, "node", ev.Node, "group", ev.Group, "err", ev.Err)
			case waits[waitKey{ev.Node, ev.Event}]:
				delete(waits, waitKey{ev.Node, ev.Event})
				if err := f(ev); err != nil {
					return err
				}
			default:
				return fmt.Errorf("node %d: unexpected %s event", ev.Node, ev.Event)
			}
		case <-ctx.Done():
			var missing []string
			for _, k := range slices.SortedFunc(maps.Keys(waits), func(a, b waitKey) int { return cmp.Compare(a.node, b.node) }) {
				missing = append(missing, fmt.Sprintf("%s from node %d", k.event, k.node))
			}
			return fmt.Errorf("still waiting for %s: %w", strings.Join(missing, ", "), context.Cause(ctx))
		}
	}
	return nil
}
