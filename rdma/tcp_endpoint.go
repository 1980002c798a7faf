package rdma

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// TCPEndpoint is an endpoint of the tcp backend: it emulates the RDMA
// model over one TCP connection per pair of nodes, shared by every queue
// pair between them. Between two nodes the one with the lower id dials; the
// other waits, up to DialTimeout, for the connection.
type TCPEndpoint struct {
	cfg       TCPConfig
	log       *slog.Logger
	ln        net.Listener
	metrics   *endpointMetrics
	serverTLS *tls.Config // nil without TLS

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the endpoint

	mu struct {
		sync.Mutex
		closed bool
		conns  map[NodeID]*tcpConn // the current connection to each peer
	}
}

var _ Endpoint = (*TCPEndpoint)(nil)

// ListenTCP starts a tcp endpoint listening on cfg.ListenAddr.
func ListenTCP(cfg TCPConfig) (*TCPEndpoint, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newEndpointMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		m.close()
		return nil, fmt.Errorf("rdma: node %d: listen: %w", cfg.ID, err)
	}
	e := &TCPEndpoint{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.ID),
		ln:      ln,
		metrics: m,
	}
	if cfg.TLS != nil {
		e.serverTLS = cfg.TLS.Clone()
		if e.serverTLS.ClientAuth == tls.NoClientCert {
			e.serverTLS.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.mu.conns = make(map[NodeID]*tcpConn)
	e.wg.Add(1)
	go e.acceptLoop()
	return e, nil
}

// ID returns this node's id.
func (e *TCPEndpoint) ID() NodeID { return e.cfg.ID }

// Addr returns the address the endpoint listens on.
func (e *TCPEndpoint) Addr() net.Addr { return e.ln.Addr() }

// Open opens the queue pair for stream to peer, making the connection to
// peer if there is none.
func (e *TCPEndpoint) Open(ctx context.Context, peer NodeID, stream StreamID, h Handler) (QueuePair, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("rdma: Open with a nil handler")
	}
	if peer == e.cfg.ID {
		return nil, fmt.Errorf("rdma: node %d cannot open a queue pair to itself", peer)
	}
	q := &tcpQP{maxPayload: e.cfg.maxPayload()}
	q.init(peer, stream, h)
	// A peer that this node dials may have moved (restarted elsewhere)
	// while the connection to where it was stays up: a process left
	// behind there, say, which must not get the new queue pair.
	var addr string
	if e.cfg.ID < peer && e.cfg.Resolve != nil {
		addr, _ = e.cfg.Resolve(peer)
	}

	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("rdma: endpoint %d: %w", e.cfg.ID, ErrClosed)
	}
	var c, stale *tcpConn
	var isNew, mustRun bool
	if old := e.mu.conns[peer]; old != nil && addr != "" && old.dialedElsewhere(addr) {
		stale = old
		delete(e.mu.conns, peer)
	}
	for {
		c = e.mu.conns[peer]
		isNew = c == nil
		if isNew {
			c = newTCPConn(e, peer)
			e.mu.conns[peer] = c
		}
		var err error
		mustRun, err = c.addStream(q)
		if errors.Is(err, errConnBroken) {
			delete(e.mu.conns, peer)
			continue
		}
		if err != nil {
			e.mu.Unlock()
			return nil, err
		}
		break
	}
	dial := isNew && e.cfg.ID < peer
	if dial {
		e.wg.Add(1)
	}
	if mustRun {
		e.wg.Add(1)
	}
	e.mu.Unlock()

	if stale != nil {
		err := &connError{peer: peer, cause: fmt.Errorf("the peer moved to %s", addr)}
		stale.shutdown(err, err)
	}
	if isNew && !dial {
		c.awaitInbound()
	}
	if dial {
		go c.dial()
	}
	if mustRun {
		// Signals that arrived before Open run on their own goroutine, so
		// that no handler call starts before Open returns.
		go func() {
			defer e.wg.Done()
			q.run()
		}()
	}
	return q, nil
}

// Close closes every queue pair and connection of the endpoint, stops
// listening, and waits for the endpoint's goroutines to exit. Queue pairs
// get no Failed call.
func (e *TCPEndpoint) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	e.mu.closed = true
	conns := make([]*tcpConn, 0, len(e.mu.conns))
	for _, c := range e.mu.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()

	e.cancel()
	err := e.ln.Close()
	for _, c := range conns {
		c.shutdown(nil, nil)
	}
	e.wg.Wait()
	e.metrics.close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("rdma: node %d: closing listener: %w", e.cfg.ID, err)
	}
	return nil
}

// track registers a goroutine that is already running (a timer's) with
// the endpoint. It reports false, registering nothing, if the endpoint is
// closed; otherwise the caller must call e.wg.Done when finished.
func (e *TCPEndpoint) track() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return false
	}
	e.wg.Add(1)
	return true
}

// forget removes c from the connection table if it is still there.
func (e *TCPEndpoint) forget(c *tcpConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.conns[c.peer] == c {
		delete(e.mu.conns, c.peer)
	}
}

// reportConnError logs a broken or refused connection and tells the hook.
func (e *TCPEndpoint) reportConnError(peer NodeID, err error) {
	e.metrics.add(e.metrics.connsBroken, 1)
	var perr *ProtocolError
	var cerr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &perr):
		e.metrics.reject(perr.kind)
		e.log.Warn("rdma: closed connection after bad input", "peer", peer, "err", err)
	case errors.As(err, &cerr):
		e.metrics.reject(rejectCertificate)
		e.log.Warn("rdma: refused a peer's certificate", "peer", peer, "err", err)
	default:
		e.log.Info("rdma: connection lost", "peer", peer, "err", err)
	}
	if e.cfg.OnConnError != nil {
		e.cfg.OnConnError(peer, err)
	}
}

// acceptLoop accepts inbound connections until the listener is closed.
func (e *TCPEndpoint) acceptLoop() {
	defer e.wg.Done()
	backoff := time.Duration(0)
	for {
		nc, err := e.ln.Accept()
		if err != nil {
			if e.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: wait and retry.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			e.log.Warn("rdma: accept failed", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-e.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		e.wg.Add(1)
		go e.handshakeInbound(nc)
	}
}

// attachInbound installs nc, an accepted connection from peer that passed
// the handshake, as the connection to peer. A connection to peer that is
// already up is replaced: the peer dials again only after its side of the
// old one broke.
func (e *TCPEndpoint) attachInbound(peer NodeID, nc net.Conn) {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		nc.Close()
		return
	}
	old := e.mu.conns[peer]
	c := old
	for {
		if c == nil {
			c = newTCPConn(e, peer)
			e.mu.conns[peer] = c
		}
		if c.attach(nc) {
			break
		}
		// c was up already, or broke meanwhile.
		if e.mu.conns[peer] == c {
			delete(e.mu.conns, peer)
		}
		c = nil
	}
	e.mu.Unlock()
	if old != nil && old != c {
		err := &connError{peer: peer, cause: errors.New("replaced by a new connection from the peer")}
		old.shutdown(err, err)
	}
}
