package jepsen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// processKinds are the fault kinds this harness carries out on any
// network, in the order of schedule.Faults; network.networkKinds need
// network namespaces, and diskKinds a tmpfs of each filled member's own
// (root).
var processKinds = []schedule.Kind{
	schedule.KillOne, schedule.KillMinority, schedule.KillAll, schedule.RestartWiped, schedule.Lose,
	schedule.PauseDetection, schedule.PauseLease,
	schedule.ClockSkew, schedule.ClockDrift,
	schedule.EtcdKill, schedule.EtcdPause, schedule.EtcdQuorumLoss,
}

// diskKinds are the fault kinds that fill a member's disk.
var diskKinds = []schedule.Kind{schedule.DiskFull}

// netTimeout bounds changing the network's filter.
const netTimeout = 30 * time.Second

// apply carries out one step of a schedule.
func (c *cluster) apply(ctx context.Context, st schedule.Step) error {
	c.tl.add("step %s", st)
	var errs []error
	try := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch st.Kind {
	case schedule.IsolateOne, schedule.SplitHalves, schedule.Bridge, schedule.OneWayCut,
		schedule.PacketLoss, schedule.PacketDelay, schedule.EtcdPartition, schedule.Heal:
		ctx, cancel := context.WithTimeout(ctx, netTimeout)
		defer cancel()
		try(c.net.fault(ctx, st))
	case schedule.ClockSkew, schedule.ClockDrift:
		for _, ck := range st.Clocks {
			c.members[ck.Member-1].clock = schedule.Clock{Offset: ck.Offset, Drift: ck.Drift}
			try(c.setClock(ck.Member))
		}
	case schedule.ClockReset:
		for _, id := range st.Members {
			c.members[id-1].clock = schedule.Clock{}
			try(c.setClock(id))
		}
	case schedule.KillOne, schedule.KillMinority, schedule.KillAll:
		for _, id := range st.Members {
			try(c.killMember(id))
		}
	case schedule.Restart:
		for _, id := range st.Members {
			try(c.startMember(id, false))
		}
	case schedule.RestartWiped:
		for _, id := range st.Members {
			try(c.startMember(id, true))
		}
	case schedule.Lose:
		for _, id := range st.Members {
			c.members[id-1].lost = true
		}
	case schedule.PauseDetection, schedule.PauseLease:
		for _, id := range st.Members {
			m := c.members[id-1]
			if m.up() && !m.paused {
				try(pause(m.proc))
				m.paused = true
			}
		}
	case schedule.Continue:
		for _, id := range st.Members {
			try(c.contMember(id))
		}
	case schedule.EtcdKill, schedule.EtcdQuorumLoss:
		for _, i := range st.Etcd {
			em := c.etcd[i-1]
			if !em.proc.done() {
				try(em.proc.kill())
			}
			em.paused = false
		}
	case schedule.EtcdRestart:
		for _, i := range st.Etcd {
			try(c.startEtcd(i))
		}
	case schedule.EtcdPause:
		for _, i := range st.Etcd {
			em := c.etcd[i-1]
			try(pause(em.proc))
			em.paused = true
		}
	case schedule.EtcdContinue:
		for _, i := range st.Etcd {
			try(c.contEtcd(i))
		}
	case schedule.DiskFull:
		for _, id := range st.Members {
			m := c.members[id-1]
			try(c.fillDisk(m))
			if m.up() {
				// Its log fails at its next write, ending its group.
				m.proc.allowExit()
			}
		}
	case schedule.DiskFree:
		for _, id := range st.Members {
			try(c.healDisk(id))
		}
	case schedule.HealAll:
		ctx, cancel := context.WithTimeout(ctx, netTimeout)
		defer cancel()
		try(c.net.fault(ctx, st))
		for i, em := range c.etcd {
			if em.proc.done() {
				try(c.startEtcd(i + 1))
			}
			try(c.contEtcd(i + 1))
		}
		for _, m := range c.members {
			m.clock = schedule.Clock{}
			switch {
			case m.lost:
			case m.full:
				try(c.healDisk(m.id))
			case !m.up():
				try(c.startMember(m.id, false))
			default:
				try(c.contMember(m.id))
				try(c.setClock(m.id))
			}
		}
	default:
		return fmt.Errorf("step %v: %v is not implemented", st, st.Kind)
	}
	return errors.Join(errs...)
}

// healDisk frees member id's disk and starts the member again on its
// data directory: a member whose log failed on the full disk has ended
// (its group failed) or is about to, and a log that failed is failed
// for good, so a process that still runs is killed first. The log on
// the directory holds what the member wrote before its disk filled (a
// torn last write is dropped when Pebble replays its WAL); the member
// restarts on it as after a kill.
func (c *cluster) healDisk(id int) error {
	m := c.members[id-1]
	if err := c.freeDisk(m); err != nil {
		return err
	}
	if m.up() {
		if err := m.proc.kill(); err != nil {
			return err
		}
	}
	return c.startMember(id, false)
}

func (c *cluster) killMember(id int) error {
	m := c.members[id-1]
	m.paused = false
	if !m.up() {
		return nil
	}
	return m.proc.kill()
}

// setClock restarts member id with its clock set as m.clock says, if
// its process runs (and is not paused) with a clock set otherwise: a
// SIGKILL, then a start on its data directory. A member down, paused or
// lost gets its clock at its next start.
func (c *cluster) setClock(id int) error {
	m := c.members[id-1]
	switch {
	case m.running == m.clock:
		return nil
	case m.lost || !m.up() || m.paused:
		c.tl.add("member %d: not running, or paused: its clock is set at its next start", id)
		return nil
	}
	if err := m.proc.kill(); err != nil {
		return err
	}
	return c.startMember(id, false)
}

func (c *cluster) contMember(id int) error {
	m := c.members[id-1]
	if !m.paused {
		return nil
	}
	m.paused = false
	if !m.up() {
		return nil
	}
	return cont(m.proc)
}

func (c *cluster) contEtcd(i int) error {
	em := c.etcd[i-1]
	if !em.paused {
		return nil
	}
	em.paused = false
	return cont(em.proc)
}

// campaignKinds are the fault kinds a campaign on nw draws from, in the
// order of schedule.Faults: the network faults with network namespaces,
// the process, clock and etcd faults everywhere, and full disks where
// disks can be mounted (noDisk says why not, if not).
func campaignKinds(nw *network, noDisk string) []schedule.Kind {
	kinds := slices.Concat(nw.networkKinds(), processKinds)
	if noDisk == "" {
		kinds = append(kinds, diskKinds...)
	}
	return kinds
}
