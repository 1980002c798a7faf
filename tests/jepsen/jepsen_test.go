package jepsen

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

var (
	flagSeed      = flag.Int64("jepsen.seed", 0, "run the schedule of this `seed` alone (with -jepsen.include, as a campaign printed it)")
	flagInclude   = flag.String("jepsen.include", "", "fault `kinds` the schedule of -jepsen.seed includes, comma-separated (as a campaign printed them)")
	flagSeeds     = flag.Int("jepsen.seeds", 0, "run a campaign of `N` schedules (default: as many as fit in -jepsen.budget, at least 20 and those that cover every fault kind)")
	flagCampaign  = flag.Int64("jepsen.campaign", 0, "the campaign's `seed` (default: drawn from the clock, and printed)")
	flagBudget    = flag.Duration("jepsen.budget", 4*time.Minute, "time after which the default campaign starts no new schedule once it has covered every fault kind")
	flagMembers   = flag.Int("jepsen.members", 5, "Convoy members")
	flagClients   = flag.Int("jepsen.clients", 4, "concurrent clients")
	flagReport    = flag.String("jepsen.report", "", "`directory` that receives the report of each failed schedule (default: the system's temporary directory)")
	flagKeep      = flag.Bool("jepsen.keep", false, "write the report of every schedule, passed or failed")
	flagLogLevel  = flag.String("jepsen.log-level", "", "the members' log `level` (debug, info, warn or error; default info)")
	flagLoopback  = flag.Bool("jepsen.loopback", false, "run every process on loopback, even where network namespaces can be built (the schedules then draw no network faults)")
	flagWorkloads = flag.String("jepsen.workloads", strings.Join(workloads, ","), "the `workloads` the schedules draw from, comma-separated (kv, log, group)")
)

// Campaign settings.
const (
	// minSchedules is the least number of schedules the default campaign
	// runs (after the regressions), if the first ⌈kinds/2⌉ schedules that
	// cover every fault kind it draws from (schedule.Campaign) are fewer,
	// unless the test's deadline comes first (deadlineMargin).
	minSchedules = 20
	// deadlineMargin is the time, beside three schedules as long as the
	// average so far, that a campaign keeps before the test's deadline:
	// past the schedules that cover every kind, it starts no schedule
	// that would eat into it.
	deadlineMargin = 30 * time.Second
	// etcdMembers is the size of the etcd cluster.
	etcdMembers = 3
	// leaseTTL is the members' etcd lease TTL: shorter than the library's
	// default, so that faults past a lease fit a short campaign.
	leaseTTL = 2 * time.Second
	// faultWindow is when fault episodes start; quiet is the time
	// without faults after the final heal, before the liveness check.
	faultWindow = 10 * time.Second
	quiet       = 3 * time.Second
)

// binaries are the programs a run starts.
type binaries struct {
	convoy string // cmd/convoy
	etcd   string // internal/etcdmember
	group  string // internal/groupmember
}

// build builds the programs into a temporary directory, without the race
// detector whatever this test's build: the members of a cluster share
// two cores.
func build(t *testing.T) binaries {
	t.Helper()
	dir := t.TempDir()
	start := time.Now()
	cmd := exec.Command("go", "build", "-race=false", "-o", dir+string(filepath.Separator),
		"github.com/convoy-gcs/convoy/cmd/convoy",
		"github.com/convoy-gcs/convoy/tests/jepsen/internal/etcdmember",
		"github.com/convoy-gcs/convoy/tests/jepsen/internal/groupmember")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built the member and etcd programs in %v", time.Since(start).Round(time.Millisecond))
	return binaries{convoy: filepath.Join(dir, "convoy"), etcd: filepath.Join(dir, "etcdmember"), group: filepath.Join(dir, "groupmember")}
}

// scheduleConfig is the configuration of every schedule of a campaign
// on nw, with full disks unless noDisk says why not.
func scheduleConfig(t *testing.T, nw *network, noDisk string) schedule.Config {
	var ws []string
	for _, w := range strings.Split(*flagWorkloads, ",") {
		if !slices.Contains(workloads, w) {
			t.Fatalf("-jepsen.workloads: unknown workload %q (known: %v)", w, workloads)
		}
		ws = append(ws, w)
	}
	return schedule.Config{
		Members:   *flagMembers,
		Etcd:      etcdMembers,
		Faults:    2,
		Kinds:     campaignKinds(nw, noDisk),
		Duration:  faultWindow,
		Quiet:     quiet,
		LeaseTTL:  leaseTTL,
		Workloads: ws,
	}
}

