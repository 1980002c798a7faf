// Package vsproc tests Convoy's view changes Jepsen-style: every member
// of a view-managed group is its own operating-system process, talking to
// the others over loopback TCP and keeping its views in an etcd that runs
// in the test process (so etcd is separate from every member).
//
// The test re-executes its own binary once per member. Each member opens
// the group with a small replicated key-value state, sends a steady
// stream of "set" messages, and streams everything it sees — views,
// deliveries and accepted sends — as JSON lines to a file, flushed every
// few milliseconds, so that a member killed with SIGKILL loses at most
// the last few lines (the checks work on prefixes). SIGUSR1 makes a
// member stop sending; SIGTERM makes it stop sending, wait until
// deliveries settle, record its state checksum and exit.
//
// Scenarios, one subtest each, under load:
//
//   - KillOne: one of four members is killed with SIGKILL; the
//     survivors install a view without it and keep delivering.
//   - PauseAndRejoin: one of three members is stopped with SIGSTOP until
//     the others exclude it, then continued with SIGCONT; it must stop
//     delivering in its old incarnation and rejoin as a new one, with
//     state transfer.
//   - PauseBeyondLease: the same, with the member kept stopped for a
//     lease TTL and a second more after its exclusion, so that its etcd
//     registration lapses too; it must rejoin all the same.
//   - KillTwoOfFive: two of five members are killed at once; the three
//     survivors, a majority, go on.
//   - JoinUnderLoad: a fourth member joins three that are sending.
//   - StallAll: all three members are stopped for longer than the etcd
//     lease TTL, then continued; the group goes on (a member whose
//     registration lapsed may be excluded and rejoin).
//
// Afterwards the histories of every incarnation, live or dead, are
// checked with package internal/vscheck (one total order of messages and
// views, per-sender FIFO, virtual synchrony), every message a survivor
// had accepted must be delivered by every survivor, and the survivors'
// state checksums must be equal.
//
// Run it with:
//
//	go test ./tests/vsproc
//	go test -race ./tests/vsproc   # the member processes are race builds too
//
// It is skipped with -short. On failure the test prints each member's
// log (the library's Info-level log, captured from its stderr); set
// VSPROC_LOGS=1 to print them always.
package vsproc
