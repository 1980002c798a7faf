package paxos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/wire"
)

// Bounds of one stream (package wire). The requests a stream serves are
// admitted like the HTTP API's (Options.MaxRequests and MaxRequestBytes:
// each takes its place before its frame is read); what a stream holds
// beyond them is its answers: a buffer being filled, up to
// streamMaxBuffered bytes and one answer more, and the one being written,
// each of a capacity at most twice that.
const (
	// streamMaxInFlight bounds the workers of one stream, each serving a
	// request or a batch of writes: beyond it the stream reads no more
	// until one is answered, and TCP holds the client back.
	streamMaxInFlight = 1024
	// streamMaxBuffered bounds the answers waiting to be written: beyond
	// it the requests that finish wait for the writer. A write's answer
	// takes 31 bytes: thousands fit, for one system call.
	streamMaxBuffered = 256 << 10
	// streamWriteTimeout bounds one write to the client: a client that
	// stops reading loses its stream.
	streamWriteTimeout = 30 * time.Second
	// streamWorkerIdle is how long a stream's worker waits for another
	// request before it ends.
	streamWorkerIdle = time.Second
	// streamKeptWorkers bounds the workers of a stream that wait for
	// another request: beyond it, a worker ends once it answered.
	streamKeptWorkers = 32
	// streamMaxBatch bounds the writes one worker sends as one message
	// (see stream.next), and streamBatchBytes their frames' bytes: a
	// batch stays within the group's path for small messages, which
	// carries messages up to 4 KiB (multicast.DefaultSmallThreshold).
	streamMaxBatch   = 64
	streamBatchBytes = 3 << 10
)

// handleStream upgrades the connection to a stream of binary requests
// (package wire) and serves it until either side closes it.
func (n *Node) handleStream(w http.ResponseWriter, r *http.Request) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", wire.Protocol) {
		w.Header().Set("Upgrade", wire.Protocol)
		w.Header().Set("Connection", "Upgrade")
		writeError(w, http.StatusUpgradeRequired, "this endpoint upgrades to "+wire.Protocol)
		return
	}
	select {
	case n.streamSlots <- struct{}{}:
	default:
		n.admit.Refuse(streamsFull)
		n.refuse(w)
		return
	}
	defer func() { <-n.streamSlots }()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "cannot take over the connection: "+err.Error())
		return
	}
	s := n.newStream(conn)
	if !n.addStream(s) {
		conn.Close()
		return
	}
	defer n.removeStream(s)
	// The server's deadlines were for the HTTP request.
	_ = conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.Protocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return
	}
	s.serve(brw.Reader)
}

// headerHasToken reports whether the comma-separated header name holds
// token (case-insensitively).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// addStream registers s, to be closed by Close; it returns false once the
// node is closing.
func (n *Node) addStream(s *stream) bool {
	n.streams.Lock()
	defer n.streams.Unlock()
	if n.streams.closed {
		return false
	}
	if n.streams.m == nil {
		n.streams.m = make(map[*stream]struct{})
	}
	n.streams.m[s] = struct{}{}
	n.wg.Add(1)
	n.admit.AddStreams(1)
	return true
}

func (n *Node) removeStream(s *stream) {
	n.streams.Lock()
	delete(n.streams.m, s)
	n.streams.Unlock()
	n.admit.AddStreams(-1)
	n.wg.Done()
}

// closeStreams closes every stream and refuses new ones.
func (n *Node) closeStreams() {
	n.streams.Lock()
	defer n.streams.Unlock()
	n.streams.closed = true
	for s := range n.streams.m {
		s.conn.Close()
	}
}

// stream is one upgraded connection: a reader that decodes requests and
// hands each to a worker (at most streamMaxInFlight at once), and a
// writer that sends the answers in batches, as they come. Writes whose
// frames arrived together go to one worker, which sends them to the group
// as one message (a batch of commands): at saturation a client's
// connection carries many at once, and each message costs the group the
// same whatever it holds.
//
// A worker serves requests one after the other until none came for
// streamWorkerIdle (or, once it answered, if the stream has more than
// streamKeptWorkers): a goroutine per request would grow its stack anew
// for each (a write goes deep, into the group's Send), copying it each
// time.
type stream struct {
	n    *Node
	conn net.Conn
	// sem holds a token per worker.
	sem chan struct{}
	// work hands a request to an idle worker; serve closes it once the
	// reader ends.
	work chan streamJob
	// serving counts the requests handed to workers and not yet served.
	serving atomic.Int64
	// wake tells the writer answers are waiting.
	wake chan struct{}

	mu sync.Mutex
	// space is signalled when the writer takes buf.
	space sync.Cond
	// buf holds encoded answers waiting for the writer; spare is the
	// writer's previous buffer, for reuse.
	buf, spare []byte
	// ended is set once the stream ends: answers are dropped.
	ended bool
}

