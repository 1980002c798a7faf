//go:build fabric

package rdma

import (
	"context"
	"testing"
	"time"
)

// BenchmarkFabricThroughput measures, in the same run, the tcp backend
// and the fabric backend (libfabric's tcp provider) moving benchBytes over
// loopback as 1 MiB transfers, each with benchWindow receives posted and
// sends in flight (as BenchmarkTCPThroughput does). It reports both rates
// and their ratio, fabric over tcp.
func BenchmarkFabricThroughput(b *testing.B) {
	tcp := newBackendPair(b)
	defer tcp.close()
	fab := newFabricBenchPair(b)
	defer fab.close()

	// Warm up both paths once.
	tcp.run(b)
	fab.run(b)

	var tcpTime, fabTime time.Duration
	b.SetBytes(2 * benchBytes) // MB/s counts both transfers
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		tcp.run(b)
		tcpTime += time.Since(start)
		start = time.Now()
		fab.run(b)
		fabTime += time.Since(start)
	}
	b.StopTimer()
	n := float64(b.N) * benchBytes / 1e6
	tcpRate := n / tcpTime.Seconds()
	fabRate := n / fabTime.Seconds()
	b.ReportMetric(tcpRate, "tcp-MB/s")
	b.ReportMetric(fabRate, "fabric-MB/s")
	b.ReportMetric(fabRate/tcpRate, "ratio")
}

// fabricBenchPair is a queue pair between two fabric endpoints.
type fabricBenchPair struct {
	*backendPair
	a, b *FabricEndpoint
}

func newFabricBenchPair(b *testing.B) *fabricBenchPair {
	pb, err := ListenFabric(FabricConfig{ID: 2})
	if err != nil {
		b.Fatal(err)
	}
	addr := pb.Addr()
	pa, err := ListenFabric(FabricConfig{ID: 1, Resolve: func(NodeID) (string, error) { return addr, nil }})
	if err != nil {
		pb.Close()
		b.Fatal(err)
	}
	p := &fabricBenchPair{backendPair: &backendPair{}, a: pa, b: pb}
	p.send = &benchSender{buf: make([]byte, benchBlock), fail: make(chan error, 1)}
	p.recv = &benchReceiver{done: make(chan struct{}, 1)}
	for range benchWindow {
		p.recv.bufs = append(p.recv.bufs, make([]byte, benchBlock))
	}
	ctx := context.Background()
	if p.send.qp, err = pa.Open(ctx, 2, 1, p.send); err != nil {
		b.Fatal(err)
	}
	if p.recv.qp, err = pb.Open(ctx, 1, 1, p.recv); err != nil {
		b.Fatal(err)
	}
	return p
}

func (p *fabricBenchPair) close() {
	p.a.Close()
	p.b.Close()
}
