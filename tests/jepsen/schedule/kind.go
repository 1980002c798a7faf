package schedule

import "fmt"

// Kind is what a step does: a fault, or the recovery from one.
type Kind int

// The kinds of steps. Members and etcd members are numbered from 1.
const (
	// IsolateOne partitions one member from the others. Like every
	// partition, it may cut etcd members off too: those in Etcd are on
	// the side of Sides[0], the others on the side of Sides[1].
	IsolateOne Kind = iota + 1
	// SplitHalves partitions the members into a minority and a majority.
	SplitHalves
	// Bridge partitions the members into two majorities that overlap in
	// one member (two, for an even count): only the bridge reaches
	// everyone.
	Bridge
	// OneWayCut drops the packets that Members send to To; the other
	// direction still flows.
	OneWayCut
	// PacketLoss drops Loss percent of the packets Members send to or
	// receive from other members.
	PacketLoss
	// PacketDelay delays the packets Members send to or receive from
	// other members by Delay, give or take Jitter.
	PacketDelay
	// EtcdPartition cuts Members off from every etcd member.
	EtcdPartition
	// Heal removes every network fault: partitions, cuts, loss and delay.
	Heal

	// KillOne kills one member with SIGKILL.
	KillOne
	// KillMinority kills a minority of the members at once.
	KillMinority
	// KillAll kills every member at once; they restart on their data
	// (a durable restart).
	KillAll
	// Restart starts killed members again on their data directories.
	Restart
	// RestartWiped starts a killed member again on an empty data
	// directory.
	RestartWiped
	// Lose leaves killed members down for good: the run goes on without
	// them, and a majority of the members stays.
	Lose

	// PauseDetection stops a member (SIGSTOP) for longer than the
	// failure-detection timeout, shorter than an etcd lease where the
	// two allow.
	PauseDetection
	// PauseLease stops a member for longer than an etcd lease.
	PauseLease
	// Continue resumes paused members (SIGCONT).
	Continue

	// ClockSkew sets the clocks of some members off by fixed offsets.
	ClockSkew
	// ClockDrift makes the clocks of some members run fast or slow.
	ClockDrift
	// ClockReset puts the clocks of members right again.
	ClockReset

	// EtcdKill kills one etcd member.
	EtcdKill
	// EtcdPause stops one etcd member (SIGSTOP).
	EtcdPause
	// EtcdQuorumLoss kills a majority of the etcd members, for longer
	// than every lease.
	EtcdQuorumLoss
	// EtcdRestart starts killed etcd members again on their data.
	EtcdRestart
	// EtcdContinue resumes a paused etcd member.
	EtcdContinue

	// DiskFull fills the disk of one member's data directory.
	DiskFull
	// DiskFree frees it again.
	DiskFree

	// HealAll undoes every fault still in effect: it heals the network,
	// resumes paused processes, restarts the killed ones not lost, puts
	// clocks right and frees disks. Every schedule ends with it.
	HealAll
)

var kindNames = [...]string{
	IsolateOne:     "isolate-one",
	SplitHalves:    "split-halves",
	Bridge:         "bridge",
	OneWayCut:      "one-way-cut",
	PacketLoss:     "packet-loss",
	PacketDelay:    "packet-delay",
	EtcdPartition:  "etcd-partition",
	Heal:           "heal",
	KillOne:        "kill-one",
	KillMinority:   "kill-minority",
	KillAll:        "kill-all",
	Restart:        "restart",
	RestartWiped:   "restart-wiped",
	Lose:           "lose",
	PauseDetection: "pause-past-detection",
	PauseLease:     "pause-past-lease",
	Continue:       "continue",
	ClockSkew:      "clock-skew",
	ClockDrift:     "clock-drift",
	ClockReset:     "clock-reset",
	EtcdKill:       "etcd-kill",
	EtcdPause:      "etcd-pause",
	EtcdQuorumLoss: "etcd-quorum-loss",
	EtcdRestart:    "etcd-restart",
	EtcdContinue:   "etcd-continue",
	DiskFull:       "disk-full",
	DiskFree:       "disk-free",
	HealAll:        "heal-all",
}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText returns the kind's name.
func (k Kind) MarshalText() ([]byte, error) {
	if k <= 0 || int(k) >= len(kindNames) {
		return nil, fmt.Errorf("schedule: unknown kind %d", int(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText parses a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if i > 0 && name == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("schedule: unknown kind %q", b)
}

// Kinds returns every kind of step, in order.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kindNames)-1)
	for k := IsolateOne; k <= HealAll; k++ {
		out = append(out, k)
	}
	return out
}

// Faults returns the kinds that start a fault episode, in order: the
// kinds a Config draws from. The others are the recoveries that end
// episodes (Heal, Restart, Continue, ClockReset, EtcdRestart,
// EtcdContinue, DiskFree) and HealAll; RestartWiped and Lose end an
// episode that starts with a kill of one member.
func Faults() []Kind {
	return []Kind{
		IsolateOne, SplitHalves, Bridge, OneWayCut, PacketLoss, PacketDelay, EtcdPartition,
		KillOne, KillMinority, KillAll, RestartWiped, Lose,
		PauseDetection, PauseLease,
		ClockSkew, ClockDrift,
		EtcdKill, EtcdPause, EtcdQuorumLoss,
		DiskFull,
	}
}

// lane is the class of faults an episode belongs to: the episodes of one
// lane follow each other, and those of different lanes may overlap. A
// full disk is a process fault, so that no member's disk is full while
// it is killed, restarted or lost.
type lane int

const (
	network lane = iota
	process
	clock
	etcd
	lanes
)

func laneOf(k Kind) lane {
	switch k {
	case IsolateOne, SplitHalves, Bridge, OneWayCut, PacketLoss, PacketDelay, EtcdPartition:
		return network
	case ClockSkew, ClockDrift:
		return clock
	case EtcdKill, EtcdPause, EtcdQuorumLoss:
		return etcd
	}
	return process
}