// newStream returns the stream of connection conn.
func (n *Node) newStream(conn net.Conn) *stream {
	s := &stream{n: n, conn: conn, wake: make(chan struct{}, 1), sem: make(chan struct{}, streamMaxInFlight), work: make(chan streamJob)}
	s.space.L = &s.mu
	return s
}

// serve reads requests until the connection fails or closes, then waits
// for the requests in flight and the writer.
func (s *stream) serve(br *bufio.Reader) {
	ctx, cancel := context.WithCancel(s.n.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.write(ctx)
	}()
	limit := s.n.opts.streamFrameLimit()
	for s.next(ctx, br, limit, &wg) {
	}
	s.conn.Close()
	close(s.work)
	cancel()
	s.mu.Lock()
	s.ended = true
	s.space.Broadcast()
	s.mu.Unlock()
	wg.Wait()
}

// next reads the next request, or the next writes that arrived together
// (see gatherWrites), and hands them to a worker (wg counts the workers),
// or answers a request at once: 413 above limit bytes, 400 if malformed,
// 503 if the member stayed at capacity (see read). It returns false once
// the stream must end.
func (s *stream) next(ctx context.Context, br *bufio.Reader, limit int, wg *sync.WaitGroup) bool {
	req, charge, r := s.read(ctx, br, limit, true)
	if r != readQueued {
		return r != readEnd
	}
	j := streamJob{reqs: []wire.Request{req}, charges: []int{charge}}
	more := true
	if isWrite(req.Op) {
		more = s.gatherWrites(ctx, br, limit, &j)
	}
	s.serving.Add(int64(len(j.reqs)))
	select {
	case s.work <- j:
		return more
	default:
	}
	select {
	case s.work <- j:
	case s.sem <- struct{}{}:
		wg.Go(func() { s.worker(ctx, j) })
	case <-ctx.Done():
		s.serving.Add(-int64(len(j.reqs)))
		for _, c := range j.charges {
			s.release(c)
		}
		return false
	}
	return more
}

// gatherWrites adds to j, which holds a write, the writes that follow it
// whose frames the reader holds whole already and that have places at
// once, up to streamMaxBatch requests and streamBatchBytes of frames. It
// returns false once the stream must end.
func (s *stream) gatherWrites(ctx context.Context, br *bufio.Reader, limit int, j *streamJob) bool {
	bytes := wire.RequestBytes(&j.reqs[0])
	for len(j.reqs) < streamMaxBatch {
		// Peek waits for bytes the reader lacks: only those it holds.
		if br.Buffered() < 4+8+1 {
			return true
		}
		head, err := br.Peek(4 + 8 + 1)
		if err != nil {
			return true
		}
		size := 4 + int(binary.BigEndian.Uint32(head))
		if size > br.Buffered() || bytes+size > streamBatchBytes || !isWrite(wire.Op(head[4+8])) {
			return true
		}
		req, charge, r := s.read(ctx, br, limit, false)
		switch r {
		case readEnd:
			return false
		case readLeft:
			// No place at once: j goes without it, and the next read
			// waits for one.
			return true
		case readQueued:
			j.reqs = append(j.reqs, req)
			j.charges = append(j.charges, charge)
			bytes += size
		}
	}
	return true
}

// isWrite reports whether op changes the state: a write, which goes to
// the group.
func isWrite(op wire.Op) bool {
	return op == wire.OpPut || op == wire.OpDelete || op == wire.OpCAS
}

// readResult is what became of the request read tried to read.
type readResult int

const (
	// readQueued: read returned the request, admitted, to be served.
	readQueued readResult = iota
	// readAnswered: read answered it at once (413, 400 or 503).
	readAnswered
	// readLeft: read left it unread, as the member had no place for it
	// at once and read was not to wait.
	readLeft
	// readEnd: the stream must end.
	readEnd
)

