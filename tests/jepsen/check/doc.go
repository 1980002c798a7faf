// Package check verifies the histories that a fault campaign records
// against real Convoy processes, one checker per workload:
//
//   - CheckKV: operations on the replicated key-value store
//     (examples/paxos) are linearizable, each key a register;
//   - CheckLog: appends, reads, tails, trims and stream reads on the
//     shared log (examples/log), and each member's log at the end, are
//     consistent with one dense, immutable log;
//   - CheckGroup: what every incarnation of every member of a raw group
//     delivered and installed, and what each sender was told, keeps the
//     group's guarantees: one total order, virtual synchrony, per-sender
//     FIFO, no duplicates, nothing delivered that was not sent, fencing
//     of excluded incarnations, and durability.
//
// Clients record every operation with the times of its invocation and
// completion and its outcome: OK (it completed and its result is
// recorded), Fail (it certainly did not take effect) or Unknown (a
// timeout or a connection error: it may or may not have taken effect, at
// any time after its invocation). A request that is retried keeps its
// idempotency key and is recorded once, from its first invocation to its
// last completion. Histories may be prefixes: a process killed with
// SIGKILL loses what it had not yet written out.
//
// The types are JSON-friendly so that processes can stream them as JSON
// lines (WriteLines, ReadLines). Every checker returns a Result — OK, or
// a bounded list of violations, each naming the property it breaks and
// where — and never panics on malformed input, which it reports as
// violations of Wellformed.
//
// Times are integers the recorder chooses (nanoseconds since the start
// of the run, say) from one monotonic clock; the checkers only compare
// them.
package check
