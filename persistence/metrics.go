package persistence

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/convoy-gcs/convoy/internal/counter"
)

// metrics are the log's OpenTelemetry instruments. The counts per
// append are kept in atomics (see package counter), reported until the
// log is closed.
type metrics struct {
	entries     *counter.Counter
	bytes       *counter.Counter
	counts      metric.Registration
	fsyncs      metric.Int64Counter
	batchSize   metric.Int64Histogram
	syncLatency metric.Float64Histogram
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/convoy-gcs/convoy/persistence")
	var ms metrics
	var err error
	counts := counter.NewSet(m)
	ms.entries = counts.Counter("convoy.persistence.appended.entries", "{entry}", "Entries appended to the log.")
	ms.bytes = counts.Counter("convoy.persistence.appended.bytes", "By", "Payload bytes appended to the log.")
	if ms.fsyncs, err = m.Int64Counter("convoy.persistence.fsyncs",
		metric.WithDescription("Synced batches committed (one fsync each)."), metric.WithUnit("{batch}")); err != nil {
		return nil, err
	}
	if ms.batchSize, err = m.Int64Histogram("convoy.persistence.batch.entries",
		metric.WithDescription("Entries per synced batch."), metric.WithUnit("{entry}"),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)); err != nil {
		return nil, err
	}
	if ms.syncLatency, err = m.Float64Histogram("convoy.persistence.sync.latency",
		metric.WithDescription("Time to commit and fsync one batch."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1)); err != nil {
		return nil, err
	}
	if ms.counts, err = counts.Register(); err != nil {
		return nil, err
	}
	return &ms, nil
}

// close stops reporting the counts.
func (m *metrics) close() {
	_ = m.counts.Unregister()
}
