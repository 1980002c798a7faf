//go:build race

package vsproc

// raceSlowdown scales the members' failure-detection timeout and the
// test's waits: under the race detector the members are race builds,
// several times slower, and on a loaded machine a member not run for
// 400 ms is common.
const raceSlowdown = 3
