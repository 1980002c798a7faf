// Package orderproc tests Convoy's delivery guarantees with every member of
// a group in its own operating-system process, talking over loopback TCP.
//
// The test re-executes its own binary once per member. Each member opens
// the group, sends its messages, delivers everyone's, and reports a summary
// of what it delivered (a count, per-sender counts, and a hash of the
// delivered sequence) on standard output; the test then compares the
// summaries. Run it with:
//
//	go test ./tests/orderproc
//
// It is skipped with -short.
package orderproc
