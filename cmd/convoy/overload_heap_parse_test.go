package main

import (
	"strings"
	"testing"
)

// TestParseHeapProfile reads the figures of a heap profile's text form,
// and Pebble's share of the heap: its samples scaled as pprof scales
// them, the others left out.
func TestParseHeapProfile(t *testing.T) {
	const profile = `heap profile: 3: 67633152 [9: 67700000] @ heap/1048576
1: 67108864 [1: 67108864] @ 0x1 0x2 0x3
#	0x1	github.com/cockroachdb/pebble/v2/internal/manual.New+0x8c	/mod/pebble/internal/manual/manual_cgo.go:49
#	0x2	github.com/cockroachdb/pebble/v2.(*DB).newMemTable+0x2e4	/mod/pebble/db.go:2556
#	0x3	github.com/cockroachdb/pebble/v2.(*DB).rotateMemtable+0x1	/mod/pebble/db.go:2700

2: 524288 [8: 591136] @ 0x4 0x5
#	0x4	github.com/cockroachdb/pebble/v2/internal/manual.New+0x8c	/mod/pebble/internal/manual/manual_cgo.go:49
#	0x5	github.com/cockroachdb/pebble/v2/internal/cache.newValue+0x1	/mod/pebble/internal/cache/value.go:60

5: 5000 [5: 5000] @ 0x6
#	0x6	github.com/convoy-gcs/convoy/multicast.(*Group).allocLocked+0x1	/src/multicast/large.go:284


# runtime.MemStats
# Alloc = 70000000
# HeapAlloc = 70000000
# HeapSys = 150000000
# HeapIdle = 60000000
# HeapInuse = 90000000
# HeapReleased = 59000000
# NumGC = 40
# NumForcedGC = 2
`
	h, err := parseHeapProfile(strings.NewReader(profile))
	if err != nil {
		t.Fatal(err)
	}
	// The 64 MiB arena counts as itself (1/(1-e^-128)); the two
	// 256 KiB blocks, sampled at a rate of 512 KiB, as 1/(1-e^-0.5)
	// times their bytes.
	const wantPebble = 67108864 + 1332474
	if h.pebble < wantPebble-1 || h.pebble > wantPebble+1 {
		t.Errorf("pebble = %d, want %d", h.pebble, wantPebble)
	}
	want := heapStats{alloc: 70000000, inuse: 90000000, idle: 60000000, released: 59000000, numGC: 40, forcedGC: 2, pebble: h.pebble}
	if h != want {
		t.Errorf("parseHeapProfile = %+v, want %+v", h, want)
	}
	if _, err := parseHeapProfile(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1048576\n")); err == nil {
		t.Errorf("a profile without runtime.MemStats parsed")
	}
}
