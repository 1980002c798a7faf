// Package sharedlog is a Corfu-style shared log served over HTTP/JSON,
// replicated by a Convoy group with durable delivery.
//
// Clients append entries and get back each entry's position: dense,
// from 0, the same on every member. They read an entry by position, a
// range of positions, or the tail (the next position to be written);
// they trim a prefix of the log; and an append may name streams, each of
// which can be read on its own, in log order.
//
// # Use
//
// Every member opens the group with the log's state machine and serves
// the API:
//
//	n, err := sharedlog.Open(ctx, convoy.Config{
//		Self:    1,
//		Addr:    "10.0.0.1:7000",
//		Etcd:    &convoy.EtcdConfig{Endpoints: []string{"http://10.0.0.9:2379"}},
//		Durable: &convoy.DurableConfig{Dir: "/var/lib/sharedlog"},
//	}, sharedlog.Options{})
//	if err != nil { ... }
//	defer n.Close()
//	http.ListenAndServe(":7101", n.Handler())
//
// and clients use package client, which fails over between members:
//
//	c := client.New([]string{"http://10.0.0.1:7101", "http://10.0.0.2:7101"})
//	pos, err := c.Append(ctx, []byte("hello"), "greetings")
//
// # HTTP API
//
//	POST /log[?streams=a,b]      body = the entry          → 200 {"position": n}
//	GET  /log/{position}                                   → 200 the entry's bytes; 404 {"error":"unwritten"}; 410 {"error":"trimmed"}
//	GET  /log?from=a&to=b                                  → 200 [{"position": n, "data": base64}, ...] (to exclusive)
//	GET  /log/tail                                         → 200 {"tail": n}
//	POST /log/trim?before=n                                → 200 {"trim": n}
//	GET  /streams/{name}?from=a                            → 200 [{"position": n, "data": base64}, ...]
//	GET  /status                                           → 200 {"id", "epoch", "members", "serving", "applied", "trim", "tail"}
//
// Errors are JSON {"error": "..."}: 400 for a malformed request (a bad
// position, a bad stream name — 1 to MaxStreamName bytes of letters,
// digits, '.', '_', '-', ':', other than "." and ".." — more than
// MaxStreams streams, an
// Idempotency-Key above MaxRequestID bytes), 413 for an entry above
// Options.MaxValueBytes, and 503 when this member cannot serve: it takes
// part in no view (joining, rejoining after an exclusion, on the minority
// side of a partition), it is closing, the request ended first, or it is
// at capacity (then with a Retry-After header; see Overload). A 503 on a
// write leaves open whether it took effect (but one with Retry-After
// never took effect): retry it on another member with the same
// Idempotency-Key.
//
// The handler does no authentication: "convoy node" serves it over TLS
// (-http-cert) and behind a bearer token (-http-token-file), and the Go
// client sends the token with client.WithToken; a 401 is
// client.ErrUnauthorized.
//
// In a range, from defaults to 0 and to to from+MaxRangeEntries; in a
// stream read, from defaults to 0. A range or stream read returns at
// most MaxRangeEntries entries and
// MaxRangeBytes bytes of data (beyond the first entry); trimmed and
// unwritten positions are left out. Read on from the last position
// returned plus one. A trim answers the log's trim point once it
// applied: a trim past the tail trims up to the tail, and one below the
// trim point changes nothing and answers the trim point; reads below
// the trim point then get 410 on every member.
//
// # Overload
//
// A member serves at most Options.MaxRequests requests at once (appends,
// trims and reads, from their arrival to their answer; GET /status is
// not counted), and the appends among them hold at most
// Options.MaxRequestBytes bytes as admission counts them (twice the
// body: the body, then the command made of it; twice MaxValueBytes for a
// body of undeclared length). A request beyond either bound is refused
// at once, before its body is read, with 503 and a Retry-After of
// Options.RetryAfter: nothing queues, and the client tries again later
// (package client waits Retry-After and up to half as long again, at
// random). The defaults follow the group's window
// (convoy.Config.WindowMessages and WindowBytes), in which admitted
// appends would wait anyway. The refusals are counted in the metric
// convoy.log.refused.requests, and the places taken in
// convoy.log.admitted.requests and convoy.log.admitted.bytes (see
// Options.MeterProvider).
//
// # Requests, retries and consistency
//
// Appends and trims are commands sent through the group: every member
// applies the same commands in the same order (the group's delivery
// order), so every member assigns the same positions. The state machine
// counts positions itself, in the order appends are applied: delivery
// indexes do not serve, as other commands are delivered too. With
// durable delivery a command is applied only once every member of the
// view has it on disk, and a request is answered once its command is
// applied on the member that serves it: an acknowledged append is
// durable.
//
// Each write carries a request id: the Idempotency-Key header, or, if
// absent, a random one (retries are then not recognised). The state
// machine remembers the results of the DedupeLimit most recent writes by
// request id and answers a repeated request with the original result
// instead of applying it again, on every member alike (the table is part
// of the replicated state and of its snapshots). So a client that gets a
// 503 or loses its connection retries, anywhere, with the same id, and
// the append lands once.
//
// Reads are linearizable. An entry never changes once written, so a
// read of a position below this member's tail is served from its
// replica. A position at or beyond that tail may have been written
// elsewhere already: before answering "unwritten", the member waits for
// the group's read barrier (convoy.Group.Sync), after which it has
// applied everything any member delivered before the read began, so
// everything acknowledged anywhere before it. The tail, stream reads and
// ranges reaching the member's tail are answered after a barrier the
// same way. A trim takes
// effect on each member as it applies it: until then a member may still
// serve an entry that another already reports trimmed.
//
// # State and state transfer
//
// The replica is held in memory: the entries from the trim point to the
// tail, the positions of each stream, the results of recent requests,
// and the index of the last delivery applied, below which deliveries are
// ignored (a member replaying its log after a restart). A malformed
// command is skipped and logged, never applied. A joining, rejoining or
// restarted member receives the state from the others (Snapshot, then
// Restore): each part of a snapshot repeats the applied index, trim
// point and tail, and holds one slice of the positions and the request
// results whose id hashes to it. Snapshots are written from checkpoints
// (convoy.Checkpointer): a checkpoint shares the replica's slices of
// entries and results as they are, and while one lives a trim or an
// eviction leaves the elements it drops in place, so that deliveries go
// on while a snapshot is written.
//
// Commands travel in a compact binary encoding that starts with a
// version byte; a member skips (and logs) a command of a version it does
// not know, like any other malformed one.
package sharedlog
