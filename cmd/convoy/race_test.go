//go:build race

package main

// Under the race detector, the members the tests run as processes are
// race builds, several times slower and larger.
const (
	// raceSlowdown scales their failure detector's timeout.
	raceSlowdown = 3
	// raceMemory scales the memory they may take beyond what they take
	// at rest: the race detector's shadow memory and bookkeeping take 5
	// to 10 times a program's (Go's documentation of the race detector);
	// the members of TestOverload took 3 to 4 times the memory above
	// rest they take without it.
	raceMemory = 5
)

// raceBuild says whether the tests run with the race detector.
const raceBuild = true
