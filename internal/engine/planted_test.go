package engine

import (
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/plant"
)

// TestPlantedFaults plants protocol faults, one at a time, in every
// member of simulated groups (TestGroupSim's runs) and checks that the
// simulation's checks catch each: seeds run until one reports a
// violation, which must come within a bounded number of seeds (of groups
// of at most four members, which run faster), and the
// seed that caught it must pass without the fault. A seed fixes the
// schedule, not the interleaving, so the test searches rather than
// naming one seed.
//
// plant.EarlyBeacon is caught in package ordering
// (TestPlantedEarlyBeacon): a group's multicast hands each sender's
// records over in send order, so no run here could exercise it.
// plant.ReplayBeyondDurable needs a power cut (powercut_test.go): a
// plain crash of the whole group finds every log synced, since an fsync
// takes no time on the bubble's clock. In six runs, a seed of 12 or less
// caught it (check compares what a restart replays with what the group
// delivered at each index).
//
//	go test -run 'TestPlantedFaults' -v ./internal/engine
func TestPlantedFaults(t *testing.T) {
	// The seeds bound the search. Measured over 10 runs without -race
	// and 3 with it, seed 2 (the first seed of at most four members)
	// caught each fault every time: early-delivery by the liveness check
	// (the group never came back whole: a member that delivered beyond the
	// cut is excluded by it, and rejoins, again and again), unsynced-view
	// by checkViewOnDisk, early-caught-up by checkPut. Without the faults,
	// those seeds passed every time.
	for _, tc := range []plantedCase{
		{fault: plant.EarlyDelivery, seeds: 10},
		{fault: plant.UnsyncedView, durable: true, seeds: 5},
		// A member restarts early in the run, and joins.
		{fault: plant.EarlyCaughtUp, seeds: 10, faults: []simFault{{at: 200 * time.Millisecond, kind: "crash", who: [][]NodeID{{2}}, lasts: 100 * time.Millisecond}}},
		// The power fails in the middle of member 1's fsync, and member 1
		// restarts after the others restarted the group.
		{fault: plant.ReplayBeyondDurable, durable: true, seeds: 25, faults: []simFault{{at: 500 * time.Millisecond, kind: "power-cut", who: [][]NodeID{{1}}, lasts: 300 * time.Millisecond}}},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			bigger := func(seed uint64) bool {
				p, _ := seedPlan(seed, false)
				return p.n > 4 // larger groups take longer
			}
			findPlanted(t, tc.fault, tc.seeds, bigger, func(seed uint64, planted plant.Faults) []string {
				start := time.Now()
				found := simulateRecorded(t, seed, simOptions{plant: planted, durable: tc.durable, faults: tc.faults})
				t.Logf("seed %d: %d violations in %v", seed, len(found), time.Since(start))
				return found
			})
		})
	}
}

// plantedCase is a fault to plant, the run that may catch it, and how
// many seeds to search.
type plantedCase struct {
	fault plant.Faults
	// durable forces durable delivery; faults, if set, replace the
	// faults drawn.
	durable bool
	faults  []simFault
	seeds   uint64
}

// findPlanted runs seeds, from 1 on and passing over those skip names,
// with fault planted, until one's checks find a violation; that seed
// must pass without the fault. It fails t if none of the first n seeds
// run catches it. run runs a seed with the faults planted and returns
// the violations found.
func findPlanted(t *testing.T, fault plant.Faults, n uint64, skip func(seed uint64) bool, run func(seed uint64, planted plant.Faults) []string) {
	t.Helper()
	tried := uint64(0)
	for seed := uint64(1); tried < n; seed++ {
		if skip != nil && skip(seed) {
			continue
		}
		tried++
		found := run(seed, fault)
		if len(found) == 0 {
			continue
		}
		t.Logf("seed %d caught %v: %s", seed, fault, found[0])
		if found := run(seed, 0); len(found) > 0 {
			t.Fatalf("seed %d fails without the fault too: %s", seed, found[0])
		}
		return
	}
	t.Fatalf("%d seeds ran with %v planted, and no check caught it", n, fault)
}
