// Package plant names the protocol faults that the project's own tests
// plant in the real code, to show that the tests catch each of them (see
// TestPlantedFaults in the root package and TestPlantedEarlyBeacon in
// package ordering).
//
// A fault is planted through a field or method that exists for those
// tests only: the root package's Config carries an unexported Faults,
// and package ordering's Config and package barrier's Promises take the
// one fault each of them decides. With no fault planted the code behaves
// as if the field did not exist; each decision costs one bit test.
package plant

import "strings"

// Faults is a set of planted faults; the zero value plants none.
type Faults uint8

// The faults, each a broken protocol rule.
const (
	// EarlyDelivery: a wedged member delivers every message it holds as
	// soon as it has written its final report, before the next view's cut
	// is committed, instead of only what passed the commit barrier.
	EarlyDelivery Faults = 1 << iota
	// UnsyncedView: in durable delivery, a member that installs a view
	// delivers the old view's cut without the new view's record on disk.
	// The durable log fsyncs its writes in the order they are queued, so
	// a record queued before the cut's entries is on disk before them
	// whether or not anyone waits for it: the fault leaves the record out.
	UnsyncedView
	// EarlyCaughtUp: a joiner marks itself caught up (and so counts
	// towards majorities) as soon as it enters its first view, before its
	// state transfer has completed.
	EarlyCaughtUp
	// EarlyBeacon: a sender's beacon (n, T) raises its promise before its
	// messages 1..n are all held.
	EarlyBeacon
	// ReplayBeyondDurable: a durable member that restarts replays its
	// whole log to the application, beyond the log's durable mark.
	ReplayBeyondDurable
)

// Has reports whether f holds fault x.
func (f Faults) Has(x Faults) bool { return f&x != 0 }

var names = []string{"early-delivery", "unsynced-view", "early-caught-up", "early-beacon", "replay-beyond-durable"}

func (f Faults) String() string {
	if f == 0 {
		return "none"
	}
	var out []string
	for i, name := range names {
		if f.Has(1 << i) {
			out = append(out, name)
		}
	}
	return strings.Join(out, "+")
}
