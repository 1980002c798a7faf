package multicast

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/convoy-gcs/convoy/internal/counter"
)

// Metrics are the counts of the groups that share them (GroupConfig's
// Metrics), reported to one meter provider until Close: a program that
// opens groups one after the other (one set per view, say) shares one
// Metrics among them, so that the counts of its ended groups stay in the
// totals. The counts per message are kept in atomics (an update costs
// an atomic add, not a synchronous measurement), with each group's
// algorithm as attribute. Safe for concurrent use.
type Metrics struct {
	byAlgorithm [numAlgorithms]algorithmCounts
	failures    metric.Int64Counter
	counts      metric.Registration
}

// numAlgorithms counts the Algorithms (BinomialTree is the last).
const numAlgorithms = int(BinomialTree) + 1

type algorithmCounts struct {
	sentMsgs, sentBytes           *counter.Counter
	deliveredMsgs, deliveredBytes *counter.Counter
	blocksRecv                    *counter.Counter
}

// NewMetrics returns Metrics reported to mp; nil means none (the counts
// are kept, and not reported).
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/convoy-gcs/convoy/multicast")
	var ms Metrics
	counts := counter.NewSet(m)
	for a := range ms.byAlgorithm {
		attr := attribute.String("algorithm", Algorithm(a).String())
		ms.byAlgorithm[a] = algorithmCounts{
			sentMsgs:       counts.Counter("convoy.multicast.sent.messages", "{message}", "Messages accepted by Send on the root.", attr),
			sentBytes:      counts.Counter("convoy.multicast.sent.bytes", "By", "Bytes accepted by Send on the root.", attr),
			deliveredMsgs:  counts.Counter("convoy.multicast.delivered.messages", "{message}", "Messages completed on receivers.", attr),
			deliveredBytes: counts.Counter("convoy.multicast.delivered.bytes", "By", "Bytes completed on receivers.", attr),
			blocksRecv:     counts.Counter("convoy.multicast.blocks.received", "{block}", "Blocks of large messages received.", attr),
		}
	}
	var err error
	if ms.failures, err = m.Int64Counter("convoy.multicast.failures", metric.WithUnit("{failure}"), metric.WithDescription("Groups that failed on this member.")); err != nil {
		return nil, fmt.Errorf("multicast: metrics: %w", err)
	}
	if ms.counts, err = counts.Register(); err != nil {
		return nil, fmt.Errorf("multicast: metrics: %w", err)
	}
	return &ms, nil
}

// Close stops reporting the counts per message (sent, delivered, blocks
// received); the failures counter is a synchronous one, and stays. Close
// of a nil *Metrics (no Metrics) returns nil.
func (m *Metrics) Close() error {
	if m == nil {
		return nil
	}
	return m.counts.Unregister()
}

// groupMetrics are one group's view of its Metrics: the counts of its
// algorithm. The zero groupMetrics, a group's without Metrics, counts
// nothing.
type groupMetrics struct {
	*algorithmCounts
	failures metric.Int64Counter
}

// group returns the view of m of a group running algorithm a. A nil m
// is a group's without Metrics: its view counts nothing.
func (m *Metrics) group(a Algorithm) groupMetrics {
	if m == nil {
		return groupMetrics{}
	}
	return groupMetrics{algorithmCounts: &m.byAlgorithm[a], failures: m.failures}
}

func (m groupMetrics) sent(n int) {
	if m.algorithmCounts == nil {
		return
	}
	m.sentMsgs.Add(1)
	m.sentBytes.Add(int64(n))
}

func (m groupMetrics) delivered(n int) {
	if m.algorithmCounts == nil {
		return
	}
	m.deliveredMsgs.Add(1)
	m.deliveredBytes.Add(int64(n))
}

func (m groupMetrics) blockRecv(int) {
	if m.algorithmCounts == nil {
		return
	}
	m.blocksRecv.Add(1)
}

func (m groupMetrics) failed() {
	if m.failures == nil {
		return
	}
	m.failures.Add(context.Background(), 1)
}
