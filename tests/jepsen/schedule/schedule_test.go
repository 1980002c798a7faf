package schedule

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func configs() []Config {
	return []Config{
		{},
		{Members: 5},
		{Members: 4, Etcd: 1},
		{Members: 7, Faults: 6, Duration: 2 * time.Minute},
		{Members: 3, Kinds: slices.DeleteFunc(Faults(), func(k Kind) bool { return k == KillAll })},
		{Members: 3, DetectionTimeout: time.Second, LeaseTTL: time.Second, MaxSkew: 10 * time.Millisecond, Quiet: time.Second},
	}
}

func marshal(t *testing.T, s Schedule) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeterminism: a seed gives one schedule, byte for byte; a campaign
// gives the same schedules, each of which Generate reproduces from its
// own seed and config.
func TestDeterminism(t *testing.T) {
	for _, cfg := range configs() {
		for seed := int64(-3); seed < 20; seed++ {
			a, b := Generate(seed, cfg), Generate(seed, cfg)
			if ja, jb := marshal(t, a), marshal(t, b); !bytes.Equal(ja, jb) || a.String() != b.String() {
				t.Fatalf("seed %d gave two schedules:\n%s\n%s", seed, ja, jb)
			}
		}
		if a, b := Generate(1, cfg), Generate(2, cfg); bytes.Equal(marshal(t, a), marshal(t, b)) {
			t.Errorf("seeds 1 and 2 gave the same schedule:\n%v", a)
		}
		c1, c2 := Campaign(7, 12, cfg), Campaign(7, 12, cfg)
		for i := range c1 {
			j1 := marshal(t, c1[i])
			if !bytes.Equal(j1, marshal(t, c2[i])) {
				t.Fatalf("campaign schedule %d differs between two calls", i)
			}
			if again := Generate(c1[i].Seed, c1[i].Config); !bytes.Equal(j1, marshal(t, again)) {
				t.Fatalf("campaign schedule %d is not Generate(its seed, its config):\n%v\n%v", i, c1[i], again)
			}
		}
	}
}

// TestCoverage: every kind of step appears within the first 20
// schedules of a campaign, and every fault kind of the config within
// the first ⌈len(kinds)/2⌉.
func TestCoverage(t *testing.T) {
	for _, cfg := range configs() {
		for _, seed := range []int64{1, 2, 99} {
			kinds := cfg.WithDefaults().Kinds
			c := Campaign(seed, 20, cfg)
			if len(c) != 20 {
				t.Fatalf("%d schedules, want 20", len(c))
			}
			seen := make(map[Kind]bool)
			for i, s := range c {
				for _, k := range s.Kinds() {
					seen[k] = true
				}
				if i+1 == (len(kinds)+1)/2 {
					for _, k := range kinds {
						if !seen[k] {
							t.Errorf("config %+v, seed %d: fault %v missing from the first %d schedules", cfg, seed, k, i+1)
						}
					}
				}
			}
			for _, k := range Kinds() {
				if !seen[k] && (k != KillAll || slices.Contains(kinds, KillAll)) {
					t.Errorf("config %+v, seed %d: %v missing from 20 schedules", cfg, seed, k)
				}
			}
			if !slices.Contains(kinds, KillAll) && seen[KillAll] {
				t.Errorf("config %+v, seed %d: kill-all drawn though left out", cfg, seed)
			}
		}
	}
}

// TestWellFormed: generated schedules pass Validate, end with HealAll and
// a quiet period, and include what they must.
func TestWellFormed(t *testing.T) {
	for _, cfg := range configs() {
		for seed := range int64(300) {
			s := Generate(seed, cfg)
			if err := s.Validate(); err != nil {
				t.Fatalf("seed %d, config %+v: %v\n%v", seed, cfg, err, s)
			}
		}
		for i, s := range Campaign(3, 30, cfg) {
			if err := s.Validate(); err != nil {
				t.Fatalf("campaign schedule %d: %v\n%v", i, err, s)
			}
			for _, k := range s.Config.Include {
				if !slices.Contains(s.Kinds(), k) {
					t.Errorf("campaign schedule %d includes %v, but has no such step:\n%v", i, k, s)
				}
			}
		}
	}
}

