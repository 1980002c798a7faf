package rdma

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// tune sets the socket options of a new connection.
func (e *TCPEndpoint) tune(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	// Frames are gathered by the writer; never hold them back.
	_ = tc.SetNoDelay(true)
	if n := e.cfg.UnsentBytes; n > 0 {
		setUnsentLimit(tc, n)
	}
	if n := e.cfg.SocketBufferBytes; n > 0 {
		_ = tc.SetReadBuffer(n)
		_ = tc.SetWriteBuffer(n)
	}
}

// dialPeer connects to peer and runs the handshake. It returns the
// connection and the address it dialed.
func (e *TCPEndpoint) dialPeer(peer NodeID) (net.Conn, string, error) {
	if e.cfg.Resolve == nil {
		return nil, "", errors.New("no Resolve function configured")
	}
	if _, err := e.cfg.Resolve(peer); err != nil {
		return nil, "", fmt.Errorf("resolve: %w", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.DialTimeout)
	defer cancel()
	// The peer's address is resolved again before every attempt: a peer
	// that restarts elsewhere is found as soon as Resolve knows.
	nc, addr, err := dialRetry(ctx, func() (string, error) { return e.cfg.Resolve(peer) })
	if err != nil {
		return nil, "", err
	}
	e.tune(nc)
	nc, err = e.guard(ctx, nc, func(nc net.Conn) (net.Conn, error) {
		return e.clientHandshake(ctx, nc, peer, addr)
	})
	if err != nil {
		return nil, "", fmt.Errorf("handshake with %s: %w", addr, err)
	}
	return nc, addr, nil
}

// guard runs handshake on nc with ctx's deadline, closing nc if ctx ends
// first or the handshake fails. It returns the connection handshake made.
func (e *TCPEndpoint) guard(ctx context.Context, nc net.Conn, handshake func(net.Conn) (net.Conn, error)) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	hc, err := handshake(nc)
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	if err := hc.SetDeadline(time.Time{}); err != nil {
		hc.Close()
		return nil, err
	}
	return hc, nil
}

// clientHandshake runs the dialing side of the handshake: TLS if
// configured, then hellos, checking that the node answering is peer.
func (e *TCPEndpoint) clientHandshake(ctx context.Context, nc net.Conn, peer NodeID, addr string) (net.Conn, error) {
	if e.cfg.TLS != nil {
		cfg := e.cfg.TLS.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		nc = tc
	}
	var b [helloLen]byte
	encodeHello(b[:], e.cfg.ID)
	if _, err := nc.Write(b[:]); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	id, err := decodeHello(b[:])
	if err != nil {
		return nil, protocolError(peer, 0, rejectHandshake, err.Error())
	}
	if id != peer {
		return nil, protocolError(peer, 0, rejectIdentity, fmt.Sprintf("dialed node %d at %s but node %d answered", peer, addr, id))
	}
	if err := e.verifyPeer(nc, id); err != nil {
		return nil, err
	}
	return nc, nil
}

// verifyPeer checks, over TLS, that the certificate of the peer on nc
// entitles it to id (TCPConfig.VerifyPeer).
func (e *TCPEndpoint) verifyPeer(nc net.Conn, id NodeID) error {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return nil
	}
	verify := e.cfg.VerifyPeer
	if verify == nil {
		verify = verifyPeerID
	}
	if err := verify(id, tc.ConnectionState()); err != nil {
		return protocolError(id, 0, rejectIdentity, fmt.Sprintf("node %d is not certified: %v", id, err))
	}
	return nil
}

// handshakeInbound runs the accepting side of the handshake on nc and, if
// it succeeds, installs the connection. It runs on its own goroutine.
func (e *TCPEndpoint) handshakeInbound(nc net.Conn) {
	defer e.wg.Done()
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.DialTimeout)
	defer cancel()
	e.tune(nc)
	remote := nc.RemoteAddr()
	var peer NodeID
	hc, err := e.guard(ctx, nc, func(nc net.Conn) (net.Conn, error) {
		var err error
		nc, peer, err = e.serverHandshake(ctx, nc)
		return nc, err
	})
	if err != nil {
		if e.ctx.Err() == nil {
			e.reportConnError(peer, fmt.Errorf("rdma: refused connection from %v: %w", remote, err))
		}
		return
	}
	e.attachInbound(peer, hc)
}

// serverHandshake runs the accepting side of the handshake: TLS if
// configured, then hellos. Only a node with a lower id may dial this one.
// It returns the peer's id, once known, even on failure.
func (e *TCPEndpoint) serverHandshake(ctx context.Context, nc net.Conn) (net.Conn, NodeID, error) {
	if e.serverTLS != nil {
		tc := tls.Server(nc, e.serverTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, 0, fmt.Errorf("tls handshake: %w", err)
		}
		nc = tc
	}
	var b [helloLen]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return nil, 0, fmt.Errorf("read hello: %w", err)
	}
	id, err := decodeHello(b[:])
	if err != nil {
		return nil, 0, protocolError(0, 0, rejectHandshake, err.Error())
	}
	switch {
	case id == e.cfg.ID:
		return nil, id, protocolError(id, 0, rejectIdentity, fmt.Sprintf("peer claims this node's own id %d", id))
	case id > e.cfg.ID:
		return nil, id, protocolError(id, 0, rejectHandshake, fmt.Sprintf("node %d dialed node %d, but only the node with the lower id dials", id, e.cfg.ID))
	}
	if err := e.verifyPeer(nc, id); err != nil {
		return nil, id, err
	}
	encodeHello(b[:], e.cfg.ID)
	if _, err := nc.Write(b[:]); err != nil {
		return nil, id, fmt.Errorf("send hello: %w", err)
	}
	return nc, id, nil
}

// dialRetry resolves the peer's address and dials it until that succeeds
// or ctx ends: a peer that is just starting (connection refused) gets
// until the dial timeout to listen, and one that moved is dialed at its
// new address once resolve returns it.
func dialRetry(ctx context.Context, resolve func() (string, error)) (net.Conn, string, error) {
	var d net.Dialer
	backoff := 5 * time.Millisecond
	for {
		addr, err := resolve()
		if err == nil {
			var nc net.Conn
			if nc, err = d.DialContext(ctx, "tcp", addr); err == nil {
				return nc, addr, nil
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, addr, err
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
