package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/convoy-gcs/convoy/examples/paxos"
)

// heapStats are a member's Go heap figures, from its heap profile
// (/debug/pprof/heap?debug=1): runtime.MemStats's, and what Pebble's
// manually managed memory takes of the heap.
type heapStats struct {
	alloc, inuse, idle, released int64
	numGC, forcedGC              int64
	// pebble is what Pebble's manually managed memory (its memtables'
	// arenas and its cache's blocks, internal/manual.New) holds in the
	// Go heap, as the profile's samples estimate it. It is none but
	// under the race detector: there Pebble allocates that memory with
	// Go's allocator instead of C's in one process of two, chosen at
	// random as it starts (internal/manual's useGoAllocation), and the
	// Go heap of that process holds the term P of the bound, which in
	// every other process stays outside it.
	pebble int64
}

func (h heapStats) String() string {
	return fmt.Sprintf("HeapAlloc %s, HeapInuse %s (Pebble's memory %s), HeapIdle %s, HeapReleased %s, %d collections (%d forced)",
		mib(h.alloc), mib(h.inuse), mib(h.pebble), mib(h.idle), mib(h.released), h.numGC, h.forcedGC)
}

// pebbleAlloc is the function through which Pebble allocates its
// manually managed memory.
const pebbleAlloc = "github.com/cockroachdb/pebble/v2/internal/manual.New"

// parseHeapProfile reads a heap profile in its text form (debug=1).
// Pebble's share is the in-use bytes of the samples allocated in
// pebbleAlloc, scaled as pprof scales them: a sample of objects of s
// bytes stands for 1/(1-exp(-s/rate)) times as many.
func parseHeapProfile(r io.Reader) (heapStats, error) {
	var h heapStats
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		return h, fmt.Errorf("empty heap profile: %v", sc.Err())
	}
	var rate float64
	var total [4]int64
	if _, err := fmt.Sscanf(sc.Text(), "heap profile: %d: %d [%d: %d] @ heap/%g", &total[0], &total[1], &total[2], &total[3], &rate); err != nil {
		return h, fmt.Errorf("heap profile's first line %q: %v", sc.Text(), err)
	}
	rate /= 2 // the header gives twice runtime.MemProfileRate
	fields := map[string]*int64{
		"HeapAlloc": &h.alloc, "HeapInuse": &h.inuse, "HeapIdle": &h.idle, "HeapReleased": &h.released,
		"NumGC": &h.numGC, "NumForcedGC": &h.forcedGC,
	}
	var count, bytes int64 // the in-use objects and bytes of the sample being read
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "] @ "):
			if _, err := fmt.Sscanf(line, "%d: %d", &count, &bytes); err != nil {
				return h, fmt.Errorf("heap profile's sample %q: %v", line, err)
			}
		case strings.HasPrefix(line, "#\t") && count > 0 && strings.Contains(line, "\t"+pebbleAlloc+"+"):
			scale := 1.0
			if rate > 0 {
				scale = 1 / (1 - math.Exp(-float64(bytes)/float64(count)/rate))
			}
			h.pebble += int64(float64(bytes) * scale)
			count = 0 // once per sample
		case strings.HasPrefix(line, "# "):
			name, value, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
			if p := fields[name]; ok && p != nil {
				v, err := strconv.ParseInt(value, 10, 64)
				if err != nil {
					return h, fmt.Errorf("heap profile's %s: %v", name, err)
				}
				*p = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if h.inuse == 0 {
		return h, fmt.Errorf("heap profile without runtime.MemStats")
	}
	return h, nil
}

// mustHeapStats returns the heap figures of the member whose operator
// endpoints are at metrics, failing the test on an error.
func mustHeapStats(t *testing.T, metrics string) heapStats {
	t.Helper()
	resp, err := http.Get(metrics + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h, err := parseHeapProfile(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// overloadHeapSlack is what checkHeapAtRest allows beyond the Go heap's
// share of the bound at rest: the spans of the garbage made since the
// member's last collection (its status and metrics pages, its group's
// heartbeats) and of the size classes the load left partly filled.
// With IdleRelease, members had 59-72 MiB of heap in use (Pebble's
// memory left out) against about 98 MiB allowed, in three runs, two of
// them under the race detector; with it off, 89-110 MiB.
const overloadHeapSlack = 16 << 20

// checkHeapAtRest checks the Go heap of member m restAfter after the
// load, with a state of state bytes, against its share of the bound at
// rest R₀ + P + (1 + GOGC/100) × (S + D): what it held before the load
// (within R₀) and (1 + GOGC/100) × (S + D), plus overloadHeapSlack, for
// the spans in use, leaving out what Pebble's memory takes of the heap
// (P, which the race detector's builds put there in one process of two:
// see heapStats.pebble); and, of the spans the runtime holds free, at
// most overloadHeapSlack not returned to the system. Without
// paxos.Options.IdleRelease, the garbage made towards the load's end
// stays in spans in use (no collection runs while a member allocates
// little), and the check fails: with it off once, it failed for every
// member.
func checkHeapAtRest(t *testing.T, m *overloadMember, state int64) {
	t.Helper()
	d := int64(paxos.DedupeWindow * (overloadIDBytes + 180))
	bound := m.idleHeap.inuse - m.idleHeap.pebble + overloadGCFactor*(state+d) + overloadHeapSlack
	inuse := m.restHeap.inuse - m.restHeap.pebble
	kept := m.restHeap.idle - m.restHeap.released
	t.Logf("member %d: Go heap before the load: %v; %v after the load: %v; in use but Pebble's %s, %.0f%% of %s, free and not returned %s",
		m.id, m.idleHeap, m.restAfter, m.restHeap, mib(inuse), 100*float64(inuse)/float64(bound), mib(bound), mib(kept))
	if inuse > bound {
		t.Errorf("member %d: Go heap in use %v after the load (Pebble's memory left out) %s, above %s: %s before the load, (1 + GOGC/100) × (S + D) %s and %s of slack",
			m.id, m.restAfter, mib(inuse), mib(bound), mib(m.idleHeap.inuse-m.idleHeap.pebble), mib(overloadGCFactor*(state+d)), mib(overloadHeapSlack))
	}
	if kept > overloadHeapSlack {
		t.Errorf("member %d: %v after the load, its runtime holds %s of free heap not returned to the system, above %s", m.id, m.restAfter, mib(kept), mib(overloadHeapSlack))
	}
}
