package engine

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics are the group's otel instruments.
type metrics struct {
	deliveredMsgs  metric.Int64Counter
	deliveredBytes metric.Int64Counter
	rejected       metric.Int64Counter
	control        metric.Int64Counter
	// controlKinds are the attribute options of control, by kind.
	beaconAttr, upAttr, downAttr metric.AddOption
	latency                      metric.Float64Histogram
	barrierLag                   metric.Int64Gauge
	// Membership: suspicions by outcome, view changes, the epoch.
	suspicions                 metric.Int64Counter
	confirmedAttr, refutedAttr metric.AddOption
	views                      metric.Int64Counter
	epoch                      metric.Int64Gauge
	minority                   metric.Int64Counter
	neighbourLag               metric.Int64Gauge
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter("github.com/convoy-gcs/convoy")
	var err error
	var ms metrics
	check := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("convoy: metrics: %w", e)
		}
	}
	var e error
	ms.deliveredMsgs, e = m.Int64Counter("convoy.delivered.messages", metric.WithUnit("{message}"), metric.WithDescription("Messages delivered to the application."))
	check(e)
	ms.deliveredBytes, e = m.Int64Counter("convoy.delivered.bytes", metric.WithUnit("By"), metric.WithDescription("Payload bytes delivered to the application."))
	check(e)
	ms.rejected, e = m.Int64Counter("convoy.rejected.records", metric.WithUnit("{record}"), metric.WithDescription("Records from other members rejected as protocol violations."))
	check(e)
	ms.control, e = m.Int64Counter("convoy.control.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Control messages sent, counted per receiving member: beacons (to every other member) and frontier aggregation records (up to the parent, down to the children)."))
	check(e)
	kind := func(k string) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
	}
	ms.beaconAttr, ms.upAttr, ms.downAttr = kind("beacon"), kind("up"), kind("down")
	ms.latency, e = m.Float64Histogram("convoy.delivery.latency", metric.WithUnit("s"), metric.WithDescription("Time from Send to local delivery of own messages."),
		metric.WithExplicitBucketBoundaries(10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1))
	check(e)
	ms.barrierLag, e = m.Int64Gauge("convoy.barrier.lag", metric.WithUnit("ns"), metric.WithDescription("How far the delivery barrier trails this member's clock."))
	check(e)
	ms.suspicions, e = m.Int64Counter("convoy.membership.suspicions", metric.WithUnit("{suspicion}"),
		metric.WithDescription("Suspicions of a neighbour by outcome: confirmed through other paths (the member is reported failed) or refuted (a bad link)."))
	check(e)
	outcome := func(k string) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", k)))
	}
	ms.confirmedAttr, ms.refutedAttr = outcome("confirmed"), outcome("refuted")
	ms.views, e = m.Int64Counter("convoy.membership.views", metric.WithUnit("{view}"), metric.WithDescription("Views installed by this member."))
	check(e)
	ms.epoch, e = m.Int64Gauge("convoy.membership.epoch", metric.WithUnit("{epoch}"), metric.WithDescription("The epoch of the view this member takes part in (0: none)."))
	check(e)
	ms.neighbourLag, e = m.Int64Gauge("convoy.membership.neighbour.lag", metric.WithUnit("ns"),
		metric.WithDescription("How far a neighbour's receive frontier trails this member's, from its last heartbeat: a persistently high value marks a straggler (excluded only once it stalls past StallTimeout)."))
	check(e)
	ms.minority, e = m.Int64Counter("convoy.membership.minority", metric.WithUnit("{event}"),
		metric.WithDescription("Times this member found the proposed next view without a majority of the current one: it stops delivering and waits."))
	check(e)
	return &ms, err
}

func (m *metrics) delivered(n int) {
	ctx := context.Background()
	m.deliveredMsgs.Add(ctx, 1)
	m.deliveredBytes.Add(ctx, int64(n))
}
