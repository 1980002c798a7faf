// Package pubsub is a publish/subscribe service over HTTP, served by the
// members of a view-managed Convoy group with topics: a message
// published on a topic reaches the topic's subscribing members only, and
// every member delivers the messages of all its topics in the group's
// one order.
//
// # Use
//
// Every member opens the group and serves the API:
//
//	n, err := pubsub.Open(ctx, convoy.Config{
//		Self: 1,
//		Addr: "10.0.0.1:7000",
//		Etcd: &convoy.EtcdConfig{Endpoints: []string{"http://10.0.0.9:2379"}},
//	}, pubsub.Options{})
//	if err != nil { ... }
//	defer n.Close()
//	http.ListenAndServe(":7101", n.Handler())
//
// and clients use package client, which fails over between members and
// resumes a stream of events where it broke off:
//
//	c := client.New([]string{"http://10.0.0.1:7101", "http://10.0.0.2:7101"})
//	err := c.Subscribe(ctx, "http://10.0.0.1:7101", "orders", "atomic")
//	r, err := c.Publish(ctx, "orders", []byte("42 apples"))
//	s := c.Events(ctx, "orders", 1)
//	for { ev, err := s.Next(); ... }
//
// # HTTP API
//
//	POST /topics/{name}                     body = the message → 200 {"topic", "seq"}
//	GET  /topics/{name}/events?from=INDEX   → 200 text/event-stream, one event per message
//	POST /topics/{name}/subscribe[?mode=atomic|total] → 200 {"topic", "subscribed": true}
//	POST /topics/{name}/unsubscribe         → 200 {"topic", "subscribed": false}
//	GET  /topics                            → 200 [{"name", "mode", "subscribers", "subscribed", "first", "last"}]
//	GET  /status                            → 200 {"id", "epoch", "members"}, never refused
//
// A publish returns once every subscriber of the topic holds the message
// (an atomic topic's subscribers then all deliver it, unless they fail);
// Seq numbers the message among this member's on the topic. A
// subscription asks the group for it and returns once the view that
// makes this member a subscriber is installed: the member receives the
// topic's messages from that view's start on (subscriptions take effect
// at view boundaries, the points of the group's order every member
// agrees on). A topic is created by the first subscription to it, with
// the mode it names (default atomic).
//
// An event stream sends the topic's messages this member delivered,
// from index INDEX on (every subscriber gives a message of a topic the
// same index, counting from 1), then each new one as it is delivered;
// without from, only the new ones. Each event is
//
//	id: INDEX
//	event: message
//	data: {"index": n, "epoch": e, "sender": id, "seq": s, "data": base64}
//
// and a reconnecting client resumes with Last-Event-ID (or from=INDEX+1)
// at any subscribing member: they all number the topic alike. A member
// keeps the last Options.Retain messages of each topic it subscribes to,
// in memory. Without durable delivery a member that restarts keeps none,
// and its clients resume at another subscriber. With it (convoy.Config's
// Durable; convoy node always runs so) a topic's message is delivered
// once every subscriber of the topic has it on disk, and a member
// restarted on its data directory replays its topics' messages from its
// log (the last convoy.DurableConfig.TopicRetain it delivered, across its
// topics; every one it handed out among them, even after a kill -9), at
// their indexes, and subscribes again to their topics before it
// serves: a client resumes there, across the restart, from any index it
// kept (messages published while the member was down come to it from
// its new subscription's view on; if it missed some, it keeps the topic
// afresh from there, and a cursor below answers 410). A durable group's
// topics are atomic: a subscription in another mode gets 400. A member
// that unsubscribed from a topic before it restarted subscribes again,
// as its log holds the topic's messages.
//
// Errors are JSON {"error": "..."}: 400 for a malformed request (a bad
// INDEX, a bad mode), 404 for a topic the group does not have, 409 for
// an event stream of a topic this member does not subscribe to, 410 for
// a cursor below the prefix this member keeps (the message is gone from
// it: resume at another subscriber, or from a later index), 413 for a
// message above Options.MaxMessageBytes, and 503 when this member cannot
// serve: it takes part in no view (joining, rejoining after an
// exclusion, on the minority side of a partition), it is closing, the
// request ended first, or the member is at capacity (see Overload). A
// 503 on a publish leaves open whether it took effect, except at
// capacity: then the publish was refused before its body was read.
//
// A topic's indexes go on across view changes as long as one of its
// subscribers stays; if every subscriber of a topic fails in one view
// change, what they delivered is lost with them and the topic's indexes
// go on from what its publishers hold, so an index may repeat (with a
// later epoch): a member that sees a topic's index go back starts its
// kept prefix afresh.
//
// # Overload
//
// A member refuses at once the work it cannot carry instead of queueing
// it. It serves at most Options.MaxRequests requests at once
// (publishes, subscriptions, unsubscriptions and GET /topics, from their
// arrival to their answer), the publishes among them holding at most
// Options.MaxRequestBytes (each counts its body, or MaxMessageBytes if it
// declares no length, and takes its place before the body is read), and
// at most Options.MaxStreams event streams: a stream lasts as long as
// its reader stays, so streams have a bound of their own and take no
// request's place. GET /status is always served. Beyond them a request
// or a stream gets 503 with Retry-After (Options.RetryAfter, in whole
// seconds) and {"error": "... member at capacity"}, at once; a publish
// that declares a length above MaxMessageBytes still gets 413. The
// defaults follow the group's window (Config.WindowMessages and
// WindowBytes), which a publish waits in until it is stable: admitting
// more would only queue it there. The refusals and the admitted load
// are counted in the metrics convoy.pubsub.refused.requests (by reason:
// capacity or streams), convoy.pubsub.admitted.requests,
// convoy.pubsub.admitted.bytes and convoy.pubsub.streams, through
// Options.MeterProvider.
//
// The Go client, refused, goes round the other members at once (a
// subscription, which names its member, stays there), then waits the
// shortest Retry-After they asked and up to half as long again at
// random, so that the clients refused together do not all come back
// together; without one, it backs off exponentially with jitter. It
// does so for publishes, subscriptions and the opening of event streams
// alike.
//
// The handler does no authentication: serve it behind TLS and a token,
// as the other examples do.
package pubsub
