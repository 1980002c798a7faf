package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tlsFiles is a certificate and its key, and a bundle of CA
// certificates, read from PEM files (the certificate or the bundle may
// be absent), and read again by reload once they change. The TLS
// configurations made from it take the certificate and the bundle
// current at each handshake: a node takes up new files without a
// restart, for the connections it makes or accepts from then on.
type tlsFiles struct {
	// what names the files' use in logs and errors ("member TLS").
	what                      string
	certFile, keyFile, caFile string
	log                       *slog.Logger

	// cur holds the files last read whole and good.
	cur atomic.Pointer[tlsMaterial]

	mu sync.Mutex // serializes reload
	// tried is the digest of the files' contents as reload last read
	// them, good or bad, so that a bad set is reported once, not at
	// every look. REQUIRES: mu.
	tried [sha256.Size]byte
}

// tlsMaterial is what a tlsFiles read.
type tlsMaterial struct {
	cert *tls.Certificate // nil without a certificate file
	pool *x509.CertPool   // nil without a CA file
}

// errNoCert is the error of a handshake that needs a certificate from
// files that hold none.
var errNoCert = errors.New("no certificate configured")

// openTLSFiles reads the files: certFile and keyFile (both or neither)
// and caFile (or none).
func openTLSFiles(what, certFile, keyFile, caFile string, log *slog.Logger) (*tlsFiles, error) {
	f := &tlsFiles{what: what, certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	m, digest, err := f.read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	f.cur.Store(m)
	f.tried = digest
	return f, nil
}

// read reads the files and returns what they hold and the digest of
// their contents. The digest changes whenever a file's contents do, or
// whether it can be read at all.
func (f *tlsFiles) read() (*tlsMaterial, [sha256.Size]byte, error) {
	h := sha256.New()
	var contents [3][]byte
	var readErr error
	for i, path := range []string{f.certFile, f.keyFile, f.caFile} {
		if path == "" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			readErr = errors.Join(readErr, err)
			data = []byte(err.Error())
		}
		contents[i] = data
		fmt.Fprintf(h, "%d:%d:", i, len(data))
		h.Write(data)
	}
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	if readErr != nil {
		return nil, digest, readErr
	}
	m := &tlsMaterial{}
	if f.certFile != "" {
		cert, err := tls.X509KeyPair(contents[0], contents[1])
		if err != nil {
			return nil, digest, fmt.Errorf("certificate %s and key %s: %w", f.certFile, f.keyFile, err)
		}
		m.cert = &cert
	}
	if f.caFile != "" {
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(contents[2]) {
			return nil, digest, fmt.Errorf("%s holds no PEM certificate", f.caFile)
		}
	}
	return m, digest, nil
}

// reload reads the files again if their contents changed since the last
// look, and takes them up if they are good. It logs what it took up; if
// they are bad, it keeps the files in use and logs why, once for each
// new set of contents. It reports whether it took up new files.
func (f *tlsFiles) reload() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, digest, err := f.read()
	if digest == f.tried {
		return false
	}
	f.tried = digest
	if err != nil {
		f.log.Warn(f.what+": the files changed but cannot be used; keeping those in use", "err", err)
		return false
	}
	f.cur.Store(m)
	attrs := []any{"cert", f.certFile, "ca", f.caFile}
	if m.cert != nil && m.cert.Leaf != nil {
		attrs = append(attrs, "serial", m.cert.Leaf.SerialNumber.String(), "not_after", m.cert.Leaf.NotAfter)
	}
	f.log.Info(f.what+": read the files again", attrs...)
	return true
}

// certificate returns the certificate in use.
func (f *tlsFiles) certificate() (*tls.Certificate, error) {
	if c := f.cur.Load().cert; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%s: %w", f.what, errNoCert)
}

// roots returns the CA bundle in use, nil without one.
func (f *tlsFiles) roots() *x509.CertPool { return f.cur.Load().pool }

// memberConfig returns the configuration of mutual TLS between members
// (convoy.Config.TLS): both sides present the certificate in use, and
// verify the peer's against the CA bundle in use, at every handshake.
// The accepting side gets that through GetConfigForClient; the dialing
// side, which no hook gives a RootCAs of the moment, verifies the
// server in VerifyConnection (verifyMember). Either way the transport
// then checks that the peer's certificate names the member id it claims
// (rdma.TCPConfig.VerifyPeer): that id, not a host name, is what
// identifies a member. Session tickets are off, so that every
// connection is verified against the bundle of its time.
func (f *tlsFiles) memberConfig() *tls.Config {
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.certificate() }
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetCertificate:       getCert,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return f.certificate() },
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:             tls.VersionTLS13,
				GetCertificate:         getCert,
				ClientCAs:              f.roots(),
				ClientAuth:             tls.RequireAndVerifyClientCert,
				SessionTicketsDisabled: true,
			}, nil
		},
		// Verified by VerifyConnection instead, against the bundle in use.
		InsecureSkipVerify:     true,
		VerifyConnection:       verifyMember(f.roots),
		SessionTicketsDisabled: true,
	}
}

// serverConfig returns the configuration of the HTTP API's TLS: the
// certificate in use at every handshake, over HTTP/1.1 only, since a
// stream upgrade (examples/paxos) takes over its connection, which
// HTTP/2 does not allow.
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.certificate() },
		NextProtos:     []string{"http/1.1"},
	}
}

// peersTransport returns the transport of a client of the members' HTTP
// APIs that verifies their certificates against the CA bundle roots
// returns at each connection, and their host names, as crypto/tls does
// with RootCAs.
func peersTransport(roots func() *x509.CertPool) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			d := tls.Dialer{Config: &tls.Config{
				MinVersion: tls.VersionTLS12,
				RootCAs:    roots(),
				ServerName: host,
				NextProtos: []string{"http/1.1"},
			}}
			return d.DialContext(ctx, network, addr)
		},
	}
}

// verifyMember returns the tls.Config.VerifyConnection of a member that
// dials another: the other's chain must lead to one of the CAs of the
// bundle roots returns at the time, and its certificate may serve; if
// the dialer sent the name of the host it dialed (SNI, which crypto/tls
// sends for a DNS name, never for an IP address), the certificate must
// be valid for it too. Which member answered, the transport checks
// next (see memberConfig).
func verifyMember(roots func() *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server presented no certificate")
		}
		opts := x509.VerifyOptions{
			Roots:         roots(),
			DNSName:       cs.ServerName,
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("tls: the server's certificate: %w", err)
		}
		return nil
	}
}

// watchTLSFiles reloads files every interval (never, if 0) and whenever
// hup receives, until ctx ends.
func watchTLSFiles(ctx context.Context, interval time.Duration, hup <-chan os.Signal, files []*tlsFiles) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-hup:
		}
		for _, f := range files {
			f.reload()
		}
	}
}