// regressions are schedules that once failed; every campaign on the
// default settings runs them first, where the network can draw their
// faults.
var regressions = []struct {
	seed    int64
	include []schedule.Kind
}{
	// Under the race detector, a joiner's connection to its donor was
	// replaced mid-transfer and the donor stopped serving it; its other
	// donor was then lost, and the next view, which needed the joiner
	// caught up for a majority, never came.
	{2753030375114100900, []schedule.Kind{schedule.SplitHalves, schedule.Lose}},
	// Under the race detector, after member 3 was isolated with a
	// majority of etcd and member 1 restarted wiped, the members wrote
	// reports that heard each other and still left member 3 out of the
	// next view, which then lacked a majority for good. A final report
	// written during a partition could land in etcd after a later one
	// (its request waited on a connection the partition cut) and stand
	// from then on.
	{-5411644101040131200, []schedule.Kind{schedule.IsolateOne, schedule.RestartWiped}},
}

// regressionSchedules returns the schedules of regressions that cfg can
// run: the default members and workloads, and every fault kind drawn.
func regressionSchedules(cfg schedule.Config) []schedule.Schedule {
	if cfg.Members != 5 || !slices.Equal(cfg.Workloads, workloads) {
		return nil
	}
	var out []schedule.Schedule
	for _, r := range regressions {
		if !slices.ContainsFunc(r.include, func(k schedule.Kind) bool { return !slices.Contains(cfg.Kinds, k) }) {
			c := cfg
			c.Include = r.include
			out = append(out, schedule.Generate(r.seed, c))
		}
	}
	return out
}

// schedules returns the schedules the flags ask for, and whether the
// campaign is bounded by time rather than by their number.
func schedules(t *testing.T, cfg schedule.Config) ([]schedule.Schedule, bool) {
	if *flagSeed != 0 {
		for _, name := range strings.Split(*flagInclude, ",") {
			if name == "" {
				continue
			}
			var k schedule.Kind
			if err := k.UnmarshalText([]byte(name)); err != nil {
				t.Fatalf("-jepsen.include: %v", err)
			}
			cfg.Include = append(cfg.Include, k)
		}
		return []schedule.Schedule{schedule.Generate(*flagSeed, cfg)}, false
	}
	seed := *flagCampaign
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	fmt.Printf("campaign seed %d (replay the campaign with -jepsen.campaign %d)\n", seed, seed)
	if *flagSeeds > 0 {
		return schedule.Campaign(seed, *flagSeeds, cfg), false
	}
	return append(regressionSchedules(cfg), schedule.Campaign(seed, 1000, cfg)...), true
}

// leastSchedules is how many schedules a campaign bounded by time runs
// at least: enough to cover every kind of kinds.
func leastSchedules(kinds []schedule.Kind) int {
	return max(minSchedules, (len(kinds)+1)/2)
}

// replay is the command line that runs s again on nw.
func replay(s schedule.Schedule, nw *network) string {
	var inc []string
	for _, k := range s.Config.Include {
		inc = append(inc, k.String())
	}
	cmd := fmt.Sprintf("go test ./tests/jepsen -run 'TestCampaign$' -v -jepsen.seed %d", s.Seed)
	if len(inc) > 0 {
		cmd += " -jepsen.include " + strings.Join(inc, ",")
	}
	if !slices.Equal(s.Config.Workloads, workloads) {
		cmd += " -jepsen.workloads " + strings.Join(s.Config.Workloads, ",")
	}
	if s.Config.Members != 5 {
		cmd += fmt.Sprintf(" -jepsen.members %d", s.Config.Members)
	}
	if !nw.namespaces() {
		cmd += " -jepsen.loopback"
	}
	return cmd
}