// read reads the next request. It answers one above limit bytes (413) or
// malformed (400) at once. A request the member has no place for
// (Options.MaxRequests and MaxRequestBytes) waits for one, with wait, up
// to Options.RetryAfter and after the requests of every stream that
// waited before it, while the stream reads nothing more and TCP holds the
// client back; if none frees, it is answered 503 with that RetryAfter.
// Without wait it is left unread. It returns a request it queues with its
// admission charge.
func (s *stream) read(ctx context.Context, br *bufio.Reader, limit int, wait bool) (req wire.Request, charge int, r readResult) {
	// The frame's length, tag and op come first: the request takes its
	// place (or is refused) before its frame is read.
	head, err := br.Peek(4)
	if err != nil {
		return req, 0, readEnd
	}
	size := int(binary.BigEndian.Uint32(head))
	if size > limit {
		return req, 0, answered(s.skip(br, size, wire.Response{Status: http.StatusRequestEntityTooLarge, Body: fmt.Appendf(nil, "request of %d bytes, limit %d", size, limit)}))
	}
	// A frame shorter than the smallest request (a tag, an op, flags and
	// empty fields) is read and answered below, without a place: it holds
	// less than a request's fixed fields.
	if size >= wire.RequestBytes(&wire.Request{})-4 {
		// The length, the tag, the op.
		if head, err = br.Peek(4 + 8 + 1); err != nil {
			return req, 0, readEnd
		}
		// A read holds its frame; a write its frame and its command.
		charge = size
		if op := wire.Op(head[4+8]); op != wire.OpGet && op != wire.OpGetStale {
			charge = 2 * size
		}
		if !s.n.admit.TryAdmit(charge) {
			if !wait {
				return req, 0, readLeft
			}
			if !s.waitAdmit(ctx, charge) {
				return req, 0, answered(s.skip(br, size, wire.Response{Status: http.StatusServiceUnavailable, Body: []byte(errAtCapacity.Error()), RetryAfter: s.n.opts.RetryAfter}))
			}
		}
	}
	frame, _, err := wire.ReadFrame(br, limit, nil)
	if err != nil {
		s.release(charge)
		return req, 0, readEnd
	}
	req, err = wire.DecodeRequest(frame)
	if err != nil {
		s.release(charge)
		t, ok := wire.Tag(frame)
		if !ok {
			return req, 0, readEnd // nothing to answer: the client is not speaking the protocol
		}
		s.respond(wire.Response{Tag: t, Status: http.StatusBadRequest, Body: []byte(err.Error())})
		return req, 0, readAnswered
	}
	return req, charge, readQueued
}

// answered is read's result for a request it answered at once: ok is
// whether the stream goes on.
func answered(ok bool) readResult {
	if ok {
		return readAnswered
	}
	return readEnd
}

// waitAdmit waits up to Options.RetryAfter, or until ctx ends, for a
// place for a request of charge, and reports whether it got one (a
// refusal is counted if not).
func (s *stream) waitAdmit(ctx context.Context, charge int) bool {
	ctx, cancel := context.WithTimeout(ctx, s.n.opts.RetryAfter)
	defer cancel()
	return s.n.admit.Wait(ctx, charge, streamCapacity)
}

// release gives back a request's admission charge (none if zero: the
// frame was too short to be a request).
func (s *stream) release(charge int) {
	if charge > 0 {
		s.n.admit.Release(charge)
	}
}

// streamJob is a request for a worker, or writes it sends as one
// message, and the admission charge each releases once served.
type streamJob struct {
	reqs    []wire.Request
	charges []int
}

// worker serves j, then the jobs handed to it, until none came for
// streamWorkerIdle, the stream has more than streamKeptWorkers workers,
// or the reader ended.
func (s *stream) worker(ctx context.Context, j streamJob) {
	defer func() { <-s.sem }()
	idle := time.NewTimer(streamWorkerIdle)
	defer idle.Stop()
	for {
		s.serveJob(ctx, j)
		if len(s.sem) > streamKeptWorkers {
			return
		}
		idle.Reset(streamWorkerIdle)
		var ok bool
		select {
		case j, ok = <-s.work:
			if !ok {
				return
			}
		case <-idle.C:
			return
		}
	}
}

// serveJob serves job j and answers each of its requests.
func (s *stream) serveJob(ctx context.Context, j streamJob) {
	answer := func(i int, resp wire.Response) {
		s.release(j.charges[i])
		s.serving.Add(-1)
		s.respond(resp)
	}
	if len(j.reqs) == 1 {
		answer(0, s.n.serveRequest(ctx, j.reqs[0]))
		return
	}
	s.n.serveWrites(ctx, j.reqs, answer)
}

// skip reads past the next frame, of size bytes, and answers it with
// resp (tagged as the frame is, if it is long enough to carry a tag). It
// returns false if the stream must end.
func (s *stream) skip(br *bufio.Reader, size int, resp wire.Response) bool {
	if size < 8 {
		return false
	}
	head, err := br.Peek(4 + 8)
	if err != nil {
		return false
	}
	resp.Tag, _ = wire.Tag(head[4:])
	if _, err := br.Discard(4 + size); err != nil {
		return false
	}
	s.respond(resp)
	return true
}

