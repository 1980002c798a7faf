package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/devcerts"
	"github.com/convoy-gcs/convoy/rdma"
)

// memberFiles are one member's certificate, key and CA bundle files.
type memberFiles struct {
	id                  uint64
	cert, key, caBundle string
}

// newMemberFiles writes member id's certificate from ca into dir, with a
// CA bundle holding the certificates of cas.
func newMemberFiles(t *testing.T, dir string, id uint64, ca *devcerts.CA, cas ...*devcerts.CA) memberFiles {
	t.Helper()
	m := memberFiles{
		id:       id,
		cert:     filepath.Join(dir, fmt.Sprintf("m%d.crt", id)),
		key:      filepath.Join(dir, fmt.Sprintf("m%d.key", id)),
		caBundle: filepath.Join(dir, fmt.Sprintf("m%d-ca.crt", id)),
	}
	m.issue(t, ca)
	m.trust(t, cas...)
	return m
}

// issue writes a new certificate for the member from ca, and returns its
// serial number.
func (m memberFiles) issue(t *testing.T, ca *devcerts.CA) *big.Int {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(devcerts.Leaf{
		Name: fmt.Sprintf("member %d", m.id), Members: []uint64{m.id}, Hosts: []string{"127.0.0.1"},
		Server: true, Client: true, Validity: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, map[string][]byte{m.key: keyPEM, m.cert: certPEM})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf.SerialNumber
}

// trust writes the member's CA bundle: the certificates of cas.
func (m memberFiles) trust(t *testing.T, cas ...*devcerts.CA) {
	t.Helper()
	var bundle []byte
	for _, ca := range cas {
		bundle = append(bundle, ca.CertPEM()...)
	}
	writeFiles(t, map[string][]byte{m.caBundle: bundle})
}

// open reads the member's files as "convoy node" does.
func (m memberFiles) open(t *testing.T, log *slog.Logger) *tlsFiles {
	t.Helper()
	f, err := openTLSFiles("member TLS", m.cert, m.key, m.caBundle, log)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func writeFiles(t *testing.T, files map[string][]byte) {
	t.Helper()
	for path, data := range files {
		if err := devcerts.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func newCA(t *testing.T, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestTLSFilesReload reads a member's files again after they change: a
// new certificate is taken up and logged with its serial number; files
// that cannot be used (a key of another certificate) are logged once
// and the ones in use kept; unchanged files are not taken up again.
func TestTLSFilesReload(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "CA")
	m := newMemberFiles(t, dir, 1, ca, ca)
	var logs safeBuffer
	f := m.open(t, slog.New(slog.NewTextHandler(&logs, nil)))
	serial := func() *big.Int {
		c, err := f.certificate()
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber
	}
	first := serial()
	if f.reload() || serial().Cmp(first) != 0 {
		t.Fatal("unchanged files taken up again")
	}

	second := m.issue(t, ca)
	if !f.reload() || serial().Cmp(second) != 0 {
		t.Fatalf("serial %v after a reload, want the new certificate's %v", serial(), second)
	}
	if !strings.Contains(logs.String(), "member TLS: read the files again") || !strings.Contains(logs.String(), "serial="+second.String()) {
		t.Errorf("the reload is not logged with the new serial:\n%s", logs.String())
	}

	// A key that is not the certificate's: kept, reported once.
	keyPEM, err := os.ReadFile(m.key)
	if err != nil {
		t.Fatal(err)
	}
	m.issue(t, ca)
	writeFiles(t, map[string][]byte{m.key: keyPEM})
	for range 2 {
		if f.reload() || serial().Cmp(second) != 0 {
			t.Fatalf("mismatched files taken up: serial %v, want %v kept", serial(), second)
		}
	}
	if n := strings.Count(logs.String(), "cannot be used; keeping those in use"); n != 1 {
		t.Errorf("bad files reported %d times, want once:\n%s", n, logs.String())
	}
	// A CA bundle that holds no certificate: kept too.
	writeFiles(t, map[string][]byte{m.caBundle: []byte("not PEM")})
	third := m.issue(t, ca)
	if f.reload() {
		t.Fatal("a bad CA bundle taken up")
	}
	m.trust(t, ca)
	if !f.reload() || serial().Cmp(third) != 0 || f.roots() == nil {
		t.Fatalf("good files again: serial %v, want %v", serial(), third)
	}
}

// TestWatchTLSFiles: the watcher reads the files again on a signal and,
// with an interval, on its own.
func TestWatchTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "CA")
	m := newMemberFiles(t, dir, 1, ca, ca)
	f := m.open(t, slog.New(slog.DiscardHandler))
	waitSerial := func(want *big.Int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := f.certificate()
			if err != nil {
				t.Fatal(err)
			}
			if c.Leaf.SerialNumber.Cmp(want) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("serial %v, want %v", c.Leaf.SerialNumber, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { watchTLSFiles(ctx, 0, hup, []*tlsFiles{f}) })
	serial := m.issue(t, ca)
	hup <- os.Interrupt // any signal
	waitSerial(serial)
	cancel()
	wg.Wait()

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	wg.Go(func() { watchTLSFiles(ctx, 10*time.Millisecond, nil, []*tlsFiles{f}) })
	waitSerial(m.issue(t, ca))
	cancel()
	wg.Wait()
}

// peerSerials records, per node, the serial numbers of the certificates
// its peers presented, as its transport's VerifyPeer saw them.
type peerSerials struct {
	mu   sync.Mutex
	seen map[rdma.NodeID][]string // by the node that saw them
}

// verifier returns node self's VerifyPeer: the default check, and a
// record of the peer's serial number.
func (p *peerSerials) verifier(self rdma.NodeID) func(rdma.NodeID, tls.ConnectionState) error {
	return func(id rdma.NodeID, cs tls.ConnectionState) error {
		leaf := cs.PeerCertificates[0]
		p.mu.Lock()
		p.seen[self] = append(p.seen[self], fmt.Sprintf("%d:%s", id, leaf.SerialNumber))
		p.mu.Unlock()
		if !rdma.CertifiesID(leaf, id) {
			return errors.New("not certified")
		}
		return nil
	}
}

func (p *peerSerials) saw(self, peer rdma.NodeID, serial *big.Int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.seen[self] {
		if s == fmt.Sprintf("%d:%s", peer, serial) {
			return true
		}
	}
	return false
}

// signals is an rdma.Handler that passes on the signals and the failure
// of its queue pair.
type signals struct {
	sig    chan uint64
	failed chan error
}

func newSignals() *signals {
	return &signals{sig: make(chan uint64, 16), failed: make(chan error, 1)}
}

func (s *signals) RecvComplete(uint64, int, uint64) {}
func (s *signals) SendComplete(uint64)              {}
func (s *signals) Signal(imm uint64)                { s.sig <- imm }
func (s *signals) Failed(err error)                 { s.failed <- err }

// TestMemberTLSRotation rotates the CA of running transport endpoints,
// configured as "convoy node" configures them, with no restart: the
// members trust the old and new CAs, then one takes a certificate from
// the new CA; the connection already up goes on, and new connections,
// dialed by and to the running endpoints, present and accept the new
// certificates. Then the old CA is dropped from a member's bundle: a
// member still on it is refused.
func TestMemberTLSRotation(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	oldCA, newCA := newCA(t, "old CA"), newCA(t, "new CA")
	serials := &peerSerials{seen: make(map[rdma.NodeID][]string)}
	addrs := sync.Map{}
	endpoint := func(f *tlsFiles, id rdma.NodeID) *rdma.TCPEndpoint {
		t.Helper()
		ep, err := rdma.ListenTCP(rdma.TCPConfig{
			ID: id, TLS: f.memberConfig(), VerifyPeer: serials.verifier(id), DialTimeout: 2 * time.Second,
			Resolve: func(peer rdma.NodeID) (string, error) {
				if a, ok := addrs.Load(peer); ok {
					return a.(string), nil
				}
				return "", fmt.Errorf("no node %d", peer)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		addrs.Store(id, ep.Addr().String())
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	// connect opens stream on both endpoints and checks a signal from a
	// reaches b.
	connect := func(a, b *rdma.TCPEndpoint, stream rdma.StreamID) error {
		t.Helper()
		ha, hb := newSignals(), newSignals()
		qa, err := a.Open(t.Context(), b.ID(), stream, ha)
		if err != nil {
			t.Fatal(err)
		}
		defer qa.Close()
		qb, err := b.Open(t.Context(), a.ID(), stream, hb)
		if err != nil {
			t.Fatal(err)
		}
		defer qb.Close()
		if err := qa.Signal(7); err != nil {
			return err
		}
		select {
		case <-hb.sig:
			return nil
		case err := <-ha.failed:
			return err
		case err := <-hb.failed:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("no signal within 10s")
		}
	}

	// The lower id dials: 2 dials 3 and 4, 3 dials 4.
	m2 := newMemberFiles(t, dir, 2, oldCA, oldCA)
	m4 := newMemberFiles(t, dir, 4, oldCA, oldCA)
	f2, f4 := m2.open(t, log), m4.open(t, log)
	e2, e4 := endpoint(f2, 2), endpoint(f4, 4)
	if err := connect(e2, e4, 1); err != nil {
		t.Fatalf("2 to 4 before the rotation: %v", err)
	}

	// Both trust both CAs, then both take certificates from the new one.
	m2.trust(t, oldCA, newCA)
	m4.trust(t, oldCA, newCA)
	s2, s4 := m2.issue(t, newCA), m4.issue(t, newCA)
	if !f2.reload() || !f4.reload() {
		t.Fatal("the rotated files were not taken up")
	}
	// The connection already up goes on.
	if err := connect(e2, e4, 2); err != nil {
		t.Fatalf("2 to 4 after the rotation, on the old connection: %v", err)
	}
	// A member started now, with a certificate from the new CA: the
	// running endpoints dial it (2 to 3) and are dialed by it (3 to 4),
	// presenting their new certificates and accepting its.
	m3 := newMemberFiles(t, dir, 3, newCA, oldCA, newCA)
	e3 := endpoint(m3.open(t, log), 3)
	if err := connect(e2, e3, 3); err != nil {
		t.Fatalf("2 to 3: %v", err)
	}
	if err := connect(e3, e4, 4); err != nil {
		t.Fatalf("3 to 4: %v", err)
	}
	if !serials.saw(3, 2, s2) || !serials.saw(3, 4, s4) {
		t.Errorf("member 3 saw %v; want member 2's new serial %v and member 4's %v", serials.seen[3], s2, s4)
	}

	// Member 4 drops the old CA: members whose certificates are from it
	// can no longer connect, though 4's bundle held it when it started:
	// member 1 dialing 4, nor 4 dialing member 5.
	m4.trust(t, newCA)
	if !f4.reload() {
		t.Fatal("the new bundle was not taken up")
	}
	e1 := endpoint(newMemberFiles(t, dir, 1, oldCA, oldCA, newCA).open(t, log), 1)
	if err := connect(e1, e4, 5); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("member 1, with a certificate of the dropped CA, connecting to 4: %v; want its certificate refused", err)
	} else {
		t.Logf("member 1 to 4: %v", err)
	}
	e5 := endpoint(newMemberFiles(t, dir, 5, oldCA, oldCA, newCA).open(t, log), 5)
	if err := connect(e4, e5, 6); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("member 4 connecting to member 5, whose certificate is from the dropped CA: %v; want the certificate refused", err)
	} else {
		t.Logf("member 4 to 5: %v", err)
	}
}