// TestJSON: a schedule survives JSON, kinds by name.
func TestJSON(t *testing.T) {
	s := Generate(42, Config{Members: 5, Include: []Kind{Bridge, ClockDrift, PacketDelay}})
	b := marshal(t, s)
	if !bytes.Contains(b, []byte(`"kind":"heal-all"`)) {
		t.Fatalf("kinds are not written by name: %s", b)
	}
	var back Schedule
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, marshal(t, back)) {
		t.Fatalf("JSON round trip:\n%s\n%s", b, marshal(t, back))
	}
	var k Kind
	if err := k.UnmarshalText([]byte("meteor")); err == nil {
		t.Fatal("an unknown kind parsed")
	}
	if _, err := Kind(0).MarshalText(); err == nil {
		t.Fatal("kind 0 marshalled")
	}
}

func TestKindString(t *testing.T) {
	names := make(map[string]bool)
	for _, k := range Kinds() {
		s := k.String()
		if s == "" || strings.HasPrefix(s, "Kind(") || names[s] {
			t.Errorf("kind %d: name %q", int(k), s)
		}
		names[s] = true
	}
	if len(names) != int(HealAll) {
		t.Errorf("%d names for %d kinds", len(names), int(HealAll))
	}
	if got := Kind(99).String(); got != "Kind(99)" {
		t.Errorf("Kind(99).String() = %q", got)
	}
	for _, k := range Faults() {
		if !slices.Contains(Kinds(), k) {
			t.Errorf("fault %v is not a kind", k)
		}
	}
}

// TestString: the printed schedule shows every step.
func TestString(t *testing.T) {
	s := Generate(5, Config{Include: []Kind{SplitHalves, PauseLease}})
	out := s.String()
	if got := strings.Count(out, "\n"); got != len(s.Steps) {
		t.Errorf("%d lines for %d steps:\n%s", got+1, len(s.Steps), out)
	}
	for _, want := range []string{"seed 5", "split-halves sides=", "pause-past-lease members=", "continue", "heal-all"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing from\n%s", want, out)
		}
	}
}

func TestGenerateBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Members: 2}, {Include: []Kind{Heal}}, {Kinds: []Kind{HealAll}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Generate accepted %+v", cfg)
				}
			}()
			Generate(1, cfg)
		}()
	}
}