// respond queues an answer for the writer, waiting while too many bytes
// wait already.
func (s *stream) respond(r wire.Response) {
	s.mu.Lock()
	for len(s.buf) >= streamMaxBuffered && !s.ended {
		s.space.Wait()
	}
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.buf = wire.AppendResponse(s.buf, &r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// write sends the queued answers, everything queued at once, until ctx
// ends or a write fails (which closes the connection, ending serve).
func (s *stream) write(ctx context.Context) {
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			return
		}
		if s.serving.Load() > 0 {
			// Other requests are being served: yield once before taking
			// the answers, so that those the scheduler holds ready to
			// answer add theirs meanwhile, and one write carries them
			// all.
			runtime.Gosched()
		}
		s.mu.Lock()
		out := s.buf
		s.buf, s.spare = s.spare[:0], nil
		s.space.Broadcast()
		s.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		_ = s.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := s.conn.Write(out); err != nil {
			s.conn.Close()
			return
		}
		if cap(out) <= streamMaxBuffered {
			s.mu.Lock()
			s.spare = out[:0]
			s.mu.Unlock()
		}
	}
}

// serveRequest carries out one request of a stream, with the same
// answers as the HTTP API's.
func (n *Node) serveRequest(ctx context.Context, req wire.Request) wire.Response {
	resp := wire.Response{Tag: req.Tag}
	fail := func(code int, msg string) wire.Response {
		resp.Status, resp.Body = uint16(code), []byte(msg)
		return resp
	}
	failErr := func(err error) wire.Response {
		n.logFailure(req.Op.String(), req.Key, err)
		return fail(statusOf(err), err.Error())
	}
	if req.Key == "" {
		return fail(http.StatusBadRequest, "empty key")
	}
	switch req.Op {
	case wire.OpGet, wire.OpGetStale:
		var err error
		if req.Op == wire.OpGetStale {
			err = n.canServe()
		} else {
			_, err = n.barrier(ctx)
		}
		if err != nil {
			return failErr(err)
		}
		value, found, index := n.state.get(req.Key)
		resp.Index = index
		if !found {
			return fail(http.StatusNotFound, "not found")
		}
		resp.Status, resp.Body = http.StatusOK, value
		return resp
	}
	var resp1 wire.Response
	n.serveWrites(ctx, []wire.Request{req}, func(_ int, r wire.Response) { resp1 = r })
	return resp1
}

// serveWrites carries out writes, sending those that are well formed to
// the group as one message, and answers each (answer gets its position
// in reqs), as serveRequest does.
func (n *Node) serveWrites(ctx context.Context, reqs []wire.Request, answer func(int, wire.Response)) {
	cs := make([]command, 0, len(reqs))
	which := make([]int, 0, len(reqs))
	for i, req := range reqs {
		c, resp, ok := n.writeCommand(req)
		if !ok {
			answer(i, resp)
			continue
		}
		cs = append(cs, c)
		which = append(which, i)
	}
	if len(cs) == 0 {
		return
	}
	for k, o := range n.submitBatch(ctx, cs) {
		i := which[k]
		answer(i, n.writeAnswer(reqs[i], cs[k], o))
	}
}

// writeCommand returns the command of write req, or, if it cannot go to
// the group, the answer to it and false.
func (n *Node) writeCommand(req wire.Request) (command, wire.Response, bool) {
	resp := wire.Response{Tag: req.Tag}
	if req.Key == "" {
		resp.Status, resp.Body = http.StatusBadRequest, []byte("empty key")
		return command{}, resp, false
	}
	id := req.ID
	if id == "" {
		id = "server-" + rand.Text()
	}
	issued, err := n.issuedTime(req.Issued)
	if err != nil {
		n.logFailure(req.Op.String(), req.Key, err)
		resp.Status, resp.Body = uint16(statusOf(err)), []byte(err.Error())
		return command{}, resp, false
	}
	c := command{id: id, issued: issued, key: req.Key}
	switch req.Op {
	case wire.OpPut:
		c.op, c.value = opPut, req.Value
	case wire.OpDelete:
		c.op = opDelete
	case wire.OpCAS:
		c.op, c.value, c.hasOld, c.old = opCAS, req.Value, req.HasOld, req.Old
	}
	if len(c.value) > n.opts.MaxValueBytes || len(c.old) > n.opts.MaxValueBytes {
		resp.Status, resp.Body = http.StatusRequestEntityTooLarge, fmt.Appendf(nil, "a value is above %d bytes", n.opts.MaxValueBytes)
		return command{}, resp, false
	}
	return c, resp, true
}

// writeAnswer returns the answer to write req, sent as c, given its
// outcome.
func (n *Node) writeAnswer(req wire.Request, c command, o outcome) wire.Response {
	resp := wire.Response{Tag: req.Tag}
	if o.err != nil {
		n.logFailure(req.Op.String(), req.Key, o.err)
		resp.Status, resp.Body = uint16(statusOf(o.err)), []byte(o.err.Error())
		return resp
	}
	resp.Index = o.res.index
	if c.op == opDelete && !o.res.ok {
		resp.Status, resp.Body = http.StatusNotFound, []byte("not found")
		return resp
	}
	resp.Status, resp.OK = http.StatusOK, c.op == opCAS && o.res.ok
	return resp
}
