package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convoy-gcs/convoy/internal/devcerts"
	"github.com/convoy-gcs/convoy/rdma"
)

// TestCerts runs "convoy certs": the member certificates it writes
// verify against its CA, name their member and the hosts given, and
// their keys are for their owner only. (TestNodeMutualTLS runs members
// with them.)
func TestCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, out, errOut := runCommand(t, &cli{}, "certs", "-out", dir, "-members", "2", "-hosts", "db.example, 10.1.2.3")
	if code != 0 || !strings.Contains(out, "2 member certificates") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	pool, err := loadCertPool(filepath.Join(dir, devcerts.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		keyFile := filepath.Join(dir, devcerts.MemberKeyFile(id))
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, devcerts.MemberCertFile(id)), keyFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"localhost", "127.0.0.1", "::1", "db.example", "10.1.2.3"} {
			_, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
			if err != nil {
				t.Errorf("member %d for %s: %v", id, host, err)
			}
		}
		if !rdma.CertifiesID(pair.Leaf, rdma.NodeID(id)) || rdma.CertifiesID(pair.Leaf, rdma.NodeID(3-id)) {
			t.Errorf("member %d's certificate names %v", id, pair.Leaf.URIs)
		}
		if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", keyFile, fi.Mode(), err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, devcerts.ClientCertFile)); err != nil {
		t.Error(err)
	}
}

func TestCertsUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-members", "1"}, "-out is required"},
		{[]string{"-out", "d"}, "-members must be positive"},
		{[]string{"-out", "d", "-members", "1", "-valid", "0s"}, "-valid must be positive"},
		{[]string{"-out", "d", "-members", "1", "x"}, "unexpected arguments"},
	} {
		args := append([]string{"certs"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", args, code, errOut, tc.want)
		}
	}
}
