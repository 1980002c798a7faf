package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Defaults for Config fields left zero.
const (
	DefaultMembers = 3
	DefaultEtcd    = 3
	// DefaultFaults: each schedule draws 1 to 3 fault episodes at random,
	// beyond those it must include.
	DefaultFaults = 3
	// DefaultDuration: faults start within the first minute.
	DefaultDuration = time.Minute
	// DefaultQuiet: ten seconds without faults at the end, long enough
	// for a view change and a restart from the logs.
	DefaultQuiet = 10 * time.Second
	// DefaultDetectionTimeout is the library's default suspect timeout
	// (convoy.DefaultSuspectTimeout).
	DefaultDetectionTimeout = 250 * time.Millisecond
	// DefaultLeaseTTL is the library's default etcd lease TTL
	// (membership.DefaultLeaseTTL).
	DefaultLeaseTTL = 5 * time.Second
	// DefaultMaxSkew: clocks are set off by up to two seconds.
	DefaultMaxSkew = 2 * time.Second
)

// Config says what schedules to generate. The zero value is ready to
// use: WithDefaults fills every field left zero.
type Config struct {
	// Members is the number of members, at least 3.
	Members int `json:"members"`
	// Etcd is the number of etcd members.
	Etcd int `json:"etcd"`
	// Faults bounds the fault episodes a schedule draws at random: from 1
	// to Faults, beyond those of Include.
	Faults int `json:"faults"`
	// Kinds are the fault kinds to draw from (see Faults); nil means all
	// of them. A run without durable delivery leaves out KillAll.
	Kinds []Kind `json:"kinds,omitempty"`
	// Include are fault kinds the schedule contains whatever it draws.
	Include []Kind `json:"include,omitempty"`
	// Duration is the time within which fault episodes start.
	Duration time.Duration `json:"duration"`
	// Quiet is the time without faults after the final HealAll.
	Quiet time.Duration `json:"quiet"`
	// DetectionTimeout is the members' failure-detection timeout, which
	// a PauseDetection outlasts.
	DetectionTimeout time.Duration `json:"detection_timeout"`
	// LeaseTTL is the members' etcd lease TTL, which a PauseLease and an
	// EtcdQuorumLoss outlast.
	LeaseTTL time.Duration `json:"lease_ttl"`
	// MaxSkew bounds how far a clock is set off, or drifts.
	MaxSkew time.Duration `json:"max_skew"`
	// Workloads name the workloads a schedule may run under (names this
	// package does not interpret); the seed draws one of them. Nil: the
	// schedule names none.
	Workloads []string `json:"workloads,omitempty"`
}

// WithDefaults returns c with every field left zero set to its default.
func (c Config) WithDefaults() Config {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.Members, DefaultMembers)
	set(&c.Etcd, DefaultEtcd)
	set(&c.Faults, DefaultFaults)
	setD(&c.Duration, DefaultDuration)
	setD(&c.Quiet, DefaultQuiet)
	setD(&c.DetectionTimeout, DefaultDetectionTimeout)
	setD(&c.LeaseTTL, DefaultLeaseTTL)
	setD(&c.MaxSkew, DefaultMaxSkew)
	if c.Kinds == nil {
		c.Kinds = Faults()
	}
	return c
}

// check reports what is wrong with a Config that went through
// WithDefaults.
func (c Config) check() error {
	var errs []error
	if c.Members < 3 {
		errs = append(errs, fmt.Errorf("%d members, at least 3 needed", c.Members))
	}
	if c.Etcd < 1 || c.Faults < 1 || c.Duration < 0 || c.Quiet <= 0 || c.DetectionTimeout <= 0 || c.LeaseTTL <= 0 || c.MaxSkew <= 0 {
		errs = append(errs, fmt.Errorf("config out of range: %+v", c))
	}
	for _, k := range slices.Concat(c.Kinds, c.Include) {
		if !slices.Contains(Faults(), k) {
			errs = append(errs, fmt.Errorf("%v is not a fault kind", k))
		}
	}
	if len(c.Kinds) == 0 {
		errs = append(errs, errors.New("no fault kinds to draw from"))
	}
	for _, w := range c.Workloads {
		if w == "" {
			errs = append(errs, errors.New("a workload without a name"))
		}
	}
	return errors.Join(errs...)
}

