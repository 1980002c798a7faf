package rdma

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made up for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for a node, valid for 127.0.0.1 as both
// server and client.
// issue returns a certificate for 127.0.0.1 that names the given nodes
// (MemberURI).
func (ca *testCA) issue(t *testing.T, name string, ids ...NodeID) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	for _, id := range ids {
		tmpl.URIs = append(tmpl.URIs, MemberURI(id))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsConfig returns a configuration that presents cert (if any) and trusts
// ca.
func (ca *testCA) tlsConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: certs,
		RootCAs:      ca.pool,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS13,
	}
}

func TestTCPMutualTLS(t *testing.T) {
	ca := newTestCA(t, "convoy test CA")
	rogueCA := newTestCA(t, "rogue CA")
	errs := make(connErrors, 10)
	mp, rejected := newRejectedReader(t)
	n := newTCPNet(t, TCPConfig{MeterProvider: mp})
	server := n.tcpEndpoint(10, func(c *TCPConfig) {
		c.TLS = ca.tlsConfig(ca.issue(t, "node 10", 10))
		c.OnConnError = errs.hook
	})

	// A peer with a certificate from the right CA gets through.
	good := n.tcpEndpoint(1, func(c *TCPConfig) { c.TLS = ca.tlsConfig(ca.issue(t, "node 1", 1)) })
	pa, pb := openPair(t, good, server, 1)
	transfer(t, pa, pb, []int{0, 100, 1 << 20})
	transfer(t, pb, pa, []int{5})

	// Peers with a certificate from another CA, with none, or with one
	// that does not name the id they claim, do not. They trust the server,
	// so only the client certificate is at fault.
	for _, bad := range []struct {
		id   NodeID
		cfg  *tls.Config
		name string
	}{
		{2, presentAlways(ca.tlsConfig(), rogueCA.issue(t, "node 2", 2)), "untrusted client certificate"},
		{3, ca.tlsConfig(), "no client certificate"},
		// A certificate the CA signed for node 6 cannot pass for node 5.
		{5, ca.tlsConfig(ca.issue(t, "node 6", 6)), "certificate for another id"},
		{7, ca.tlsConfig(ca.issue(t, "no id")), "certificate naming no id"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			ep := n.tcpEndpoint(bad.id, func(c *TCPConfig) { c.TLS = bad.cfg })
			r := newRecorder(t, bad.name)
			_, err := ep.Open(context.Background(), 10, 1, r)
			must(t, err)
			err = r.waitFailed(ErrUnreachable)
			t.Logf("client: %v", err)
			t.Logf("server: %v", errs.wait(t))
		})
	}

	// A peer that speaks plain TCP is refused too.
	plain := n.tcpEndpoint(4, func(*TCPConfig) {})
	r := newRecorder(t, "plain")
	_, err := plain.Open(context.Background(), 10, 1, r)
	must(t, err)
	r.waitFailed(ErrUnreachable)

	// A server whose certificate names another node is refused by the
	// node that dials it.
	n.tcpEndpoint(11, func(c *TCPConfig) { c.TLS = ca.tlsConfig(ca.issue(t, "node 12", 12)) })
	dialer := n.tcpEndpoint(8, func(c *TCPConfig) { c.TLS = ca.tlsConfig(ca.issue(t, "node 8", 8)) })
	r = newRecorder(t, "impostor")
	_, err = dialer.Open(context.Background(), 11, 1, r)
	must(t, err)
	if err := r.waitFailed(ErrUnreachable); !strings.Contains(err.Error(), "not certified") {
		t.Errorf("dialing a server certified for another node: %v", err)
	}

	// The server refused the certificate of another CA and two that name
	// other ids (a client without a certificate is not counted: TLS
	// refuses it before there is any to judge), the dialer the server's.
	rejected.waitCounts(t, map[string]int64{"certificate": 1, "identity": 3})

	// The good connection is unaffected.
	transfer(t, pa, pb, []int{7})
}

// presentAlways makes cfg present cert as client certificate even when it
// is not from a CA the server asks for.
func presentAlways(cfg *tls.Config, cert tls.Certificate) *tls.Config {
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg
}
