package schedule

import (
	"math/rand/v2"
	"slices"
	"time"
)

// stream is the second word of every generator's PCG state, so that a
// schedule depends on its seed alone: stream for the faults, stream+1
// for a campaign's seeds, workloadStream for the workload.
const (
	stream         = 0x636f6e766f79
	workloadStream = stream + 2
)

// Generate returns the schedule of seed for cfg (fields left zero take
// their defaults): 1 to cfg.Faults fault episodes drawn from cfg.Kinds,
// plus one of each kind in cfg.Include, laid out in time, then HealAll
// and the quiet period; and one of cfg.Workloads, drawn apart from the
// faults (adding workloads to a Config changes no schedule's faults).
// The same seed and Config give the same schedule. It panics if cfg is out of range (fewer than 3 members, a
// kind that is not a fault), as that is a mistake in the caller.
func Generate(seed int64, cfg Config) Schedule {
	cfg = cfg.WithDefaults()
	if err := cfg.check(); err != nil {
		panic("schedule: " + err.Error())
	}
	g := &generator{
		r:     rand.New(rand.NewPCG(uint64(seed), stream)),
		cfg:   cfg,
		alive: seq(cfg.Members),
	}
	kinds := slices.Clone(cfg.Include)
	for range 1 + g.r.IntN(cfg.Faults) {
		kinds = append(kinds, cfg.Kinds[g.r.IntN(len(cfg.Kinds))])
	}
	g.r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })

	// Each class of faults has its own time line; an episode starts when
	// the one before it in its class has ended, after a pause.
	var next [lanes]time.Duration
	for l := range next {
		next[l] = g.between(0, cfg.Duration/4)
	}
	for _, k := range kinds {
		l := laneOf(k)
		end := g.episode(k, next[l])
		next[l] = end + g.between(time.Second, max(time.Second, cfg.Duration/8))
	}
	last := cfg.Duration
	for _, st := range g.steps {
		last = max(last, st.At+time.Second)
	}
	slices.SortStableFunc(g.steps, func(a, b Step) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	g.steps = append(g.steps, Step{At: last, Kind: HealAll})
	return Schedule{Seed: seed, Config: cfg, Workload: workload(seed, cfg.Workloads), Episodes: kinds, Steps: g.steps, End: last + cfg.Quiet, Lost: g.lost}
}

// workload returns the workload seed draws from workloads, or "" if
// there are none.
func workload(seed int64, workloads []string) string {
	if len(workloads) == 0 {
		return ""
	}
	return workloads[rand.New(rand.NewPCG(uint64(seed), workloadStream)).IntN(len(workloads))]
}

// Campaign returns count schedules. The seed of schedule i is drawn from
// seed. With h = ⌈len(cfg.Kinds)/2⌉, each of the first h schedules
// includes two fault kinds of cfg.Kinds besides cfg.Include and what it
// draws: schedule i includes kinds i and i+h (when there is one), which
// pairs faults of different classes when cfg.Kinds is in the order of
// Faults. So the first h schedules cover every fault kind, and with them
// every kind of step; the later ones draw their faults at random. The
// first h schedules also take cfg.Workloads in turn, from one the
// campaign's seed draws (their seeds are drawn until one draws the
// workload whose turn it is), so that they cover every workload when
// there are no more than h. Each schedule is Generate(s.Seed, s.Config).
func Campaign(seed int64, count int, cfg Config) []Schedule {
	cfg = cfg.WithDefaults()
	r := rand.New(rand.NewPCG(uint64(seed), stream+1))
	h := (len(cfg.Kinds) + 1) / 2
	first := 0
	if len(cfg.Workloads) > 0 {
		first = r.IntN(len(cfg.Workloads))
	}
	out := make([]Schedule, 0, max(count, 0))
	for i := range count {
		c := cfg
		c.Kinds = slices.Clone(cfg.Kinds)
		c.Include = slices.Clone(cfg.Include)
		c.Workloads = slices.Clone(cfg.Workloads)
		if i < h {
			c.Include = append(c.Include, cfg.Kinds[i])
			if i+h < len(cfg.Kinds) {
				c.Include = append(c.Include, cfg.Kinds[i+h])
			}
		}
		s := int64(r.Uint64())
		if i < h && len(cfg.Workloads) > 0 {
			for want := cfg.Workloads[(first+i)%len(cfg.Workloads)]; workload(s, cfg.Workloads) != want; {
				s = int64(r.Uint64())
			}
		}
		out = append(out, Generate(s, c))
	}
	return out
}

