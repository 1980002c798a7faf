//go:build !race

package vsproc

// raceSlowdown: see race_test.go.
const raceSlowdown = 1
