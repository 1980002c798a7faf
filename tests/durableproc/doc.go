// Package durableproc tests Convoy's durable delivery with real
// processes: every member of a durable, view-managed group is its own
// operating-system process with its own data directory, talking to the
// others over loopback TCP and keeping its views in an etcd that runs in
// the test process. The members are killed with SIGKILL — all of them,
// many times in a row — and started again on their directories.
//
// The test re-executes its own binary once per member process (a "run"
// of a member). Each run opens the group with a small replicated
// key-value state, sends "set" messages from a few concurrent senders,
// each waiting until its message is reported durable (Send with
// WaitDelivered), and records to a file of its own, as JSON lines:
//
//   - every acknowledgement (a payload reported durable), written with
//     one unbuffered write before the sender sends again, so that SIGKILL
//     cannot lose it once Send has returned;
//   - every delivery (index, epoch, payload, and whether it was replayed
//     from the member's own log), every view, and every state the member
//     restored (from its log's snapshot or by state transfer), buffered
//     and flushed every few milliseconds, and at once with each view.
//
// SIGUSR1 makes a member stop sending; SIGTERM makes it stop sending,
// wait until deliveries settle, record its final state and close the
// group.
//
// Scenarios:
//
//   - TestKillAll: three members under load are killed with SIGKILL,
//     round after round — sometimes all at once, sometimes one a few tens
//     of milliseconds before the others, sometimes one first and the
//     others after they went on without it — and restarted together on
//     their directories; every third round they are killed once more
//     while the group restarts. The group must restart from the members'
//     logs and go on.
//   - TestWipedDisk: one member is killed, its data directory deleted,
//     and it is started again: it must rejoin through state transfer while
//     the others keep going.
//
// After every restart and at the end, the records of every run are
// checked against the guarantees of durable delivery (a message reported
// durable survives, at its index) and of views (one sequence for all
// members):
//
//   - no index ever holds two different payloads, and no payload ever
//     appears at two indexes, over every delivery of every run, replayed
//     ones included;
//   - every payload reported durable before a run started has an index no
//     later than the start of the first view that run takes part in;
//   - at every view, a member's state (rebuilt from what it restored and
//     delivered in that run) holds every payload reported durable at an
//     index up to the view's start, and every member at that view holds
//     the same state;
//   - at the end, every member's final state is the same and holds every
//     payload ever reported durable; and the members' logs, opened with
//     package persistence once the members are gone, hold the same entries
//     over the indexes they share, each acknowledged payload at its index.
//
// Run it with:
//
//	go test ./tests/durableproc
//	go test -race ./tests/durableproc   # the member processes are race builds too
//
// It is skipped with -short. On failure the test prints the log of each
// member process (the library's Info-level log, captured from its
// stderr); set DURABLEPROC_LOGS=1 to print them always.
package durableproc
