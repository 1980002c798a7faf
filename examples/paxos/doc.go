// Package paxos is a replicated key-value store on a Convoy group: every
// member holds the whole store, any member serves clients over HTTP/JSON
// (or the binary streams of package wire),
// and with durable delivery (Config.Durable) the group is a replicated
// log equivalent to Paxos.
//
// # Using it
//
// Each member opens the group through Open, with its own convoy.Config,
// and serves Handler:
//
//	n, err := paxos.Open(ctx, convoy.Config{
//		Self:    1,
//		Addr:    "10.0.0.1:7000",
//		Etcd:    &convoy.EtcdConfig{Endpoints: []string{"http://10.0.0.9:2379"}},
//		Durable: &convoy.DurableConfig{Dir: "/var/lib/kv"},
//	}, paxos.Options{})
//	if err != nil { ... }
//	defer n.Close()
//	http.ListenAndServe(":7101", n.Handler())
//
// Clients use package client, or the API directly:
//
//	PUT    /kv/{key}       body: the value      → 200 {"index": n}
//	GET    /kv/{key}                            → 200 the value, or 404
//	GET    /kv/{key}?stale=true                 → the same from local state
//	DELETE /kv/{key}                            → 200 {"index": n}, or 404
//	POST   /kv/{key}/cas   {"old": "a", "new": "b"} (old null: absent)
//	                                            → 200 {"ok": bool, "index": n}
//	GET    /status         → {"id", "epoch", "members", "serving", "applied"}
//
// Keys are one URL path segment (escape "/" as %2F), 1 to MaxKeyBytes
// bytes; "." and ".." cannot be addressed. KV answers carry the
// X-Convoy-Index header: the delivery index a write was applied at, or
// the applied index a read reflects. Writes may carry the headers
// Idempotency-Key and Request-Issued (see "Retries"). Errors are JSON
// {"error": "..."}: 400 for a malformed request, 404 for a missing key,
// 409 for a write that expired before it was applied (see "Retries"),
// 413 above Options.MaxValueBytes, and 503 when this member cannot serve
// now (it
// takes part in no view, was excluded, is on the minority side, or is
// closing): the client tries another member. A 503 with a Retry-After
// header says the member is at capacity (see "Overload and memory"):
// the client waits that long before it tries again.
//
// The handler does no authentication: "convoy node" serves it over TLS
// (-http-cert) and behind a bearer token (-http-token-file), every route
// and the stream upgrade included, and the Go client sends the token
// with client.WithToken; a 401 is client.ErrUnauthorized.
//
// # Streams
//
// The same operations also travel over streams, which cost a member and
// its clients much less per request than HTTP/JSON: a client sends
//
//	GET /stream   Connection: Upgrade, Upgrade: convoy-kv/2   → 101
//
// and the connection then carries binary request and response frames
// (package wire), many requests in flight at once, each answer tagged
// with its request; the member reads and writes them in batches, and
// sends the writes that arrive together to the group as one message (up
// to 64 writes or 3 KiB of their frames; see "Commands on the wire"). The
// answers are the HTTP API's, status codes included; a write's issued
// time travels in its request frame (wire.Request.Issued), as its request
// id does. The Go client uses streams with client.WithStreams. A member
// serves at most Options.MaxStreams streams (an upgrade beyond them
// gets 503 with Retry-After); a stream serves at most 1,024 requests or
// batches of writes at once (beyond that the member stops reading it, and
// TCP holds the client back), and
// buffers at most 256 KiB of answers the client has not read, and one
// answer more; a frame above the largest command gets 413, a malformed
// one 400, one beyond the member's capacity waits for a place (up to
// Options.RetryAfter, then 503 with the response's RetryAfter; see
// "Overload and memory"), and a frame too short to carry a tag ends the
// stream.
//
// The Upgrade token carries the version of the frames (wire.Protocol):
// a member upgrades only a request for its own version and answers any
// other with 426, naming its token, and the Go client then sends its
// requests to that member over HTTP/JSON, for as long as the client
// lives. A client and a member of different versions thus work together
// over HTTP, never over a stream one of them would misread.
//
// NewLocal returns a node of the same service without a group: not
// replicated, in memory only. It measures what replication costs.
//
// # Consistency
//
// A write is a command multicast to the group; every member applies the
// commands in the delivery order, so every member goes through the same
// states. The member that took the request answers once it has applied
// the command, which in durable delivery happens only once every member
// of the view has it on disk.
//
// Reads are linearizable through the group's read barrier
// (convoy.Group.Sync): a GET answers from local state once this member
// has applied every write any member delivered before the read began,
// so it sees every write acknowledged before it. The barrier sends no
// command through the group, and concurrent ones share their reads of
// etcd. A read with
// ?stale=true answers from local state at once, without a barrier: it
// may miss recent writes.
//
// # Retries
//
// A write carries a request id, the Idempotency-Key header (the server
// makes one up when it is absent, which then dedupes nothing), and an
// issued time, the Request-Issued header (IssuedHeader): the time, in
// Unix nanoseconds, of the first attempt of the request that may have
// reached the group, the same on every retry. Package client sends both.
// The state machine answers a write whose request id it has a kept
// result for with that result instead of applying it again — whatever
// the repeated request asks. This is what makes retries safe: a Send that
// failed, or a member that failed after sending, may leave a command that
// is still applied (even much later: an attempt may wait in an overloaded
// member's queues long after its client retried elsewhere), and the
// client's retry with the same id, at any member, gets its result.
//
// The results cannot be kept forever; the issued times say when one may
// go. The state machine keeps a clock, the latest issued time of the
// commands delivered, and a write delivered once the clock is more than
// RequestLifetime past its issued time expires: it is not applied, and
// its request ends with 409 ("request expired before it was applied"),
// which no retry changes: an earlier attempt may or may not have been
// applied (client.ErrExpired). A kept result goes once it has expired
// too, or, to keep at most DedupeWindow of them, when DedupeWindow later
// writes come first; then the floor, the latest issued time of the
// results that went that way, rises to its issued time, and a write
// issued no later than the floor expires too. So no write is applied
// twice: all the attempts of one request carry the same issued time t,
// and once one was applied, the others get its result while it is kept;
// after that, either the clock passed t + RequestLifetime or the floor
// reached t, neither ever goes back, and every later attempt expires.
// Every member decides alike: the clock, the floor and the kept results
// with their issued times are part of the replicated state and of its
// snapshots, and change only with deliveries.
//
// The clock follows the issued times the clients send, within bounds: a
// member answers 400 to a write issued more than MaxIssuedAhead ahead of
// its own clock, and 409 at once to one already more than
// RequestLifetime behind it. A write without Request-Issued counts from
// the time the member read it, by the member's clock: a retry of it that
// also has none counts from its own reading, and is deduplicated while
// the first attempt's result is kept, but not beyond. The clocks of the
// members and of their clients must agree to well within RequestLifetime
// − MaxIssuedAhead; a client whose clock lags by more than that sees its
// writes expire. Under a load of more than DedupeWindow writes per
// RequestLifetime, results go by count before they expire, and a write
// expires if it waits longer than about DedupeWindow writes take, less
// how far ahead of its client's clock the others' are. Commands logged by
// members from before issued times (command version 1) carry none: they
// never expire, do not move the clock, and are deduplicated only while
// their results are among the last DedupeWindow kept.
//
// A request whose command is not applied while it lasts (its context
// ends, or this member is excluded from the group) ends with 503; the
// write may still be applied later, and a retry with the same id learns
// its result, or that it expired.
//
// # Overload and memory
//
// A member serves at most Options.MaxRequests requests at once (reads
// and writes, over HTTP and streams, from their arrival to their
// answer), holding at most Options.MaxRequestBytes bytes of them (as
// admission counts them: a put's body and its command, twice the body; a
// cas's JSON body four times; a stream's write frame twice, a read frame
// once). An HTTP request beyond either bound is refused at once, before
// its body is read, with 503 and a Retry-After of Options.RetryAfter: it
// holds a connection and a goroutine, so nothing of it queues, and the
// client tries again later (package client waits Retry-After and up to
// half as long again, at random). A stream's request beyond them waits
// for a place instead, before its frame is read, up to RetryAfter and in
// turn with the other streams' (the first to wait is the first
// admitted): meanwhile its stream reads nothing more, and what the
// client sends waits in TCP's buffers and the client, not in the
// member. One for which no place frees within RetryAfter is answered 503
// with that RetryAfter (in milliseconds). So a burst beyond the bounds
// costs a stream's requests the time until places free, where a refusal
// would cost them RetryAfter; at 1,024 clients over streams on three
// members with the default bounds, waiting instead of refusing took the
// 99th percentile of a write from about a second (the refused writes'
// Retry-After) to under 0.1 s. Reads take their places like
// writes: a linearizable read holds a goroutine and waits for the group
// like a write, and one bound is simpler to set. The refusals are counted
// in the metric convoy.kv.refused.requests (a stream's after its wait),
// and the places taken in
// convoy.kv.admitted.requests and convoy.kv.admitted.bytes (see
// Options.MeterProvider). Within the group, Send waits while the
// member's window (convoy.Config.WindowMessages and WindowBytes) is
// full: the writes that wait there are admitted ones.
//
// With these bounds, a member's resident memory stays within
//
//	RSS ≤ R₀ + P + (1 + GOGC/100) × (A + G + C + T + S + D)
//
// where, for a group of N members:
//
//	R₀  the process at rest, before any request ("convoy node": about 45 MiB)
//	P   Pebble's memtables, at most 2 of 64 MiB (beyond, it stalls writes),
//	    and its 8 MiB block cache: 136 MiB (durable delivery only)
//	A   MaxRequestBytes + MaxRequests × 16 KiB: what admitted requests
//	    hold, and for each a goroutine and its parsed request
//	G   3 × N × WindowBytes: the messages this member has not delivered,
//	    each sender's bounded by its window (a message leaves it once the
//	    sender delivered it, which needs every member to hold it, and what
//	    a member receives waits for the goroutine that delivers, whose
//	    full queue holds the senders back), each held at most three times:
//	    received, in the durable log's queue, in its batch
//	C   the HTTP server's connections: at most "convoy node -max-conns"
//	    (1,024 by default; beyond, new ones are closed at once), each
//	    with its buffers, its goroutine and a header of at most 16 KiB:
//	    max-conns × 48 KiB (over TLS, add 40 KiB each)
//	T   MaxStreams × (4 × (256 KiB + MaxValueBytes + 31) + 536 KiB): a
//	    stream's answers to be written, in two buffers (one filling, one
//	    being written) of up to 256 KiB and one answer, each with up to
//	    twice that capacity, its reader and writer goroutines (24 KiB),
//	    and up to 32 workers waiting for its next requests, of at most
//	    16 KiB each; its requests' frames, and the workers serving them,
//	    are within A
//	S   the state: for each key, its name twice and its last write's
//	    command (value, key, request id and 20 bytes), and about 100 bytes
//	    of map; during a state transfer, once more (the parts of the
//	    snapshot, on a donor or a joiner)
//	D   the kept results: DedupeWindow × (request id + 180 bytes), at most
//	    42 MiB
//
// and (1 + GOGC/100), 2 by default, is the room the garbage collector
// lets the heap take beyond what is live. Every term but S (the data
// clients store) is bounded by configuration: A by admission, G by the
// group's window, C by the connection limit, T by MaxStreams and the
// stream's buffer, D by DedupeWindow, P by Pebble's write stall. The
// bound is a worst case: under a load many times what the group
// sustains, "convoy node" members with 8 MiB windows stayed at about
// half of it (cmd/convoy's TestOverload logs the figures). Once the load
// ends, what the requests, connections and streams held is garbage, and
// their goroutines are gone; but while the process allocates nothing no
// collection runs (the runtime forces one only every two minutes), and
// the Go runtime keeps the memory, up to the heap goal the load set, for
// reuse: a member's RSS stays near its peak. With Options.IdleRelease
// ("convoy node" sets 5 s), a member that has served no request for that
// long after serving some returns it to the system (debug.FreeOSMemory),
// and its RSS comes back within the bound above without the terms of
// the load (A, G, C and T):
//
//	RSS ≤ R₀ + P + (1 + GOGC/100) × (S + D)
//
// what stays: Pebble's memtables, which hold what was written until they
// fill and are flushed, and what is live, with room for the runtime's
// fragmentation and the garbage made since. (cmd/convoy's TestOverload
// checks, 30 seconds after its load, the part of it the Go heap holds:
// each member's heap in use, beyond what it held before the load, within
// (1 + GOGC/100) × (S + D) and a slack; it logs the RSS.)
//
// # State transfer and restarts
//
// The state machine implements convoy.StateMachine: a snapshot is cut
// into parts by a hash of each key (and of each kept request id); every
// part carries the applied index; Restore replaces the whole state. The
// keys live in a copy-on-write B-tree (google/btree) and the kept
// results in a queue whose entries are never written once pushed, so
// the state machine is a convoy.Checkpointer too: a checkpoint is a
// clone of the tree and a slice of the queue, taken between two
// deliveries at no cost, and the group writes snapshots from it while
// deliveries go on.
// Joiners receive the state this way. A member that restarts on its
// durable directory rebuilds its state from its log — the log's snapshot,
// if Group().Snapshot kept one, then the entries after it — and the group
// restarts from the members' logs after they all failed. The state
// machine ignores deliveries at or below its applied index, so it can be
// rebuilt from a snapshot followed by deliveries that overlap it.
//
// # Commands on the wire
//
// A command is a version byte, an op byte, and length-prefixed fields
// (command.go); version 2 adds the issued time, and members still decode
// the version 1 commands of logs written before it. Decoding checks every
// length against the bytes left and against fixed bounds (MaxKeyBytes,
// MaxRequestIDBytes); a member skips a malformed command, which every
// member does alike. A delivery carries one command or a batch (version
// 3: a count, then each command as a length-prefixed field): the writes
// of a stream that arrive together go to the group as one message,
// applied in order at one delivery index, which their answers share. A
// member of an older version skips version 2 commands and batches as
// malformed: the members of a group must be upgraded together, not one
// by one.
package paxos
