package devcerts

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/rdma"
)

// loadCert reads a certificate and its key, checking that they match.
func loadCert(t *testing.T, dir, cert, key string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, cert), filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf
}

func pool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		t.Fatal("ca.crt holds no certificate")
	}
	return p
}

// TestWrite checks every file Write writes: the modes, and that each
// certificate verifies against the CA for its uses, names what it must
// and nothing it must not.
func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := Write(dir, Options{Members: 3, Hosts: []string{"node1.example", "10.0.0.7"}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if filepath.Ext(e.Name()) == ".key" {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", e.Name(), fi.Mode().Perm(), want)
		}
	}
	wantNames := []string{"ca.crt", "ca.key", "client.crt", "client.key", "etcd.crt", "etcd.key",
		"member-1.crt", "member-1.key", "member-2.crt", "member-2.key", "member-3.crt", "member-3.key"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("files %q, want %q", names, wantNames)
	}

	roots := pool(t, dir)
	hosts := []string{"localhost", "127.0.0.1", "::1", "node1.example", "10.0.0.7"}
	for id := uint64(1); id <= 3; id++ {
		c := loadCert(t, dir, MemberCertFile(id), MemberKeyFile(id))
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			for _, h := range hosts {
				if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("member %d as %v for %s: %v", id, usage, h, err)
				}
			}
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example"}); err == nil {
			t.Errorf("member %d's certificate is valid for other.example", id)
		}
		for other := uint64(1); other <= 3; other++ {
			if got := rdma.CertifiesID(c, rdma.NodeID(other)); got != (other == id) {
				t.Errorf("member %d's certificate certifies member %d: %v", id, other, got)
			}
		}
		if len(c.URIs) != 1 || c.URIs[0].String() != "convoy://member/"+strconv.FormatUint(id, 10) {
			t.Errorf("member %d's URIs %v", id, c.URIs)
		}
		if d := time.Until(c.NotAfter); d < DefaultValidity-2*time.Hour || d > DefaultValidity {
			t.Errorf("member %d's certificate expires in %v, want about %v", id, d, DefaultValidity)
		}
	}
	client := loadCert(t, dir, ClientCertFile, ClientKeyFile)
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the client certificate serves")
	}
	if len(client.URIs) != 0 || len(client.DNSNames) != 0 || len(client.IPAddresses) != 0 {
		t.Errorf("the client certificate names %v %v %v", client.URIs, client.DNSNames, client.IPAddresses)
	}
	etcd := loadCert(t, dir, EtcdCertFile, EtcdKeyFile)
	if _, err := etcd.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("etcd certificate: %v", err)
	}
	if len(etcd.URIs) != 0 {
		t.Errorf("the etcd certificate names members %v", etcd.URIs)
	}
}

// TestWriteAgain writes into a directory that holds a CA: the new
// certificates come from the same CA, with new keys and serial numbers.
func TestWriteAgain(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Options{Members: 1}); err != nil {
		t.Fatal(err)
	}
	caBefore, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	before := loadCert(t, dir, MemberCertFile(1), MemberKeyFile(1))
	if err := Write(dir, Options{Members: 2, Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	caAfter, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(caBefore) != string(caAfter) {
		t.Error("the CA changed")
	}
	after := loadCert(t, dir, MemberCertFile(1), MemberKeyFile(1))
	if after.SerialNumber.Cmp(before.SerialNumber) == 0 || after.PublicKey.(*ecdsa.PublicKey).Equal(before.PublicKey) {
		t.Error("member 1's certificate was not renewed")
	}
	if d := time.Until(after.NotAfter); d > time.Hour {
		t.Errorf("renewed for %v, want an hour", d)
	}
	for _, c := range []*x509.Certificate{before, after, loadCert(t, dir, MemberCertFile(2), MemberKeyFile(2))} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool(t, dir)}); err != nil {
			t.Errorf("%s: %v", c.Subject.CommonName, err)
		}
	}

	// Half a CA is refused rather than replaced.
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, Options{Members: 1}); !errors.Is(err, ErrHalfCA) {
		t.Errorf("Write with ca.crt but no ca.key: %v, want ErrHalfCA", err)
	}
	if _, err := LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, MemberCertFile(1))); !errors.Is(err, ErrBadPEM) {
		t.Errorf("LoadCA with a certificate as key: %v, want ErrBadPEM", err)
	}
}

// TestMemberConnection connects two members with the certificates Write
// made, over mutual TLS, as the tcp transport configures it: each
// verifies the other against the CA and finds the other's id named.
func TestMemberConnection(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Options{Members: 2}); err != nil {
		t.Fatal(err)
	}
	roots := pool(t, dir)
	config := func(id uint64) *tls.Config {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, MemberCertFile(id)), filepath.Join(dir, MemberKeyFile(id)))
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{
			MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair},
			RootCAs: roots, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert,
		}
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", config(2))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverSaw := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serverSaw <- err
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			serverSaw <- err
			return
		}
		if peer := tc.ConnectionState().PeerCertificates[0]; !rdma.CertifiesID(peer, 1) {
			serverSaw <- errors.New("the client's certificate does not name member 1")
			return
		}
		_, err = c.Write([]byte{1})
		serverSaw <- err
	}()
	cfg := config(1)
	cfg.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if peer := c.ConnectionState().PeerCertificates[0]; !rdma.CertifiesID(peer, 2) {
		t.Error("the server's certificate does not name member 2")
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-serverSaw; err != nil {
		t.Fatal(err)
	}
}
