// Package barrier computes the barriers of 1Pipe-style total order: the
// points in timestamp order below which a member may deliver.
//
// Every sender stamps its messages with increasing timestamps and promises,
// with beacons, that its future messages carry larger ones. A beacon is
// bound to the sender's sequence — (n, T) means "after my message #n,
// nothing of mine is stamped below T" — and is applied only once every
// message 1..n of that sender is held complete, because large and small
// messages travel separately, so a beacon may arrive before messages sent
// ahead of it. [Promises] tracks this per sender; its minimum is the
// member's receive frontier R: the member holds every message stamped
// below R.
//
// The commit barrier C is the minimum of every member's announced receive
// frontier: below C, every member holds every message, which is what
// atomic delivery waits for. [Commit] computes it from frontiers that
// every member announces to every other; [Tree] arranges members in a tree
// of representatives (1Pipe §6.2.3) in which each representative combines
// its subtree's frontiers and the root hands the result back down, so that
// a member's control traffic is bounded by the fan-out, not the group size.
//
// Nothing here does I/O or reads a clock; the ordering core drives it.
package barrier
