package rdma

import (
	"bufio"
	"io"
	"net"
)

const (
	// maxBatchBytes bounds the payload bytes gathered into one vectored
	// write, so that send completions flow back while big sends stream.
	maxBatchBytes = 4 << 20
	// maxBatchFrames bounds the frames gathered into one vectored write.
	maxBatchFrames = 512
	// tlsWriteBuffer is the buffer that gathers small frames into TLS
	// records when the connection is encrypted.
	tlsWriteBuffer = 64 << 10
)

// connWriter writes the frames queued on one connection. Its buffers are
// reused from batch to batch, so that steady-state writing does not
// allocate.
type connWriter struct {
	c     *tcpConn
	w     io.Writer
	flush func() error // nil when w writes straight to the socket
	batch []outFrame
	hdrs  []byte      // header arena: frameHeaderLen bytes per frame of batch
	iov   [][]byte    // headers and payloads of batch, in order
	bufs  net.Buffers // handed to WriteTo, which consumes it
}

// writeLoop is a connection's writer goroutine.
func (c *tcpConn) writeLoop(nc net.Conn) {
	defer c.ep.wg.Done()
	w := connWriter{c: c, w: nc}
	if _, ok := nc.(*net.TCPConn); !ok {
		// net.Buffers writes vectors only to a raw socket; elsewhere (TLS)
		// gather frames in a buffer instead of one record per slice.
		bw := bufio.NewWriterSize(nc, tlsWriteBuffer)
		w.w, w.flush = bw, bw.Flush
	}
	if err := w.loop(); err != nil {
		c.shutdown(&connError{peer: c.peer, cause: err}, err)
	}
}

// loop writes batches of frames until the connection breaks. It returns a
// write error, or nil if the connection broke elsewhere.
func (w *connWriter) loop() error {
	c := w.c
	m := c.ep.metrics
	for {
		if !w.take() {
			return nil
		}
		w.iov = w.iov[:0]
		if need := len(w.batch) * frameHeaderLen; cap(w.hdrs) < need {
			w.hdrs = make([]byte, need, 2*need)
		}
		var total int64
		for i := range w.batch {
			fr := &w.batch[i]
			h := w.hdrs[i*frameHeaderLen : (i+1)*frameHeaderLen]
			encodeFrameHeader(h, fr.hdr)
			w.iov = append(w.iov, h)
			if len(fr.payload) > 0 {
				w.iov = append(w.iov, fr.payload)
			}
			total += int64(frameHeaderLen + len(fr.payload))
		}
		w.bufs = w.iov
		_, err := w.bufs.WriteTo(w.w)
		if err == nil && w.flush != nil {
			err = w.flush()
		}
		clear(w.iov)
		if err != nil {
			return err
		}
		m.framesSent.Add(int64(len(w.batch)))
		m.bytesSent.Add(total)
		for i := range w.batch {
			fr := &w.batch[i]
			if fr.hdr.typ == frameData {
				fr.q.deliver(qpEvent{kind: evSend, wr: fr.wr})
			}
		}
		clear(w.batch)
		w.batch = w.batch[:0]
	}
}

// take waits for queued frames and moves a batch of them into w.batch. It
// returns false when the connection broke.
func (w *connWriter) take() bool {
	c := w.c
	c.mu.Lock()
	for c.mu.out.len() == 0 && c.mu.state == connUp {
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-c.done:
			return false
		}
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	if c.mu.state != connUp {
		return false
	}
	size := 0
	for c.mu.out.len() > 0 && len(w.batch) < maxBatchFrames && (len(w.batch) == 0 || size < maxBatchBytes) {
		fr, _ := c.mu.out.pop()
		w.batch = append(w.batch, fr)
		size += len(fr.payload)
	}
	return true
}
