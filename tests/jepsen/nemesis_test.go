package jepsen

import (
	"errors"
	"fmt"
	"slices"

	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// implemented are the fault kinds this harness carries out, in the order
// of schedule.Faults.
var implemented = []schedule.Kind{
	schedule.KillOne, schedule.KillMinority, schedule.KillAll, schedule.RestartWiped, schedule.Lose,
	schedule.PauseDetection, schedule.PauseLease,
	schedule.EtcdKill, schedule.EtcdPause, schedule.EtcdQuorumLoss,
}

// apply carries out one step of a schedule.
func (c *cluster) apply(st schedule.Step) error {
	c.tl.add("step %s", st)
	var errs []error
	try := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch st.Kind {
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
	case schedule.HealAll:
		for i, em := range c.etcd {
			if em.proc.done() {
				try(c.startEtcd(i + 1))
			}
			try(c.contEtcd(i + 1))
		}
		for _, m := range c.members {
			switch {
			case m.lost:
			case !m.up():
				try(c.startMember(m.id, false))
			default:
				try(c.contMember(m.id))
			}
		}
	default:
		return fmt.Errorf("step %v: %v is not implemented", st, st.Kind)
	}
	return errors.Join(errs...)
}

func (c *cluster) killMember(id int) error {
	m := c.members[id-1]
	m.paused = false
	if !m.up() {
		return nil
	}
	return m.proc.kill()
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

// campaignKinds are the fault kinds a campaign draws from.
func campaignKinds() []schedule.Kind { return slices.Clone(implemented) }
