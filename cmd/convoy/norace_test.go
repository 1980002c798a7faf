//go:build !race

package main

// raceSlowdown and raceMemory: see race_test.go.
const (
	raceSlowdown = 1
	raceMemory   = 1
)

// raceBuild says whether the tests run with the race detector.
const raceBuild = false