// Clock is how one member's clock is set off.
type Clock struct {
	Member int `json:"member"`
	// Offset is added to the member's clock.
	Offset time.Duration `json:"offset,omitempty"`
	// Drift makes the clock gain (or, negative, lose) Drift microseconds
	// a second.
	Drift int `json:"drift_ppm,omitempty"`
}

// Step is one timed step of a schedule. The fields after Kind are those
// the kind's documentation names; members and etcd members are numbered
// from 1.
type Step struct {
	// At is the offset from the start of the run.
	At   time.Duration `json:"at"`
	Kind Kind          `json:"kind"`
	// Members are the members the step applies to: killed, restarted,
	// paused, continued, cut off, filled or freed.
	Members []int `json:"members,omitempty"`
	// Sides are the sides of a partition: two members reach each other
	// if some side holds both. A member in two sides bridges them.
	Sides [][]int `json:"sides,omitempty"`
	// To are the members that no longer receive Members' packets, for a
	// OneWayCut.
	To []int `json:"to,omitempty"`
	// Etcd are the etcd members the step applies to. For a partition
	// (IsolateOne, SplitHalves, Bridge) they are the etcd members on the
	// side of Sides[0], which no longer reach those on the side of
	// Sides[1], nor the members on that side only; without them every
	// etcd member reaches every member.
	Etcd []int `json:"etcd,omitempty"`
	// Clocks are the clocks a ClockSkew or ClockDrift sets off.
	Clocks []Clock `json:"clocks,omitempty"`
	// Loss is the percentage of packets a PacketLoss drops.
	Loss int `json:"loss,omitempty"`
	// Delay and Jitter shape a PacketDelay.
	Delay  time.Duration `json:"delay,omitempty"`
	Jitter time.Duration `json:"jitter,omitempty"`
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8v  %s", s.At, s.Kind)
	if len(s.Members) > 0 {
		fmt.Fprintf(&b, " members=%v", s.Members)
	}
	if len(s.Sides) > 0 {
		fmt.Fprintf(&b, " sides=%v", s.Sides)
	}
	if len(s.To) > 0 {
		fmt.Fprintf(&b, " to=%v", s.To)
	}
	if len(s.Etcd) > 0 {
		fmt.Fprintf(&b, " etcd=%v", s.Etcd)
	}
	for _, c := range s.Clocks {
		fmt.Fprintf(&b, " clock[%d]=", c.Member)
		if c.Offset != 0 || c.Drift == 0 {
			if c.Offset >= 0 {
				b.WriteByte('+')
			}
			fmt.Fprintf(&b, "%v", c.Offset)
		}
		if c.Drift != 0 {
			fmt.Fprintf(&b, "%+dppm", c.Drift)
		}
	}
	if s.Loss != 0 {
		fmt.Fprintf(&b, " loss=%d%%", s.Loss)
	}
	if s.Delay != 0 {
		fmt.Fprintf(&b, " delay=%v±%v", s.Delay, s.Jitter)
	}
	return b.String()
}

// Schedule is a fault schedule for one run.
type Schedule struct {
	// Seed and Config generate the schedule again.
	Seed   int64  `json:"seed"`
	Config Config `json:"config"`
	// Workload is the workload the seed drew from Config.Workloads, if
	// it names any.
	Workload string `json:"workload,omitempty"`
	// Episodes are the kinds of the schedule's fault episodes, those it
	// includes and those it drew, in the order they were laid out.
	Episodes []Kind `json:"episodes"`
	// Steps are in time order; the last is HealAll.
	Steps []Step `json:"steps"`
	// End is when the run ends: after HealAll and the quiet period.
	End time.Duration `json:"end"`
	// Lost are the members lost for good (see Lose): the run ends
	// without them.
	Lost []int `json:"lost,omitempty"`
}

// String prints the schedule, one step a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule seed %d", s.Seed)
	if s.Workload != "" {
		fmt.Fprintf(&b, " (workload %s)", s.Workload)
	}
	fmt.Fprintf(&b, ": %d members, %d etcd members, faults %v, ends at %v", s.Config.Members, s.Config.Etcd, s.Episodes, s.End)
	if len(s.Lost) > 0 {
		fmt.Fprintf(&b, ", members %v lost", s.Lost)
	}
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "\n%v", st)
	}
	return b.String()
}

// Kinds returns the kinds of the schedule's steps, in order, each once.
func (s Schedule) Kinds() []Kind {
	var out []Kind
	for _, st := range s.Steps {
		if !slices.Contains(out, st.Kind) {
			out = append(out, st.Kind)
		}
	}
	return out
}
