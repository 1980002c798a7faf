package persistence

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// metrics are the log's OpenTelemetry instruments.
type metrics struct {
	entries     metric.Int64Counter
	bytes       metric.Int64Counter
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
	if ms.entries, err = m.Int64Counter("convoy.persistence.appended.entries",
		metric.WithDescription("Entries appended to the log."), metric.WithUnit("{entry}")); err != nil {
		return nil, err
	}
	if ms.bytes, err = m.Int64Counter("convoy.persistence.appended.bytes",
		metric.WithDescription("Payload bytes appended to the log."), metric.WithUnit("By")); err != nil {
		return nil, err
	}
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
	return &ms, nil
}
