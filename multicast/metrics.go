package multicast

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// groupMetrics are a group's otel instruments. Instruments that fail to
// register are replaced by no-ops, so metrics never stop a group.
type groupMetrics struct {
	attrs          []metric.AddOption // built once: passing options allocates otherwise
	sentMsgs       metric.Int64Counter
	sentBytes      metric.Int64Counter
	deliveredMsgs  metric.Int64Counter
	deliveredBytes metric.Int64Counter
	blocksRecv     metric.Int64Counter
	failures       metric.Int64Counter
}

func newGroupMetrics(mp metric.MeterProvider, cfg GroupConfig) *groupMetrics {
	m := mp.Meter("github.com/convoy-gcs/convoy/multicast")
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			c, _ = noop.Meter{}.Int64Counter(name)
		}
		return c
	}
	return &groupMetrics{
		attrs:          []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("algorithm", cfg.Algorithm.String())))},
		sentMsgs:       counter("convoy.multicast.sent.messages", "{message}", "Messages accepted by Send on the root."),
		sentBytes:      counter("convoy.multicast.sent.bytes", "By", "Bytes accepted by Send on the root."),
		deliveredMsgs:  counter("convoy.multicast.delivered.messages", "{message}", "Messages completed on receivers."),
		deliveredBytes: counter("convoy.multicast.delivered.bytes", "By", "Bytes completed on receivers."),
		blocksRecv:     counter("convoy.multicast.blocks.received", "{block}", "Blocks of large messages received."),
		failures:       counter("convoy.multicast.failures", "{failure}", "Groups that failed on this member."),
	}
}

func (m *groupMetrics) sent(n int) {
	ctx := context.Background()
	m.sentMsgs.Add(ctx, 1, m.attrs...)
	m.sentBytes.Add(ctx, int64(n), m.attrs...)
}

func (m *groupMetrics) delivered(n int) {
	ctx := context.Background()
	m.deliveredMsgs.Add(ctx, 1, m.attrs...)
	m.deliveredBytes.Add(ctx, int64(n), m.attrs...)
}

func (m *groupMetrics) blockRecv(int) {
	m.blocksRecv.Add(context.Background(), 1, m.attrs...)
}
