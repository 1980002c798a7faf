// Package jepsen is a Jepsen-style fault campaign against real Convoy
// processes: the replicated key-value store of examples/paxos or the
// shared log of examples/log, served by "convoy node" members, or the
// raw group itself; every member with durable delivery, its views in a
// three-member etcd cluster, under faults chosen from a seed by package
// schedule, the history checked by package check: the clients' for
// linearizability (the store), or against one dense, immutable log and
// the members' logs at the end (the log); the members' own (the group)
// against the group's guarantees.
//
// # What runs
//
// The seed of each schedule draws its workload, kv, log or group
// (printed with the schedule as "(workload kv)"), apart from its faults. For each
// schedule the test starts, from scratch and under a temporary
// directory:
//
//   - an etcd cluster of three members, each the embedded etcd server
//     (etcddev) run as its own process
//     (internal/etcdmember), with its own data directory;
//   - N Convoy members (-jepsen.members, default 5), each a "convoy node
//     -app kv" (or "-app log") process, or for the group workload an
//     internal/groupmember process (the library alone, its group
//     durable), with its own durable data directory, founding the group
//     together;
//   - concurrent clients (-jepsen.clients, default 4), each a Go client
//     of the application (examples/paxos/client, examples/log/client)
//     that starts at a member of its own and moves on to the others when
//     one cannot serve, retrying a write with the same idempotency key.
//     Against the store each runs gets, puts and compare-and-swaps on a
//     few keys; against the log, appends naming some of a few streams,
//     reads of one position, range reads and stream reads near the
//     highest position seen, tails, and trims that keep the last 30
//     positions or so. The seed chooses the keys or streams and the
//     mix. The group workload has no clients: each member sends messages
//     of its own, one at a time, a share of them (20% to 80%, as the
//     seed chooses) waiting until the message is delivered, which in
//     durable delivery means on every member's disk, the others only
//     until the group accepts it, with a pause of 2ms to 10ms after
//     each. Each run of a member (a process, from its start to its exit
//     or kill) records, as JSON lines in a file of its own beside the
//     logs (internal/grouprec), every view it installs, its exclusions,
//     every message it delivers (replayed or not), and every call of
//     Send, written out before the call, with what it returned; a
//     message's payload names the run and the incarnation that sent it.
//     Views and calls are written out at once, the rest within 5ms, so
//     that SIGKILL loses only the tail.
//
// The three programs (cmd/convoy, internal/etcdmember,
// internal/groupmember) are built once per test run with "go build"
// (without the race detector, whatever the test's build: the cluster
// shares the machine's cores). Every process leads a process group of its own and is
// killed with it, on every exit path; the kernel kills it too if the test
// process dies.
//
// Where the test may build network namespaces (as root, with ip and nft
// installed, as on CI), every process runs on a host of its own: a
// network namespace (internal/netns) joined by a veth link to a bridge in
// a namespace of its own, five hosts for the members, three for etcd, and
// one from which the clients and the harness's own requests connect
// (this process opens their sockets inside that namespace), which no
// fault cuts off. The namespaces of a campaign carry its process id and
// a random run id in their names; they are removed when the test ends,
// whether it passes or fails, and a later campaign removes those of a
// test process that died. Each process listens on its host's address on
// a fixed port, so that a member restarts on the address it had.
//
// Elsewhere, or with -jepsen.loopback, every process listens on
// loopback, on ports below the kernel's ephemeral range chosen free at
// the start of the run, and the schedules draw no network faults; the
// test log says which of the two it runs on, and why.
//
// # Faults
//
// Each schedule comes from schedule.Generate (through schedule.Campaign)
// restricted to the kinds carried out here:
//
//   - isolate-one, split-halves, bridge: a partition of the members, into
//     one member and the others, a minority and a majority, or two
//     majorities that share one member; half of the partitions also put
//     etcd members on either side (all of them, possibly, on one side),
//     so that a side may lose etcd's quorum or etcd may lose its own;
//     one-way-cut: the frames some members send to the others are
//     dropped, the other direction flows; etcd-partition: some members
//     cut off from every etcd member; packet-loss: 5% to 40% of the
//     frames between some members and the others dropped at random;
//     packet-delay: the packets between some members and the others
//     delayed by 5ms to 200ms, give or take up to half of that (so that
//     they reorder); heal ends each of them. These run on the namespaces
//     only. Partitions, cuts and loss are nftables rules (a
//     bridge-family table) on the bridge, the loss with "numgen random
//     mod 100". These kernels have no netem qdisc, so delay takes
//     userspace: an NFQUEUE rule of iptables-nft (nftables' own queue
//     statement is not built into them) in a delayed host's output hands
//     the packets' ids to a goroutine of the test, which lets each packet
//     go when it is due (internal/netns: Switch.Delay); without
//     iptables-nft the campaign draws no packet delay, and says so;
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
//   - clock-skew, clock-drift: some members' clocks set off by up to 2s,
//     or made to gain or lose up to 2s over the episode, through "convoy
//     node -clock-offset" and "-clock-drift-ppm" (the library's
//     Config.Clock): each member running is killed and started again on
//     its directory with its new clock (a member down or paused gets it
//     at its next start; a groupmember takes the same flags);
//     clock-reset starts them again with the machine's clock. Skew costs latency only: the checks are the same;
//   - etcd-kill: SIGKILL to one etcd member, then a restart on its data
//     directory; etcd-pause: SIGSTOP to one, then SIGCONT;
//   - etcd-quorum-loss: SIGKILL to a majority of etcd for longer than
//     every lease, then a restart;
//   - disk-full: the durable data directory of each member a schedule
//     fills lies on a tmpfs of its own (32 MiB, below the 70 MiB that
//     Pebble tries to preallocate for a WAL file, so that the WAL takes
//     its pages as it grows), mounted for the run; the fault writes a
//     filler file that takes every free byte, and takes again every
//     100ms what the member frees. The member's next write to its log
//     fails; its log is then failed for good, its group fails (ErrFailed)
//     and "convoy node" exits with status 1 (or 2, if Pebble panics on
//     one of its own goroutines), which the harness expects of that
//     member while its disk is full, and of no other process.
//     disk-free removes the filler, kills the member's process if it
//     still runs, and starts it on its data directory, which holds what
//     its log wrote before the disk filled: it restarts as after a kill.
//     (A group member's records lie off that disk, beside the logs.)
//     The tmpfs are unmounted when the run ends, however it ends, and a
//     later campaign unmounts those of a test process that died (their
//     source names carry its process id). Mounting needs root: elsewhere
//     the campaign draws no full disks, and says so.
//
// Faults of different classes (network, processes and disks, clocks,
// etcd) overlap at random; the schedules of a campaign draw each kind
// alone and with the others.
//
// The members run with a 2s etcd lease and the library's other defaults
// (a 250ms suspect timeout). Fault episodes start within the first 10s
// of the schedule; each schedule ends with heal-all (the network healed,
// every paused process resumed, every killed one not lost restarted,
// every clock right, every disk freed) and 3s without faults.
//
// # What is checked
//
// In the kv and log workloads, every client operation is recorded as a check.KVOp or check.LogOp,
// from its first invocation to its last completion (the client retries a
// write with the same idempotency key, within one call): OK with its
// result; Unknown if it did not complete within its 10s bound (a timeout
// or connection error: it may or may not have taken effect), never a
// failure; Fail only when a member refused it with a 4xx answer (for the
// log, as malformed or too large). After the quiet period the clients
// stop (in the group workload, every member running stops sending, and
// the harness waits until each has: nothing is reported durable from
// then on) and the run checks:
//
//   - liveness: every member not lost serves a linearizable read and a
//     write (a get and a put, or a tail and an append), each through that
//     member alone, within 60s (the time it took is printed; these
//     operations join the history); in the group workload, it sends a
//     message that waits until delivered, again until one is, and
//     records that its incarnation finished: having delivered it, it
//     delivered every message reported durable before, all of which
//     precede it in the total order;
//   - that no process exited without being killed, but for a member on a
//     full disk;
//   - for the store, check.CheckKV: the whole history is linearizable,
//     each key a register;
//   - for the log, check.CheckLog: the history, and the log of every
//     member not lost, read back through that member alone (after a tail
//     through it, so that it holds everything acknowledged: its trim
//     point and tail from its status, the entries between them by range
//     reads), agree with one dense, immutable log (see CheckLog);
//   - for the group, check.CheckGroup over the records of every run of
//     every member, lost or not, each a prefix (a torn last line
//     dropped), each member's incarnations numbered across its runs
//     (grouprec.History): one total order, virtual synchrony, per-sender
//     FIFO, no duplicates, nothing delivered that was not sent, fencing
//     of excluded incarnations, every message reported durable delivered
//     by every incarnation that finished and kept at its index, and what
//     a member was handed from its own log after a restart the same as
//     every other member delivered at that index. A call without a
//     recorded answer counts as an operation of unknown outcome.
//
// A schedule that fails prints its seed, the failure, the command that
// replays it, and the path of its report: a directory (under
// -jepsen.report, default the system's temporary directory, kept) with
// the schedule, the timeline of faults and process events, the history
// (kv-history.jsonl, and porcupine's kv.html for the keys that failed;
// or log-history.jsonl, and log-dumps.jsonl with the members' logs; or
// group-history.json, the history checked, with the records of every
// run of every member among the logs) and every process's log.
//
// # Running it
//
//	go test ./tests/jepsen                      # the short campaign: the regressions, then at least 20 schedules
//	go test ./tests/jepsen -v                   # the same, printing each schedule and its result
//	go test ./tests/jepsen -v -timeout 0 -jepsen.seeds 200          # a longer campaign: 200 schedules
//	go test ./tests/jepsen -v -jepsen.campaign 42                   # the campaign of seed 42
//	go test ./tests/jepsen -v -jepsen.seed S -jepsen.include K1,K2  # one schedule again, as a failure printed it
//	go test ./tests/jepsen -v -jepsen.workloads log -jepsen.seeds 20 # a campaign of the log workload alone
//
// On two cores a schedule takes 15s to 30s (the setup, the faults, the
// quiet period and the checks; clock episodes last 5s to 15s), so the
// short campaign's 22 schedules take 6 to 8 minutes. Building the
// programs comes on top: seconds with a warm build cache, over a minute
// on a cache that holds no build without the race detector.
//
// The short campaign first runs the schedules that once failed (the
// regressions whose faults the network can draw). Its next ⌈kinds/2⌉
// schedules (10 on the namespaces, 7 on loopback as root, 6 on loopback
// otherwise) cover every fault kind it draws from, most paired with one
// of another class, and take the workloads in turn; the test fails if a
// campaign bounded by time did not cover every kind and workload. It
// goes on to 20 schedules in all (after the regressions), and past them
// while -jepsen.budget lasts, but starts none past the covering ones
// that would come within three average schedules and 30s of the test's
// deadline (go test's -timeout, 10 minutes by default): on a machine
// too loaded for 20, it says how many it ran. It prints where its processes run,
// whether it draws full disks, the campaign's seed, each schedule, and
// at the end the line "N passed, M failed" (shown with -v, or on
// failure). Other flags: -jepsen.budget (the time after which no
// schedule starts once those ran), -jepsen.members, -jepsen.clients,
// -jepsen.workloads (the workloads the seeds draw from; replaying a
// schedule of a campaign with other workloads than all three needs the
// same flag, which the printed command carries), -jepsen.keep (write the
// report of passing schedules too), -jepsen.log-level (the members' log
// level: debug to replay a failure with the view changes' every step in
// the members' logs), -jepsen.loopback (run on loopback even where
// namespaces can be built; replaying a schedule of such a run needs it
// too).
package jepsen
