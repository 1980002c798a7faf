package rdma

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

const (
	benchBlock  = 1 << 20 // bytes per transfer
	benchBlocks = 64      // transfers per iteration: 64 MiB
	benchWindow = 8       // receives posted ahead, and sends in flight
	benchBytes  = benchBlock * benchBlocks
)

// BenchmarkTCPThroughput measures, in the same run, (a) raw loopback TCP:
// io.CopyBuffer of benchBytes from one connection to another with 1 MiB
// buffers, and (b) the tcp backend moving the same bytes as 1 MiB
// transfers, the receiver keeping benchWindow receives posted (and saying
// so with a signal per buffer) and the sender up to benchWindow sends in
// flight. It reports both rates and their ratio.
func BenchmarkTCPThroughput(b *testing.B) {
	raw := newRawPair(b)
	defer raw.close()
	be := newBackendPair(b)
	defer be.close()

	// Warm up both paths once.
	raw.run(b)
	be.run(b)

	var rawTime, beTime time.Duration
	b.SetBytes(2 * benchBytes) // MB/s counts both transfers
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		raw.run(b)
		rawTime += time.Since(start)
		start = time.Now()
		be.run(b)
		beTime += time.Since(start)
	}
	b.StopTimer()
	n := float64(b.N) * benchBytes / 1e6
	rawRate := n / rawTime.Seconds()
	beRate := n / beTime.Seconds()
	b.ReportMetric(rawRate, "raw-MB/s")
	b.ReportMetric(beRate, "backend-MB/s")
	b.ReportMetric(beRate/rawRate, "ratio")
}

// rawPair is a loopback TCP connection used with plain io.CopyBuffer.
type rawPair struct {
	src, dst net.Conn
	sbuf     []byte
	rbuf     []byte
}

func newRawPair(b *testing.B) *rawPair {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	src, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	dst := <-accepted
	if dst == nil {
		b.Fatal("accept failed")
	}
	return &rawPair{src: src, dst: dst, sbuf: make([]byte, benchBlock), rbuf: make([]byte, benchBlock)}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// The wrappers hide ReadFrom/WriteTo so that io.CopyBuffer uses the 1 MiB
// buffer instead of a smaller internal one.
type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

func (p *rawPair) run(b *testing.B) {
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(writerOnly{io.Discard}, readerOnly{io.LimitReader(p.dst, benchBytes)}, p.rbuf)
		done <- err
	}()
	if _, err := io.CopyBuffer(writerOnly{p.src}, readerOnly{io.LimitReader(zeros{}, benchBytes)}, p.sbuf); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func (p *rawPair) close() {
	p.src.Close()
	p.dst.Close()
}

// backendPair is a queue pair between two tcp endpoints.
type backendPair struct {
	a, b *TCPEndpoint
	send *benchSender
	recv *benchReceiver
}

func newBackendPair(b *testing.B) *backendPair {
	pb, err := ListenTCP(TCPConfig{ID: 2})
	if err != nil {
		b.Fatal(err)
	}
	addr := pb.Addr().String()
	pa, err := ListenTCP(TCPConfig{ID: 1, Resolve: func(NodeID) (string, error) { return addr, nil }})
	if err != nil {
		pb.Close()
		b.Fatal(err)
	}
	p := &backendPair{a: pa, b: pb}
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

func (p *backendPair) run(b *testing.B) {
	p.send.left = benchBlocks
	p.recv.left = benchBlocks
	for i, buf := range p.recv.bufs {
		if err := p.recv.qp.PostRecv(buf, uint64(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.recv.qp.Signal(benchWindow); err != nil {
		b.Fatal(err)
	}
	select {
	case <-p.recv.done:
	case err := <-p.send.fail:
		b.Fatal(err)
	}
}

func (p *backendPair) close() {
	p.a.Close()
	p.b.Close()
}

// benchSender sends while it has credit from the receiver and fewer than
// benchWindow sends in flight. Its handler calls are serialized, so it
// needs no lock.
type benchSender struct {
	qp       QueuePair
	buf      []byte
	credit   int
	inflight int
	left     int        // transfers still to start
	fail     chan error // gets the error if the queue pair fails
}

func (s *benchSender) pump() {
	for s.credit > 0 && s.inflight < benchWindow && s.left > 0 {
		if err := s.qp.PostSend(s.buf, 0, 0); err != nil {
			return
		}
		s.credit--
		s.inflight++
		s.left--
	}
}

func (s *benchSender) RecvComplete(uint64, int, uint64) {}
func (s *benchSender) SendComplete(uint64)              { s.inflight--; s.pump() }
func (s *benchSender) Signal(imm uint64)                { s.credit += int(imm); s.pump() }
func (s *benchSender) Failed(err error)                 { s.fail <- err }

// benchReceiver reposts each buffer as soon as it is filled and grants one
// credit per repost.
type benchReceiver struct {
	qp   QueuePair
	bufs [][]byte
	left int
	done chan struct{}
}

func (r *benchReceiver) RecvComplete(wr uint64, n int, imm uint64) {
	r.left--
	if r.left == 0 {
		r.done <- struct{}{}
		return
	}
	if r.left >= benchWindow {
		r.qp.PostRecv(r.bufs[wr], wr)
		r.qp.Signal(1)
	}
}
func (r *benchReceiver) SendComplete(uint64) {}
func (r *benchReceiver) Signal(uint64)       {}
func (r *benchReceiver) Failed(error)        {}