type generator struct {
	r     *rand.Rand
	cfg   Config
	steps []Step
	alive []int // the members not lost, in order
	lost  []int
}

// between returns a duration in [lo, hi], in whole milliseconds.
func (g *generator) between(lo, hi time.Duration) time.Duration {
	lo, hi = lo.Round(time.Millisecond), hi.Round(time.Millisecond)
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(g.r.Int64N(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
}

func (g *generator) add(st Step) { g.steps = append(g.steps, st) }

// pick returns n of from, in order.
func (g *generator) pick(from []int, n int) []int {
	p := slices.Clone(from)
	g.r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	p = p[:n]
	slices.Sort(p)
	return p
}

// seq returns 1..n.
func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// minority is the size of the largest minority of n members.
func minority(n int) int { return (n - 1) / 2 }

// episode adds the steps of one episode of fault k from time at, and
// returns when it ends.
func (g *generator) episode(k Kind, at time.Duration) time.Duration {
	cfg := g.cfg
	n := cfg.Members
	all := seq(n)
	short := g.between(time.Second, 2*cfg.LeaseTTL)
	switch k {
	case IsolateOne:
		one := g.pick(all, 1)
		g.add(Step{At: at, Kind: k, Sides: [][]int{one, without(all, one)}, Etcd: g.etcdSide()})
	case SplitHalves:
		minor := g.pick(all, minority(n))
		g.add(Step{At: at, Kind: k, Sides: [][]int{minor, without(all, minor)}, Etcd: g.etcdSide()})
	case Bridge:
		// Two majorities of n/2+1 that overlap in the bridge.
		p := g.pick(all, n)
		g.r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
		half := n/2 + 1
		a, b := slices.Clone(p[:half]), slices.Clone(p[n-half:])
		slices.Sort(a)
		slices.Sort(b)
		g.add(Step{At: at, Kind: k, Sides: [][]int{a, b}, Etcd: g.etcdSide()})
	case OneWayCut:
		from := g.pick(all, 1+g.r.IntN(minority(n)))
		g.add(Step{At: at, Kind: k, Members: from, To: without(all, from)})
	case PacketLoss:
		g.add(Step{At: at, Kind: k, Members: g.pick(all, 1+g.r.IntN(n)), Loss: 5 + g.r.IntN(36)})
	case PacketDelay:
		d := g.between(5*time.Millisecond, 200*time.Millisecond)
		g.add(Step{At: at, Kind: k, Members: g.pick(all, 1+g.r.IntN(n)), Delay: d, Jitter: g.between(0, d/2)})
	case EtcdPartition:
		g.add(Step{At: at, Kind: k, Members: g.pick(all, 1+g.r.IntN(n-1))})
	case KillOne, KillMinority, KillAll, RestartWiped, Lose:
		return g.kill(k, at)
	case PauseDetection, PauseLease:
		d := g.between(cfg.LeaseTTL*3/2, 3*cfg.LeaseTTL)
		if k == PauseDetection {
			d = g.between(2*cfg.DetectionTimeout, max(3*cfg.DetectionTimeout, cfg.LeaseTTL/2))
		}
		m := g.pick(g.alive, 1)
		g.add(Step{At: at, Kind: k, Members: m})
		g.add(Step{At: at + d, Kind: Continue, Members: m})
		return at + d
	case ClockSkew, ClockDrift:
		d := g.between(5*time.Second, 15*time.Second)
		ms := g.pick(all, 1+g.r.IntN(n))
		var clocks []Clock
		for _, m := range ms {
			c := Clock{Member: m}
			if k == ClockSkew {
				c.Offset = g.between(-cfg.MaxSkew, cfg.MaxSkew)
			} else {
				// Within the episode, the clock drifts by MaxSkew at most.
				ppm := int(cfg.MaxSkew * 1_000_000 / d)
				c.Drift = g.r.IntN(2*ppm+1) - ppm
			}
			clocks = append(clocks, c)
		}
		g.add(Step{At: at, Kind: k, Clocks: clocks})
		g.add(Step{At: at + d, Kind: ClockReset, Members: ms})
		return at + d
	case EtcdKill, EtcdPause:
		e := g.pick(seq(cfg.Etcd), 1)
		back := EtcdRestart
		if k == EtcdPause {
			back = EtcdContinue
		}
		g.add(Step{At: at, Kind: k, Etcd: e})
		g.add(Step{At: at + short, Kind: back, Etcd: e})
		return at + short
	case EtcdQuorumLoss:
		d := g.between(2*cfg.LeaseTTL, 3*cfg.LeaseTTL)
		e := g.pick(seq(cfg.Etcd), cfg.Etcd/2+1)
		g.add(Step{At: at, Kind: k, Etcd: e})
		g.add(Step{At: at + d, Kind: EtcdRestart, Etcd: e})
		return at + d
	case DiskFull:
		d := g.between(2*time.Second, 10*time.Second)
		m := g.pick(g.alive, 1)
		g.add(Step{At: at, Kind: k, Members: m})
		g.add(Step{At: at + d, Kind: DiskFree, Members: m})
		return at + d
	}
	// A network fault.
	g.add(Step{At: at + short, Kind: Heal})
	return at + short
}

// kill adds a kill episode: KillOne, KillMinority and KillAll restart
// the members on their data; RestartWiped kills one member and starts it
// on a wiped directory; Lose kills one member and leaves it down for
// good, unless that would leave no majority, in which case it restarts
// it like KillOne.
func (g *generator) kill(k Kind, at time.Duration) time.Duration {
	down := g.between(500*time.Millisecond, 2*g.cfg.LeaseTTL)
	var ms []int
	switch k {
	case KillMinority:
		ms = g.pick(g.alive, 1+g.r.IntN(minority(g.cfg.Members)))
	case KillAll:
		ms = slices.Clone(g.alive)
	default:
		ms = g.pick(g.alive, 1)
	}
	back := Restart
	switch {
	case k == RestartWiped:
		back = RestartWiped
	case k == Lose && len(g.lost) < minority(g.cfg.Members):
		back = Lose
	}
	kill := k
	if k == RestartWiped || k == Lose {
		kill = KillOne
	}
	g.add(Step{At: at, Kind: kill, Members: ms})
	g.add(Step{At: at + down, Kind: back, Members: ms})
	if back == Lose {
		g.lost = append(g.lost, ms...)
		slices.Sort(g.lost)
		g.alive = without(g.alive, ms)
	}
	return at + down
}

// etcdSide returns the etcd members a partition puts on the side of its
// first side of members: none (etcd stays whole, reached from both
// sides) half of the time, else from one to all of them.
func (g *generator) etcdSide() []int {
	if g.r.IntN(2) == 0 {
		return nil
	}
	return g.pick(seq(g.cfg.Etcd), 1+g.r.IntN(g.cfg.Etcd))
}

// without returns the members of from not in drop, in order.
func without(from, drop []int) []int {
	var out []int
	for _, m := range from {
		if !slices.Contains(drop, m) {
			out = append(out, m)
		}
	}
	return out
}
