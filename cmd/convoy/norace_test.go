//go:build !race

package main

// raceSlowdown and raceMemory: see race_test.go.
const (
	raceSlowdown = 1
	raceMemory   = 1
)
