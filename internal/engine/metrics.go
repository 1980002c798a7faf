package engine

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/convoy-gcs/convoy/internal/counter"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/ordering"
)

// metrics are the group's otel instruments, made once per Group from
// Config.MeterProvider (the README's Metrics section lists them). Their
// attributes take a few values each (a mode, a reason, a state), never a
// member's id; the options that carry them are made here once.
type metrics struct {
	// Traffic, with the group's mode as attribute: counted per message,
	// so kept in atomics and reported by the callback counts registers
	// (see package counter) until the group closes.
	sentMsgs, sentBytes           *counter.Counter
	deliveredMsgs, deliveredBytes *counter.Counter
	counts                        metric.Registration
	// multicast holds the counts of the views' multicast groups, shared
	// by them all.
	multicast *multicast.Metrics
	latency   metric.Float64Histogram
	mode      attrs
	// backpressure counts Sends that found the window full: waited or
	// refused (NoWait).
	backpressure     metric.Int64Counter
	waited, refused  attrs
	rejected         metric.Int64Counter
	control          metric.Int64Counter
	beacon, up, down attrs // control's kinds
	want             attrs
	// Lags: the delivery and commit barriers behind the clock, and the
	// durable barrier behind the log.
	barrierLag       metric.Float64Gauge
	delivery, commit attrs
	durableLag       metric.Int64Gauge
	// fenced counts messages dropped because their view ended: beyond its
	// cut, or arriving after this member wedged or left it.
	fenced    metric.Int64Counter
	cut, late attrs
	// Membership: suspicions by state, view changes, the epoch.
	suspicions                 metric.Int64Counter
	raised, confirmed, refuted attrs
	views                      metric.Int64Counter
	epoch                      metric.Int64Gauge
	minority                   metric.Int64Counter
	neighbourLag               metric.Float64Gauge
	// refusedJoins counts the join requests, registrations and restart
	// claims refused for their proof, once per incarnation, or for not
	// decoding, once per key and revision, by reason and kind
	// (refusedReasons, indexed by membership.RefusedKind).
	refusedJoins   metric.Int64Counter
	refusedReasons map[error][3]attrs
	// State transfer, by role and kind.
	transferBytes    metric.Int64Counter
	transferDuration metric.Float64Histogram
	transfer         [2][2]attrs // [role][kind]
}

