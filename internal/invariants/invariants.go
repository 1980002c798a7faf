// Package invariants says whether expensive internal consistency checks
// run: in race-enabled builds (as the tests run) and with the build tag
// "invariants"; never in a normal build. A violated invariant is a bug in
// Convoy, never a consequence of bad input.
package invariants

// Enabled reports whether invariant checks run in this build.
const Enabled = raceEnabled || tagEnabled

// RaceEnabled is true when the program is built with the race detector.
const RaceEnabled = raceEnabled
