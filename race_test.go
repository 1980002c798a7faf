//go:build race

package convoy

const raceEnabled = true