// attrs are the options that carry one set of attributes, made once: a
// measurement allocates the slice of options it is not given as one.
type attrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newAttrs(kv ...attribute.KeyValue) attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return attrs{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// The roles and kinds of a state transfer (metrics.transfer).
const (
	roleDonor, roleJoiner    = 0, 1
	kindSnapshot, kindSuffix = 0, 1
)

// transferBuckets are the bucket bounds, in seconds, of the state
// transfers' durations: from a millisecond to ten minutes.
var transferBuckets = []float64{1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 25, 50, 100, 250, 600}

func newMetrics(mp metric.MeterProvider, mode Mode) (*metrics, error) {
	m := mp.Meter("github.com/convoy-gcs/convoy")
	var err error
	var ms metrics
	check := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("convoy: metrics: %w", e)
		}
	}
	newCounter := func(dst *metric.Int64Counter, name, unit, desc string) {
		c, e := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		*dst = c
		check(e)
	}
	attr := func(key, value string) attrs { return newAttrs(attribute.String(key, value)) }
	var e error

	counts := counter.NewSet(m)
	// The group's mode: the attribute of its traffic counts and of the
	// latency.
	modeAttr := attribute.String("mode", mode.String())
	ms.mode = newAttrs(modeAttr)
	ms.sentMsgs = counts.Counter("convoy.sent.messages", "{message}", "Messages this member's Send accepted.", modeAttr)
	ms.sentBytes = counts.Counter("convoy.sent.bytes", "By", "Payload bytes of the messages this member's Send accepted.", modeAttr)
	ms.deliveredMsgs = counts.Counter("convoy.delivered.messages", "{message}", "Messages delivered to the application (not those replayed from the durable log).", modeAttr)
	ms.deliveredBytes = counts.Counter("convoy.delivered.bytes", "By", "Payload bytes of the messages delivered to the application.", modeAttr)
	ms.latency, e = m.Float64Histogram("convoy.delivery.latency", metric.WithUnit("s"), metric.WithDescription("Time from Send to local delivery of own messages."),
		metric.WithExplicitBucketBoundaries(10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1))
	check(e)
	newCounter(&ms.backpressure, "convoy.send.backpressure", "{send}",
		"Sends that found this member's window of undelivered messages full, by outcome: waited for space, or refused (NoWait, ErrBackpressure).")
	ms.waited, ms.refused = attr("outcome", "waited"), attr("outcome", "refused")
	newCounter(&ms.rejected, "convoy.rejected.records", "{record}", "Records from other members rejected as protocol violations.")
	newCounter(&ms.control, "convoy.control.messages", "{message}",
		"Control messages sent, counted per receiving member: beacons and wants (a Sync's request for prompt beacons) to every other member, and frontier aggregation records (up to the parent, down to the children).")
	ms.beacon, ms.up, ms.down = attr("kind", "beacon"), attr("kind", "up"), attr("kind", "down")
	ms.want = attr("kind", "want")

	ms.barrierLag, e = m.Float64Gauge("convoy.barrier.lag", metric.WithUnit("s"),
		metric.WithDescription("How far a barrier trails this member's clock: the delivery barrier (every member's promise: below it, this member holds every message) and the commit barrier (below it, every member does); just after a view opens, the time since."))
	check(e)
	ms.delivery, ms.commit = attr("barrier", "delivery"), attr("barrier", "commit")
	ms.durableLag, e = m.Int64Gauge("convoy.durable.lag", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries this member's durable log holds that are not yet on every member's disk."))
	check(e)
	newCounter(&ms.fenced, "convoy.fenced.messages", "{message}",
		"Other members' messages dropped because their view ended, by reason: held beyond the view's cut, or arriving after this member stopped in the view (the live senders send theirs again in the next view; an excluded member's are lost).")
	ms.cut, ms.late = attr("reason", "cut"), attr("reason", "late")

	newCounter(&ms.suspicions, "convoy.membership.suspicions", "{suspicion}",
		"Suspicions of a neighbour by state: raised (silent, stalled or disconnected), then confirmed through other paths (the member is reported failed) or refuted (a bad link).")
	ms.raised, ms.confirmed, ms.refuted = attr("state", "raised"), attr("state", "confirmed"), attr("state", "refuted")
	newCounter(&ms.views, "convoy.membership.views", "{view}", "Views installed by this member.")
	ms.epoch, e = m.Int64Gauge("convoy.membership.epoch", metric.WithUnit("{epoch}"), metric.WithDescription("The epoch of the view this member takes part in (0: none)."))
	check(e)
	ms.neighbourLag, e = m.Float64Gauge("convoy.membership.neighbour.lag", metric.WithUnit("s"),
		metric.WithDescription("How far the neighbour furthest behind trails this member's receive frontier, from their last heartbeats: a persistently high value marks a straggler (excluded only once it stalls past StallTimeout)."))
	check(e)
	newCounter(&ms.minority, "convoy.membership.minority", "{event}",
		"Times this member found the proposed next view without a majority of the current one: it stops delivering and waits.")
	newCounter(&ms.refusedJoins, "convoy.membership.refused.joins", "{request}",
		"Join requests, registrations and restart claims refused, by kind (join, registration, restart) and reason: a record that does not decode (undecodable, once per key and revision), or, with TLS, once per incarnation, for its proof: no proof, a malformed one, a certificate the group's authorities did not issue, one that names another member, or a signature that does not hold.")
	ms.refusedReasons = make(map[error][3]attrs)
	for reason, name := range map[error]string{
		membership.ErrJoinProofMissing:   "missing",
		membership.ErrJoinProofMalformed: "malformed",
		membership.ErrJoinCertificate:    "certificate",
		membership.ErrJoinIdentity:       "identity",
		membership.ErrJoinSignature:      "signature",
		membership.ErrMalformedRecord:    "undecodable",
	} {
		var a [3]attrs
		for _, k := range []membership.RefusedKind{membership.RefusedJoinRequest, membership.RefusedRegistration, membership.RefusedRestart} {
			a[k] = newAttrs(attribute.String("reason", name), attribute.String("kind", k.String()))
		}
		ms.refusedReasons[reason] = a
	}

	newCounter(&ms.transferBytes, "convoy.transfer.bytes", "By",
		"State transferred to joiners, by role (donor: sent; joiner: received) and kind (snapshot: the application's state; suffix: the messages a restarted member's log misses).")
	ms.transferDuration, e = m.Float64Histogram("convoy.transfer.duration", metric.WithUnit("s"),
		metric.WithDescription("State transfers, by role and kind: a joiner's from its start to its end (done or failed); a donor's from its start until its joiners hold their state."),
		metric.WithExplicitBucketBoundaries(transferBuckets...))
	check(e)
	for role, r := range [2]string{"donor", "joiner"} {
		for kind, k := range [2]string{"snapshot", "suffix"} {
			ms.transfer[role][kind] = newAttrs(attribute.String("role", r), attribute.String("kind", k))
		}
	}
	ms.counts, e = counts.Register()
	check(e)
	ms.multicast, e = multicast.NewMetrics(mp)
	check(e)
	if err != nil {
		ms.close()
		return nil, err
	}
	return &ms, nil
}

// close stops reporting the counts: once the group is closed its
// provider no longer holds them.
func (m *metrics) close() {
	if m.counts != nil {
		_ = m.counts.Unregister()
	}
	if m.multicast != nil {
		_ = m.multicast.Close()
	}
}

func (m *metrics) sent(n int) {
	m.sentMsgs.Add(1)
	m.sentBytes.Add(int64(n))
}

func (m *metrics) delivered(n int) {
	m.deliveredMsgs.Add(1)
	m.deliveredBytes.Add(int64(n))
}

// transferred returns the function that counts the bytes a transfer of
// role and kind moves (membership's OnSent and OnReceived).
func (m *metrics) transferred(role, kind int) func(bytes int) {
	opts := m.transfer[role][kind].add
	return func(bytes int) { m.transferBytes.Add(context.Background(), int64(bytes), opts...) }
}

// transferTook records a transfer of role and kind that took d.
func (m *metrics) transferTook(role, kind int, d time.Duration) {
	m.transferDuration.Record(context.Background(), d.Seconds(), m.transfer[role][kind].rec...)
}

// lag returns how far stamp t trails time now, in seconds (0 if it does
// not).
func lag(now int64, t ordering.Timestamp) float64 {
	if now <= 0 || t >= ordering.Timestamp(now) {
		return 0
	}
	return time.Duration(now - int64(t)).Seconds()
}