// TestValidate: Validate catches what makes a schedule ill-formed.
func TestValidate(t *testing.T) {
	cfg := Config{}.WithDefaults()
	at := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	sched := func(steps ...Step) Schedule {
		last := steps[len(steps)-1].At
		return Schedule{Config: cfg, Steps: steps, End: last + cfg.Quiet}
	}
	healAll := func(sec float64) Step { return Step{At: at(sec), Kind: HealAll} }
	for _, tc := range []struct {
		name string
		s    Schedule
		want string // a substring of the error; "" for none
	}{
		{name: "nothing but the end", s: sched(healAll(1))},
		{name: "kill and restart", s: sched(
			Step{At: at(1), Kind: KillOne, Members: []int{2}},
			Step{At: at(2), Kind: Restart, Members: []int{2}},
			healAll(3))},
		{name: "kill never restarted", want: "member 2 killed, never restarted nor lost", s: sched(
			Step{At: at(1), Kind: KillOne, Members: []int{2}},
			healAll(3))},
		{name: "lose a minority", s: func() Schedule {
			s := sched(
				Step{At: at(1), Kind: KillOne, Members: []int{2}},
				Step{At: at(2), Kind: Lose, Members: []int{2}},
				healAll(3))
			s.Lost = []int{2}
			return s
		}()},
		{name: "lose a majority", want: "no majority", s: func() Schedule {
			s := sched(
				Step{At: at(1), Kind: KillMinority, Members: []int{1}},
				Step{At: at(2), Kind: Lose, Members: []int{1}},
				Step{At: at(3), Kind: KillOne, Members: []int{3}},
				Step{At: at(4), Kind: Lose, Members: []int{3}},
				healAll(5))
			s.Lost = []int{1, 3}
			return s
		}()},
		{name: "lost members not listed", want: "the schedule says []", s: sched(
			Step{At: at(1), Kind: KillOne, Members: []int{2}},
			Step{At: at(2), Kind: Lose, Members: []int{2}},
			healAll(3))},
		{name: "kill a majority as a minority", want: "not a minority", s: sched(
			Step{At: at(1), Kind: KillMinority, Members: []int{1, 2}},
			Step{At: at(2), Kind: Restart, Members: []int{1, 2}},
			healAll(3))},
		{name: "wipe after killing all", want: "not kill-one", s: sched(
			Step{At: at(1), Kind: KillAll, Members: []int{1, 2, 3}},
			Step{At: at(2), Kind: RestartWiped, Members: []int{1}},
			Step{At: at(2), Kind: Restart, Members: []int{2, 3}},
			healAll(3))},
		{name: "kill all leaves one up", want: "leaves member 3 up", s: sched(
			Step{At: at(1), Kind: KillAll, Members: []int{1, 2}},
			Step{At: at(2), Kind: Restart, Members: []int{1, 2}},
			healAll(3))},
		{name: "pause never continued", want: "member 1 paused, never continued", s: sched(
			Step{At: at(1), Kind: PauseLease, Members: []int{1}},
			healAll(30))},
		{name: "pause shorter than the lease", want: "for 1s only", s: sched(
			Step{At: at(1), Kind: PauseLease, Members: []int{1}},
			Step{At: at(2), Kind: Continue, Members: []int{1}},
			healAll(30))},
		{name: "pause shorter than detection", want: "for 100ms only", s: sched(
			Step{At: at(1), Kind: PauseDetection, Members: []int{1}},
			Step{At: at(1.1), Kind: Continue, Members: []int{1}},
			healAll(30))},
		{name: "kill a paused member", want: "member 1 is not up", s: sched(
			Step{At: at(1), Kind: PauseDetection, Members: []int{1}},
			Step{At: at(1.5), Kind: KillOne, Members: []int{1}},
			Step{At: at(2), Kind: Restart, Members: []int{1}},
			healAll(30))},
		{name: "partition never healed", want: "isolate-one never healed", s: sched(
			Step{At: at(1), Kind: IsolateOne, Sides: [][]int{{1}, {2, 3}}},
			healAll(3))},
		{name: "overlapping network faults", want: "while isolate-one is in effect", s: sched(
			Step{At: at(1), Kind: IsolateOne, Sides: [][]int{{1}, {2, 3}}},
			Step{At: at(2), Kind: PacketLoss, Members: []int{1}, Loss: 10},
			Step{At: at(3), Kind: Heal},
			healAll(4))},
		{name: "a member on no side", want: "member 3 on no side", s: sched(
			Step{At: at(1), Kind: SplitHalves, Sides: [][]int{{1}, {2}}},
			Step{At: at(3), Kind: Heal},
			healAll(4))},
		{name: "bridge without majorities", want: "not two majorities bridged", s: sched(
			Step{At: at(1), Kind: Bridge, Sides: [][]int{{1, 2}, {1, 2, 3}}},
			Step{At: at(3), Kind: Heal},
			healAll(4))},
		{name: "bridge", s: sched(
			Step{At: at(1), Kind: Bridge, Sides: [][]int{{1, 2}, {2, 3}}},
			Step{At: at(3), Kind: Heal},
			healAll(4))},
		{name: "partition with etcd on one side", s: sched(
			Step{At: at(1), Kind: IsolateOne, Sides: [][]int{{2}, {1, 3}}, Etcd: []int{1, 3}},
			Step{At: at(3), Kind: Heal},
			healAll(4))},
		{name: "partition with an etcd member that does not exist", want: "not distinct etcd members of 1..3", s: sched(
			Step{At: at(1), Kind: SplitHalves, Sides: [][]int{{2}, {1, 3}}, Etcd: []int{4}},
			Step{At: at(3), Kind: Heal},
			healAll(4))},
		{name: "heal without a fault", want: "nothing to heal", s: sched(
			Step{At: at(1), Kind: Heal},
			healAll(4))},
		{name: "clock never put right", want: "member 2's clock never put right", s: sched(
			Step{At: at(1), Kind: ClockSkew, Clocks: []Clock{{Member: 2, Offset: time.Second}}},
			healAll(4))},
		{name: "clock off too far", want: "beyond 2s", s: sched(
			Step{At: at(1), Kind: ClockSkew, Clocks: []Clock{{Member: 2, Offset: -3 * time.Second}}},
			Step{At: at(2), Kind: ClockReset, Members: []int{2}},
			healAll(4))},
		{name: "etcd quorum lost too briefly", want: "not longer than a lease", s: sched(
			Step{At: at(1), Kind: EtcdQuorumLoss, Etcd: []int{1, 2}},
			Step{At: at(2), Kind: EtcdRestart, Etcd: []int{1, 2}},
			healAll(4))},
		{name: "etcd quorum loss keeps a quorum", want: "a quorum", s: sched(
			Step{At: at(1), Kind: EtcdQuorumLoss, Etcd: []int{1}},
			Step{At: at(20), Kind: EtcdRestart, Etcd: []int{1}},
			healAll(21))},
		{name: "etcd member never continued", want: "etcd member 3 never restarted nor continued", s: sched(
			Step{At: at(1), Kind: EtcdPause, Etcd: []int{3}},
			healAll(4))},
		{name: "disk never freed", want: "member 1's disk never freed", s: sched(
			Step{At: at(1), Kind: DiskFull, Members: []int{1}},
			healAll(4))},
		{name: "steps out of order", want: "before the step before it", s: sched(
			Step{At: at(2), Kind: DiskFull, Members: []int{1}},
			Step{At: at(1), Kind: DiskFree, Members: []int{1}},
			healAll(4))},
		{name: "no heal-all at the end", want: "not heal-all", s: sched(
			Step{At: at(1), Kind: DiskFull, Members: []int{1}},
			Step{At: at(2), Kind: DiskFree, Members: []int{1}})},
		{name: "no quiet period", want: "not a quiet period", s: func() Schedule {
			s := sched(healAll(1))
			s.End = s.Steps[0].At
			return s
		}()},
		{name: "member out of range", want: "not distinct members of 1..3", s: sched(
			Step{At: at(1), Kind: KillOne, Members: []int{4}},
			healAll(4))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate found nothing, want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// TestAloneAndCombined: a campaign runs every fault kind alone (the only
// episode of a schedule) and together with a fault of every other class
// (their episodes may overlap), and Episodes lists the kinds a schedule
// includes and drew.
func TestAloneAndCombined(t *testing.T) {
	cfg := Config{Members: 5, Faults: 2, Duration: 10 * time.Second, Quiet: 3 * time.Second, LeaseTTL: 2 * time.Second}
	for _, seed := range []int64{1, 2} {
		alone := make(map[Kind]bool)
		with := make(map[Kind]map[lane]bool)
		for i, s := range Campaign(seed, 1000, cfg) {
			for _, k := range s.Config.Include {
				if !slices.Contains(s.Episodes, k) {
					t.Fatalf("campaign %d, schedule %d: includes %v, episodes %v", seed, i, k, s.Episodes)
				}
			}
			if n := len(s.Episodes) - len(s.Config.Include); n < 1 || n > cfg.Faults {
				t.Fatalf("campaign %d, schedule %d: drew %d episodes", seed, i, n)
			}
			if len(s.Episodes) == 1 {
				alone[s.Episodes[0]] = true
			}
			for _, k := range s.Episodes {
				for _, o := range s.Episodes {
					if laneOf(o) != laneOf(k) {
						if with[k] == nil {
							with[k] = make(map[lane]bool)
						}
						with[k][laneOf(o)] = true
					}
				}
			}
		}
		for _, k := range Faults() {
			if !alone[k] {
				t.Errorf("campaign %d: %v never alone", seed, k)
			}
			for l := range lanes {
				if l != laneOf(k) && !with[k][l] {
					t.Errorf("campaign %d: %v never with a fault of class %d", seed, k, l)
				}
			}
		}
	}
}

// TestPartitionEtcd: partitions leave etcd whole (reached from both
// sides) or put from one to all of its members with the first side.
func TestPartitionEtcd(t *testing.T) {
	seen := make(map[int]bool) // how many etcd members on the first side
	for seed := range int64(200) {
		s := Generate(seed, Config{Members: 5, Include: []Kind{IsolateOne, SplitHalves, Bridge}})
		for _, st := range s.Steps {
			switch st.Kind {
			case IsolateOne, SplitHalves, Bridge:
				seen[len(st.Etcd)] = true
			}
		}
	}
	for n := range DefaultEtcd + 1 {
		if !seen[n] {
			t.Errorf("no partition puts %d etcd members with its first side", n)
		}
	}
}

// TestWorkloads: the seed draws the workload, apart from the faults; a
// campaign's first schedules take the workloads in turn, and later ones
// draw them; Validate refuses a workload the config does not name.
func TestWorkloads(t *testing.T) {
	names := []string{"kv", "log"}
	drawn := make(map[string]int)
	for seed := range int64(200) {
		plain := Generate(seed, Config{Members: 5})
		s := Generate(seed, Config{Members: 5, Workloads: names})
		if !slices.Contains(names, s.Workload) || s.Workload != Generate(seed, Config{Members: 5, Workloads: names}).Workload {
			t.Fatalf("seed %d: workload %q", seed, s.Workload)
		}
		drawn[s.Workload]++
		if !bytes.Equal(marshal(t, Schedule{Steps: s.Steps}), marshal(t, Schedule{Steps: plain.Steps})) {
			t.Fatalf("seed %d: the workloads changed the faults:\n%v\n%v", seed, s, plain)
		}
		if plain.Workload != "" {
			t.Fatalf("seed %d: workload %q drawn from none", seed, plain.Workload)
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !strings.Contains(s.String(), "(workload "+s.Workload+")") {
			t.Fatalf("seed %d: the workload is not printed:\n%v", seed, s)
		}
	}
	if drawn["kv"] < 50 || drawn["log"] < 50 {
		t.Errorf("200 seeds drew %v", drawn)
	}
	for _, seed := range []int64{1, 2, 3, 99} {
		cfg := Config{Members: 5, Workloads: names}
		h := (len(Faults()) + 1) / 2
		c := Campaign(seed, h+10, cfg)
		for i := 1; i < h; i++ {
			if c[i].Workload == c[i-1].Workload {
				t.Fatalf("campaign %d: schedules %d and %d both run %q", seed, i-1, i, c[i].Workload)
			}
		}
		for i, s := range c {
			if again := Generate(s.Seed, s.Config); again.Workload != s.Workload {
				t.Fatalf("campaign %d, schedule %d: workload %q, its seed draws %q", seed, i, s.Workload, again.Workload)
			}
		}
	}
	s := Generate(1, Config{Members: 5, Workloads: names})
	s.Workload = "group"
	if err := s.Validate(); err == nil {
		t.Error("a workload the config does not name passes Validate")
	}
	s.Workload = ""
	if err := s.Validate(); err == nil {
		t.Error("a schedule without a workload passes Validate, its config naming some")
	}
}
