//go:build !race

package convoy

const raceEnabled = false
