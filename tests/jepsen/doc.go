// Package jepsen is a Jepsen-style fault campaign against real Convoy
// processes: the replicated key-value store of examples/paxos, served by
// "convoy node" members with durable delivery, its views in a
// three-member etcd cluster, under faults chosen from a seed by package
// schedule, its clients' history checked for linearizability by package
// check.
//
// # What runs
//
// For each schedule the test starts, from scratch and under a temporary
// directory:
//
//   - an etcd cluster of three members, each the embedded etcd server
//     (internal/etcdembed) run as its own process
//     (internal/etcdmember), with its own data directory;
//   - N Convoy members (-jepsen.members, default 5), each a "convoy node
//     -app kv" process with its own durable data directory, founding the
//     group together;
//   - concurrent clients (-jepsen.clients, default 4), each a Go client
//     of the store (examples/paxos/client) that starts at a member of its
//     own and moves on to the others when one cannot serve. Each runs
//     gets, puts and compare-and-swaps on a few keys; the seed chooses the
//     keys and the mix.
//
// Both programs are built once per test run with "go build" (without the
// race detector, whatever the test's build: the cluster shares the
// machine's cores). Every process leads a process group of its own and is
// killed with it, on every exit path; the kernel kills it too if the test
// process dies.
//
// Every process listens on loopback, on ports below the kernel's
// ephemeral range chosen free at the start of the run, so that a member
// restarts on the address it had. Running each member in a network
// namespace of its own, which partitions, cuts, packet loss and delay
// need, is the next step; until then the schedules draw no network
// faults.
//
// # Faults
//
// Each schedule comes from schedule.Generate (through schedule.Campaign)
// restricted to the kinds carried out here:
//
//   - kill-one, kill-minority: SIGKILL to one member or a minority, then
//     a restart on the same data directory;
//   - kill-all: SIGKILL to every member at once, then a restart of all
//     on their directories (the group restarts from the members' logs);
//   - restart-wiped: SIGKILL to one member, then a restart on an empty
//     data directory (it rejoins by state transfer);
//   - lose: SIGKILL to one member, left down to the end (a majority
//     stays);
//   - pause-past-detection, pause-past-lease: SIGSTOP to one member for
//     longer than the failure-detection timeout, or than its etcd lease,
//     then SIGCONT;
//   - etcd-kill: SIGKILL to one etcd member, then a restart on its data
//     directory; etcd-pause: SIGSTOP to one, then SIGCONT;
//   - etcd-quorum-loss: SIGKILL to a majority of etcd for longer than
//     every lease, then a restart.
//
// The members run with a 2s etcd lease and the library's other defaults
// (a 250ms suspect timeout). Fault episodes start within the first 10s
// of the schedule; each schedule ends with heal-all (every paused process
// resumed, every killed one not lost restarted) and 3s without faults.
//
// # What is checked
//
// Every client operation is recorded as a check.KVOp, from its first
// invocation to its last completion (the client retries a write with the
// same idempotency key, within one call): OK with its result; Unknown if
// it did not complete within its 10s bound (a timeout or connection
// error: it may or may not have taken effect), never a failure; Fail only
// when a member refused it with a 4xx answer. After the quiet period the
// clients stop and the run checks:
//
//   - liveness: every member not lost serves a linearizable read and a
//     write, each through that member alone, within 60s (the time it
//     took is printed; these operations join the history);
//   - that no process exited without being killed;
//   - check.CheckKV: the whole history is linearizable, each key a
//     register.
//
// A schedule that fails prints its seed, the failure, the command that
// replays it, and the path of its report: a directory (under
// -jepsen.report, default the system's temporary directory, kept) with
// the schedule, the timeline of faults and process events, the history
// (kv-history.jsonl, and porcupine's kv.html for the keys that failed)
// and every process's log.
//
// # Running it
//
//	go test ./tests/jepsen                      # the short campaign: as many schedules as fit in 4 minutes, at least 8
//	go test ./tests/jepsen -v                   # the same, printing each schedule and its result
//	go test ./tests/jepsen -v -timeout 0 -jepsen.seeds 200          # a longer campaign
//	go test ./tests/jepsen -v -jepsen.campaign 42                   # the campaign of seed 42
//	go test ./tests/jepsen -v -jepsen.seed S -jepsen.include K1,K2  # one schedule again, as a failure printed it
//
// On two cores a schedule takes about 15s (the setup, the faults, the
// quiet period and the checks), so the short campaign runs about 15
// schedules. Building the two programs comes on top: seconds with a warm
// build cache, over a minute on a cache that holds no build without the
// race detector.
//
// The short campaign's first five schedules cover every fault kind it
// draws from; the test fails if a campaign bounded by time did not cover
// them all. It prints the campaign's seed, each schedule, and at the end
// the line "N passed, M failed" (shown with -v, or on failure). Other
// flags: -jepsen.budget (the time after which no schedule starts once 8
// ran), -jepsen.members, -jepsen.clients, -jepsen.keep (write the report
// of passing schedules too).
package jepsen
