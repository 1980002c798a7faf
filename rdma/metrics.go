package rdma

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/convoy-gcs/convoy/internal/counter"
)

// meterName is the instrumentation scope of the transport's metrics.
const meterName = "github.com/convoy-gcs/convoy/rdma"

// endpointMetrics are the counters of an endpoint (tcp or fabric).
type endpointMetrics struct {
	// Frames and their bytes: counted per frame, so kept in atomics and
	// reported by the callback counts registers (see package counter)
	// until the endpoint closes.
	framesSent, bytesSent *counter.Counter
	framesRecv, bytesRecv *counter.Counter
	counts                metric.Registration
	connsOpened           metric.Int64Counter
	connsBroken           metric.Int64Counter
	rejected              metric.Int64Counter
	// late counts frames for streams closed here, dropped.
	late metric.Int64Counter
	// rejectedBy holds rejected's attribute, by reason: made once, as a
	// measurement allocates the slice of options it is not given as one.
	rejectedBy [numRejectReasons][]metric.AddOption
}

// newEndpointMetrics makes an endpoint's counters on mp and registers the
// callback that reports its frame counts, until close.
func newEndpointMetrics(mp metric.MeterProvider) (*endpointMetrics, error) {
	m := mp.Meter(meterName)
	var em endpointMetrics
	var err error
	newCounter := func(dst *metric.Int64Counter, name, unit, desc string) {
		if err != nil {
			return
		}
		*dst, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	counts := counter.NewSet(m)
	em.framesSent = counts.Counter("convoy.rdma.frames.sent", "{frame}", "Frames written to connections.")
	em.bytesSent = counts.Counter("convoy.rdma.bytes.sent", "By", "Bytes written to connections, headers included.")
	em.framesRecv = counts.Counter("convoy.rdma.frames.received", "{frame}", "Frames read from connections.")
	em.bytesRecv = counts.Counter("convoy.rdma.bytes.received", "By", "Bytes read from connections, headers included.")
	newCounter(&em.connsOpened, "convoy.rdma.connections.opened", "{connection}", "Connections established.")
	newCounter(&em.connsBroken, "convoy.rdma.connections.broken", "{connection}", "Connections that broke or were refused (not counting those closed by Close).")
	newCounter(&em.rejected, "convoy.rdma.rejected.frames", "{frame}",
		"Bad input from peers, by reason: each refused connection, or transfer failed for it, counts once.")
	newCounter(&em.late, "convoy.rdma.late.frames", "{frame}",
		"Frames dropped because they arrived for a stream this node had closed: sent before the peer learned of the close (a group of an ended view, say).")
	if err == nil {
		em.counts, err = counts.Register()
	}
	if err != nil {
		return nil, fmt.Errorf("rdma: creating metrics: %w", err)
	}
	for r := range em.rejectedBy {
		em.rejectedBy[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", rejectReason(r).String())))}
	}
	return &em, nil
}

// close stops reporting the frame counts: once the endpoint is closed,
// its provider no longer holds them.
func (m *endpointMetrics) close() {
	_ = m.counts.Unregister()
}

func (m *endpointMetrics) add(c metric.Int64Counter, n int64) {
	c.Add(context.Background(), n)
}

// reject counts bad input from a peer.
func (m *endpointMetrics) reject(r rejectReason) {
	m.rejected.Add(context.Background(), 1, m.rejectedBy[r]...)
}

// rejectReason is why input from a peer was refused: the reason
// attribute of the rejected frames metric, a short list so that the
// metric keeps few series.
type rejectReason uint8

const (
	// rejectOther: bad input of no kind below.
	rejectOther rejectReason = iota
	// rejectHandshake: a hello that breaks the wire format (magic,
	// version, reserved bytes), or a dial in the wrong direction.
	rejectHandshake
	// rejectIdentity: a peer that claims an id not its own: this node's,
	// another than the one dialed, or one its certificate does not name.
	rejectIdentity
	// rejectCertificate: a TLS certificate this node does not trust.
	rejectCertificate
	// rejectMalformed: a frame header that breaks the wire format.
	rejectMalformed
	// rejectOversize: a data frame beyond the endpoint's MaxFrameBytes.
	rejectOversize
	// rejectStream: frames for a stream that was never opened.
	rejectStream
	// rejectReceiveBuffer: a transfer with no posted receive buffer, or
	// into one too small.
	rejectReceiveBuffer
	numRejectReasons
)

// rejectReasonNames are the values of the reason attribute.
var rejectReasonNames = [numRejectReasons]string{
	rejectOther:         "other",
	rejectHandshake:     "handshake",
	rejectIdentity:      "identity",
	rejectCertificate:   "certificate",
	rejectMalformed:     "malformed",
	rejectOversize:      "oversize",
	rejectStream:        "stream",
	rejectReceiveBuffer: "receive_buffer",
}

func (r rejectReason) String() string {
	if r >= numRejectReasons {
		return rejectReasonNames[rejectOther]
	}
	return rejectReasonNames[r]
}
