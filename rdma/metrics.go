package rdma

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the transport's metrics.
const meterName = "github.com/convoy-gcs/convoy/rdma"

// tcpMetrics are the counters of a tcp endpoint.
type tcpMetrics struct {
	framesSent  metric.Int64Counter
	bytesSent   metric.Int64Counter
	framesRecv  metric.Int64Counter
	bytesRecv   metric.Int64Counter
	connsOpened metric.Int64Counter
	connsBroken metric.Int64Counter
	protoErrors metric.Int64Counter
}

func newTCPMetrics(mp metric.MeterProvider) (*tcpMetrics, error) {
	m := mp.Meter(meterName)
	var tm tcpMetrics
	var err error
	counter := func(dst *metric.Int64Counter, name, unit, desc string) {
		if err != nil {
			return
		}
		*dst, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	counter(&tm.framesSent, "rdma.frames.sent", "{frame}", "Frames written to connections.")
	counter(&tm.bytesSent, "rdma.bytes.sent", "By", "Bytes written to connections, headers included.")
	counter(&tm.framesRecv, "rdma.frames.received", "{frame}", "Frames read from connections.")
	counter(&tm.bytesRecv, "rdma.bytes.received", "By", "Bytes read from connections, headers included.")
	counter(&tm.connsOpened, "rdma.connections.opened", "{connection}", "Connections established.")
	counter(&tm.connsBroken, "rdma.connections.broken", "{connection}", "Connections that broke or were refused (not counting those closed by Close).")
	counter(&tm.protoErrors, "rdma.protocol.errors", "{error}", "Bad input from peers.")
	if err != nil {
		return nil, fmt.Errorf("rdma: creating metrics: %w", err)
	}
	return &tm, nil
}

func (m *tcpMetrics) add(c metric.Int64Counter, n int64) {
	c.Add(context.Background(), n)
}