// TestCampaign is the campaign against the replicated key-value store,
// the shared log and the raw group: for each schedule, a fresh etcd cluster and group
// of members serving the schedule's workload, its clients under the
// schedule's faults, liveness once they are over, and the check of the
// history.
func TestCampaign(t *testing.T) {
	nw, why, err := newNetwork(t.Context(), *flagMembers, etcdMembers, *flagLoopback)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	t.Cleanup(func() {
		if err := nw.close(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	if why != "" {
		msg := fmt.Sprintf("every process runs on loopback (no network namespaces: %s); the schedules draw no network faults", why)
		t.Log(msg)
		fmt.Println(msg)
	} else {
		msg := fmt.Sprintf("every process runs on a host of its own: %v", nw)
		if nw.noDelay != "" {
			msg += fmt.Sprintf("; no packet delay (%s)", nw.noDelay)
		}
		t.Log(msg)
		fmt.Println(msg)
	}
	noDisk := ""
	if err := checkDisks(); err != nil {
		noDisk = err.Error()
		msg := fmt.Sprintf("no full disks (%s)", noDisk)
		t.Log(msg)
		fmt.Println(msg)
	}
	cfg := scheduleConfig(t, nw, noDisk)
	scheds, timed := schedules(t, cfg)
	bins := build(t)
	parent := *flagReport
	if parent == "" {
		parent = os.TempDir()
	}
	rc := runConfig{bins: bins, clients: *flagClients, reportParent: parent, keep: *flagKeep, net: nw, logLevel: *flagLogLevel}
	least, covering := leastSchedules(cfg.Kinds), (len(cfg.Kinds)+1)/2
	if timed {
		n := len(regressionSchedules(cfg)) // they come first
		least += n
		covering += n
	}
	deadline, hasDeadline := t.Deadline()

	start := time.Now()
	var passed, failed int
	var covered []schedule.Kind
	var ran []string
	var slowest time.Duration
	for i, s := range scheds {
		if timed && i >= covering {
			// Start another schedule only if one as long as the average
			// so far still fits the budget (once least ran) and leaves the
			// margin before the test's deadline.
			avg := time.Since(start) / time.Duration(i)
			if i >= least && time.Since(start)+avg > *flagBudget {
				break
			}
			if hasDeadline && time.Until(deadline) < 3*avg+deadlineMargin {
				msg := fmt.Sprintf("stopping after %d schedules: the test's deadline is %v away", i, time.Until(deadline).Round(time.Second))
				t.Log(msg)
				fmt.Println(msg)
				break
			}
		}
		t.Run(fmt.Sprintf("seed=%d", s.Seed), func(t *testing.T) {
			fmt.Printf("=== schedule %d: %v\n", i+1, s)
			began := time.Now()
			res := run(t.Context(), rc, s, t.TempDir())
			took := time.Since(began)
			if res.err != nil {
				failed++
				fmt.Printf("--- schedule %d (seed %d) FAILED after %v\n", i+1, s.Seed, took.Round(time.Millisecond))
				t.Errorf("seed %d: %v\nreport: %s\nreplay: %s", s.Seed, res.err, res.report, replay(s, nw))
				return
			}
			passed++
			if res.report != "" {
				fmt.Printf("report: %s\n", res.report)
			}
			slowest = max(slowest, res.liveness)
			fmt.Printf("--- schedule %d (seed %d) passed in %v: %d operations (%d unknown), every member served %v after the quiet period\n",
				i+1, s.Seed, took.Round(time.Millisecond), res.ops, res.unknown, res.liveness.Round(time.Millisecond))
		})
		for _, k := range s.Kinds() {
			if !slices.Contains(covered, k) {
				covered = append(covered, k)
			}
		}
		if !slices.Contains(ran, s.Workload) {
			ran = append(ran, s.Workload)
		}
	}
	var missing []string
	for _, k := range cfg.Kinds {
		if !slices.Contains(covered, k) {
			missing = append(missing, k.String())
		}
	}
	for _, w := range cfg.Workloads {
		if !slices.Contains(ran, w) {
			missing = append(missing, "workload "+w)
		}
	}
	if timed && len(missing) > 0 {
		t.Errorf("the campaign did not cover %v", missing)
	}
	fmt.Printf("campaign: %v, slowest liveness %v\n", time.Since(start).Round(time.Second), slowest.Round(time.Millisecond))
	fmt.Printf("%d passed, %d failed\n", passed, failed)
}
