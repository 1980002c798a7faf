// Package engine is the runtime of one member of a Convoy group: the
// executor of the deterministic cores (the view-change core,
// internal/vsync; the ordering core, package ordering; the failure
// detector and the durable barrier) and of the I/O they ask for. Package
// convoy is its public face: it converts its Config and hands Open, Send
// and the rest to this package.
//
// One goroutine, the loop, owns the member's current view and its cores;
// everything else reaches it as events (loop.go). A file per concern:
//
//   - loop.go: the loop, its events and timer, sending and delivering;
//   - etcd.go: registration, the lease, the watch and state reads, and
//     the etcd writes the loop asks for, with their retries;
//   - viewchange.go: the view-change core's actions carried out (wedge,
//     report, propose, install, enter the next view, exclusion);
//   - view.go, viewnet.go, detect.go: a view's multicast groups, control
//     streams and failure detector;
//   - transfer.go, suffix.go: state transfer to joiners and the log
//     suffix a rejoining member fetches, on both sides; spill.go: where
//     the state being transferred is kept (files, the durable log), so
//     that no member holds a large state in memory;
//   - durable.go: the durable log and the persisted frontiers;
//   - replay.go: restarting from the durable log, alone or as a group;
//   - send.go, snapshot.go: the application's calls;
//   - topics.go: topics (pub/sub within the group): Publish, Subscribe,
//     the view's topic table, and the settling of own publications; a
//     topic's records travel in the RDMC groups of viewnet.go.
//
// The member's phases, and every transition between them, are listed in
// internal/vsync (phase.go). Time comes from one clock, Config.Clock:
// the loop, the cores, the detector and the state transfers read it;
// only the goroutines that pace etcd retries and re-reads wait on the
// machine's timers (in the simulation, the host schedules those too).
//
// The package's tests hold the whole-group simulations: TestGroupStep
// runs every member's real runtime on one goroutine and a virtual clock,
// with all I/O simulated and drawn from one seed (host.go is the hook
// it runs the members through); TestGroupSim runs them on goroutines in
// a testing/synctest bubble.
package engine
