package rdma

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
)

const (
	// fillChunk is how much of a transfer the reader copies into a receive
	// buffer between checks that its queue pair is still open.
	fillChunk = 256 << 10
	// readBufLen is the size of a connection's read buffer: the frames
	// that arrived together are taken from the socket in one read, and a
	// small frame's header and payload in one. Past what was buffered,
	// a payload's reads of at least this many bytes go from the socket
	// straight into its receive buffer; shorter ones are copied.
	readBufLen = 64 << 10
)

// connReader reads frames from one connection, through a buffer. Headers
// go into a fixed array and payloads into the posted receive buffers.
type connReader struct {
	c          *tcpConn
	br         *bufio.Reader
	maxPayload int
	hdr        [frameHeaderLen]byte
}

// readLoop is a connection's reader goroutine.
func (c *tcpConn) readLoop(nc net.Conn) {
	defer c.ep.wg.Done()
	r := connReader{c: c, br: bufio.NewReaderSize(nc, readBufLen), maxPayload: c.ep.cfg.maxPayload()}
	err := r.loop()
	c.shutdown(&connError{peer: c.peer, cause: err}, err)
}

// loop reads and dispatches frames until the connection fails, and
// returns why.
func (r *connReader) loop() error {
	c := r.c
	m := c.ep.metrics
	for {
		if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
			return readError(err)
		}
		h, err := decodeFrameHeader(r.hdr[:], r.maxPayload)
		if err != nil {
			// Only its length can be wrong in a data frame's header.
			kind := rejectMalformed
			if h.typ == frameData {
				kind = rejectOversize
			}
			return protocolError(c.peer, h.stream, kind, err.Error())
		}
		m.framesRecv.Add(1)
		m.bytesRecv.Add(int64(frameHeaderLen) + int64(h.length))
		switch h.typ {
		case frameData:
			err = r.data(h)
		case frameSignal:
			err = r.signal(h)
		case frameClose:
			r.closeStream(h)
		}
		if err != nil {
			return err
		}
	}
}

// readError describes a failed read.
func readError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("peer closed the connection")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("peer closed the connection in the middle of a frame")
	}
	return fmt.Errorf("read: %w", err)
}

// data handles a data frame: its payload goes into the oldest receive
// posted on its stream.
func (r *connReader) data(h frameHeader) error {
	c := r.c
	n := int(h.length)
	c.mu.Lock()
	q := c.mu.streams[h.stream]
	known := q != nil || c.mu.recent.has(h.stream)
	c.mu.Unlock()
	if !known {
		return protocolError(c.peer, h.stream, rejectStream, fmt.Sprintf("%d-byte data frame for stream %d, which was never opened", n, h.stream))
	}
	if q == nil {
		c.ep.metrics.add(c.ep.metrics.late, 1)
		return r.discard(n)
	}
	rw, reason, ok := q.takeRecv(n)
	if !ok {
		c.ep.metrics.add(c.ep.metrics.late, 1)
		return r.discard(n) // closed or failed meanwhile
	}
	if reason != "" {
		perr := protocolError(c.peer, h.stream, rejectReceiveBuffer, reason)
		c.ep.metrics.reject(perr.kind)
		c.log.Warn("rdma: bad transfer from peer; failing its queue pair", "err", perr)
		c.failStream(q, perr)
		return r.discard(n)
	}
	q.fillMu.Lock()
	err := r.fill(q, rw.buf[:n])
	q.fillMu.Unlock()
	if err != nil {
		return err
	}
	q.deliver(qpEvent{kind: evRecv, wr: rw.wr, n: n, imm: h.imm})
	return nil
}

// fill reads len(buf) payload bytes into buf, chunk by chunk; if q is
// closed meanwhile, the rest goes to the discard buffer.
// REQUIRES: q.fillMu.
func (r *connReader) fill(q *tcpQP, buf []byte) error {
	for len(buf) > 0 {
		if q.closed.Load() {
			return r.discard(len(buf))
		}
		k := min(len(buf), fillChunk)
		if _, err := io.ReadFull(r.br, buf[:k]); err != nil {
			return readError(err)
		}
		buf = buf[k:]
	}
	return nil
}

// discard reads and drops n payload bytes.
func (r *connReader) discard(n int) error {
	if _, err := r.br.Discard(n); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // in the middle of a frame
		}
		return readError(err)
	}
	return nil
}

// signal handles a signal frame. Signals for a stream not open yet wait
// for Open.
func (r *connReader) signal(h frameHeader) error {
	c := r.c
	c.mu.Lock()
	q := c.mu.streams[h.stream]
	if q == nil {
		var err error
		switch {
		case c.mu.recent.has(h.stream):
			c.ep.metrics.add(c.ep.metrics.late, 1)
		case !c.mu.pending.add(h.stream, h.imm):
			err = protocolError(c.peer, h.stream, rejectStream, fmt.Sprintf("more than %d signals for streams that were never opened", maxPendingSignals))
		}
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	q.deliver(qpEvent{kind: evSignal, imm: h.imm})
	return nil
}

// closeStream handles a close-stream frame: the peer closed its side.
func (r *connReader) closeStream(h frameHeader) {
	c := r.c
	c.mu.Lock()
	q := c.mu.streams[h.stream]
	if q == nil {
		// Signals it sent before closing are stale now.
		c.mu.pending.take(h.stream)
	}
	c.mu.Unlock()
	if q != nil {
		c.failStream(q, peerClosedError(c.peer, h.stream))
	}
}
