package membership

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"math/big"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/convoy-gcs/convoy/rdma"
)

// testCA is a certificate authority made up for a test.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// newKey returns a new private key of kind: "ecdsa-p256", "ecdsa-p384",
// "ed25519" or "rsa".
func newKey(t testing.TB, kind string) crypto.Signer {
	t.Helper()
	var k crypto.Signer
	var err error
	switch kind {
	case "ecdsa-p256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ecdsa-p384":
		k, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		t.Fatalf("no key kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue returns a certificate of ca, valid from notBefore for validity,
// naming ids, with key.
func (ca *testCA) issue(t testing.TB, key crypto.Signer, notBefore time.Time, validity time.Duration, ids ...ID) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "member"},
		NotBefore: notBefore, NotAfter: notBefore.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, id := range ids {
		tmpl.URIs = append(tmpl.URIs, rdma.MemberURI(rdma.NodeID(id)))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// memberAuth returns the JoinAuth of a member holding cert and trusting
// trust.
func memberAuth(t testing.TB, cert tls.Certificate, trust *testCA) *JoinAuth {
	t.Helper()
	a, err := NewJoinAuth(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: trust.pool(), RootCAs: trust.pool()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const testPrefix = "/group/"

// A proof made with each kind of key verifies, for the request it was
// made for, at any member trusting the CA.
func TestJoinProofRoundTrip(t *testing.T) {
	ca := newTestCA(t)
	verifier := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 1), ca)
	m := Member{ID: 4, Incarnation: 17, Addr: "10.0.0.4:7000"}
	pos := &LogPos{Last: 40, Epoch: 3, Sender: 2, Seq: 9}
	for _, kind := range []string{"ecdsa-p256", "ecdsa-p384", "ed25519", "rsa"} {
		cert := ca.issue(t, newKey(t, kind), time.Now().Add(-time.Minute), time.Hour, 4)
		for _, tc := range []struct {
			name string
			cfg  *tls.Config
			pos  *LogPos
		}{
			{"Certificates", &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.pool()}, nil},
			{"Certificates with log", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.pool()}, pos},
			{"GetCertificate", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, ClientCAs: ca.pool()}, nil},
			{"GetClientCertificate", &tls.Config{GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }, ClientCAs: ca.pool()}, pos},
			// As a member that reloads its CA bundle configures TLS: the
			// authorities of the moment come from GetConfigForClient.
			{"GetConfigForClient", &tls.Config{
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil },
				GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
					return &tls.Config{ClientCAs: ca.pool(), ClientAuth: tls.RequireAndVerifyClientCert}, nil
				},
				InsecureSkipVerify: true,
			}, pos},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				a, err := NewJoinAuth(tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				proof, err := a.Prove(testPrefix, m, tc.pos)
				if err != nil {
					t.Fatal(err)
				}
				if err := verifier.Verify(testPrefix, m, tc.pos, proof); err != nil {
					t.Errorf("Verify: %v", err)
				}
				if err := a.Verify(testPrefix, m, tc.pos, proof); err != nil {
					t.Errorf("the prover's own Verify: %v", err)
				}
			})
		}
	}
}

// An RSA key that signs with PKCS #1 v1.5, as TLS 1.2 does, is accepted
// too.
func TestJoinProofPKCS1(t *testing.T) {
	ca := newTestCA(t)
	key := newKey(t, "rsa")
	cert := ca.issue(t, key, time.Now(), time.Hour, 4)
	m := Member{ID: 4, Incarnation: 1, Addr: "a:1"}
	opts, digest := signOpts(tls.PKCS1WithSHA256, JoinMessage(testPrefix, m, nil))
	sig, err := key.Sign(rand.Reader, digest, opts)
	if err != nil {
		t.Fatal(err)
	}
	p := JoinProof{Chain: cert.Certificate, Scheme: tls.PKCS1WithSHA256, Signature: sig}
	if err := memberAuth(t, cert, ca).Verify(testPrefix, m, nil, p.Encode()); err != nil {
		t.Error(err)
	}
}

// Verify refuses every proof that does not come from the member it
// names, with a certificate of the group's CA, for that very request, and
// says why.
func TestJoinProofRefused(t *testing.T) {
	ca, rogueCA := newTestCA(t), newTestCA(t)
	verifier := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 1), ca)
	m := Member{ID: 4, Incarnation: 17, Addr: "10.0.0.4:7000"}
	pos := LogPos{Last: 40, Epoch: 3, Sender: 2, Seq: 9}
	prove := func(cert tls.Certificate, prefix string, m Member, pos *LogPos) []byte {
		t.Helper()
		p, err := memberAuth(t, cert, ca).Prove(prefix, m, pos)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 4)
	twoIDs := ca.issue(t, newKey(t, "ed25519"), time.Now(), time.Hour, 4, 5)
	withScheme := func(s tls.SignatureScheme) []byte {
		p, err := DecodeJoinProof(prove(good, testPrefix, m, nil))
		if err != nil {
			t.Fatal(err)
		}
		p.Scheme = s
		return p.Encode()
	}
	junkCert := (&JoinProof{Chain: [][]byte{[]byte("not a certificate")}, Scheme: tls.Ed25519, Signature: []byte{1}}).Encode()
	for _, tc := range []struct {
		name   string
		m      Member
		pos    *LogPos
		prefix string
		proof  []byte
		want   error
	}{
		{"another CA", m, nil, testPrefix, prove(rogueCA.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 4), testPrefix, m, nil), ErrJoinCertificate},
		{"another member's certificate", m, nil, testPrefix, prove(ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 2), testPrefix, m, nil), ErrJoinIdentity},
		{"no member in the certificate", m, nil, testPrefix, prove(ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour), testPrefix, m, nil), ErrJoinIdentity},
		{"other id", Member{ID: 5, Incarnation: 17, Addr: m.Addr}, nil, testPrefix, prove(twoIDs, testPrefix, m, nil), ErrJoinSignature},
		{"other incarnation", Member{ID: 4, Incarnation: 18, Addr: m.Addr}, nil, testPrefix, prove(good, testPrefix, m, nil), ErrJoinSignature},
		{"other address", Member{ID: 4, Incarnation: 17, Addr: "10.0.0.9:7000"}, nil, testPrefix, prove(good, testPrefix, m, nil), ErrJoinSignature},
		{"other prefix", m, nil, "/other/", prove(good, testPrefix, m, nil), ErrJoinSignature},
		{"log added", m, &pos, testPrefix, prove(good, testPrefix, m, nil), ErrJoinSignature},
		{"log removed", m, nil, testPrefix, prove(good, testPrefix, m, &pos), ErrJoinSignature},
		{"other log", m, &LogPos{Last: 41, Epoch: 3, Sender: 2, Seq: 9}, testPrefix, prove(good, testPrefix, m, &pos), ErrJoinSignature},
		{"scheme of another key type", m, nil, testPrefix, withScheme(tls.Ed25519), ErrJoinSignature},
		{"unknown scheme", m, nil, testPrefix, withScheme(0x0bad), ErrJoinSignature},
		{"missing", m, nil, testPrefix, nil, ErrJoinProofMissing},
		{"garbage", m, nil, testPrefix, []byte("\x01\x02garbage"), ErrJoinProofMalformed},
		{"truncated", m, nil, testPrefix, prove(good, testPrefix, m, nil)[:50], ErrJoinProofMalformed},
		{"not a certificate", m, nil, testPrefix, junkCert, ErrJoinCertificate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verifier.Verify(tc.prefix, tc.m, tc.pos, tc.proof)
			if !errors.Is(err, tc.want) {
				t.Errorf("Verify: %v, want %v", err, tc.want)
			}
		})
	}
}

// A certificate is judged as of its start, whatever the clock says: one
// already expired, or not yet valid, verifies alike at every member (the
// TLS handshake, not the proof, refuses an expired one).
func TestJoinProofIgnoresClock(t *testing.T) {
	ca := newTestCA(t)
	verifier := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 1), ca)
	m := Member{ID: 4, Incarnation: 1, Addr: "a:1"}
	for name, from := range map[string]time.Time{"expired": time.Now().Add(-50 * time.Minute), "not yet valid": time.Now().Add(30 * time.Minute)} {
		t.Run(name, func(t *testing.T) {
			cert := ca.issue(t, newKey(t, "ecdsa-p256"), from, 10*time.Minute, 4)
			proof, err := memberAuth(t, cert, ca).Prove(testPrefix, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := verifier.Verify(testPrefix, m, nil, proof); err != nil {
				t.Error(err)
			}
		})
	}
}

// NewJoinAuth needs a certificate to prove with.
func TestNewJoinAuthWithoutCertificate(t *testing.T) {
	for _, cfg := range []*tls.Config{nil, {}} {
		if _, err := NewJoinAuth(cfg); err == nil {
			t.Errorf("NewJoinAuth(%v) succeeded", cfg)
		}
	}
}

// With a JoinAuth, State lists a join request without a valid proof in
// Refused, not in Joins; one with a valid proof stays, with its log.
func TestStateRefusesUnprovedJoins(t *testing.T) {
	ca, rogueCA := newTestCA(t), newTestCA(t)
	k := keys{testPrefix}
	auth := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 1), ca)
	request := func(m Member, pos *LogPos, cert *tls.Certificate) *mvccpb.KeyValue {
		req := joinRequest{Member: m, Log: pos}
		if cert != nil {
			var err error
			if req.Proof, err = memberAuth(t, *cert, ca).Prove(testPrefix, m, pos); err != nil {
				t.Fatal(err)
			}
		}
		v, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return &mvccpb.KeyValue{Key: []byte(k.join(m.ID)), Value: v, ModRevision: 7}
	}
	cert := func(ca *testCA, id ID) *tls.Certificate {
		c := ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, id)
		return &c
	}
	pos := LogPos{Last: 4, Epoch: 1, Sender: 1, Seq: 2}
	joins := []*mvccpb.KeyValue{
		request(member(2), nil, cert(ca, 2)),
		request(member(3), &pos, cert(ca, 3)),
		request(member(4), nil, cert(rogueCA, 4)),
		request(member(5), nil, cert(ca, 2)),
		request(member(6), nil, nil),
		{Key: []byte(k.join(7)), Value: []byte(`{"id":7,"incarnation":1,"addr":"h7:1","proof":"!!"}`), ModRevision: 7},
	}
	s := &Store{k: k, auth: auth}
	for range 2 { // the second time from the cache
		st, err := s.decodeState(1, View{}, nil, joins, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Joins) != 2 || st.Joins[0] != member(2) || st.Joins[1] != member(3) || st.JoinLogs[3] != pos || len(st.JoinLogs) != 1 {
			t.Errorf("Joins %v, JoinLogs %v: want members 2 and 3, and 3's log", st.Joins, st.JoinLogs)
		}
		want := map[ID]error{4: ErrJoinCertificate, 5: ErrJoinIdentity, 6: ErrJoinProofMissing, 7: ErrJoinProofMalformed}
		if len(st.Refused) != len(want) {
			t.Errorf("Refused %v, want %d", st.Refused, len(want))
		}
		for _, r := range st.Refused {
			if !errors.Is(r.Err, want[r.Member.ID]) {
				t.Errorf("member %d refused for %v, want %v", r.Member.ID, r.Err, want[r.Member.ID])
			}
		}
	}
	// Without a JoinAuth, every request stands.
	st, err := (&Store{k: k}).decodeState(1, View{}, nil, joins, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Joins) != len(joins) || len(st.Refused) != 0 {
		t.Errorf("without a JoinAuth: Joins %v, Refused %v", st.Joins, st.Refused)
	}
}

// FuzzJoinProof feeds arbitrary bytes to the decoder and verifier of
// join proofs, which anyone with access to etcd can write. They may
// refuse the proof; they must never panic, and a proof decoded encodes
// back to the same bytes.
func FuzzJoinProof(f *testing.F) {
	ca := newTestCA(f)
	m := Member{ID: 4, Incarnation: 17, Addr: "10.0.0.4:7000"}
	auth := memberAuth(f, ca.issue(f, newKey(f, "ecdsa-p256"), time.Now(), time.Hour, 4), ca)
	proof, err := auth.Prove(testPrefix, m, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(proof, uint64(4))
	f.Add(proof, uint64(5))
	f.Add([]byte{}, uint64(4))
	f.Fuzz(func(t *testing.T, b []byte, id uint64) {
		p, err := DecodeJoinProof(b)
		if err == nil {
			if e := p.Encode(); string(e) != string(b) {
				t.Errorf("decoded %x, encodes as %x", b, e)
			}
		} else if !errors.Is(err, ErrJoinProofMalformed) {
			t.Errorf("DecodeJoinProof: %v does not wrap ErrJoinProofMalformed", err)
		}
		err = auth.Verify(testPrefix, Member{ID: id, Incarnation: 17, Addr: m.Addr}, nil, b)
		if err == nil && (id != 4 || string(b) != string(proof)) && len(b) > 0 {
			// Another valid signature over the same message is possible
			// (ECDSA is randomized), but not from the fuzzer.
			t.Errorf("Verify accepted %x for member %d", b, id)
		}
	})
}

// A registration proof, a join proof and a restart claim's proof of the
// same member never pass for each other: they sign under different
// domains.
func TestRegistrationProofDomain(t *testing.T) {
	ca := newTestCA(t)
	auth := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 4), ca)
	m := Member{ID: 4, Incarnation: 17, Addr: "10.0.0.4:7000"}
	join, err := auth.Prove(testPrefix, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := auth.ProveRegistration(testPrefix, m)
	if err != nil {
		t.Fatal(err)
	}
	claim := Recovery{Epoch: 3, Member: m, InView: true}
	restart, err := auth.ProveRestart(testPrefix, claim)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		verify func([]byte) error
		proof  []byte
		want   error
	}{
		{"registration", func(p []byte) error { return auth.VerifyRegistration(testPrefix, m, p) }, reg, nil},
		{"join request", func(p []byte) error { return auth.Verify(testPrefix, m, nil, p) }, join, nil},
		{"join proof as a registration", func(p []byte) error { return auth.VerifyRegistration(testPrefix, m, p) }, join, ErrJoinSignature},
		{"registration proof as a join request", func(p []byte) error { return auth.Verify(testPrefix, m, nil, p) }, reg, ErrJoinSignature},
		{"registration of another prefix", func(p []byte) error { return auth.VerifyRegistration("/other/", m, p) }, reg, ErrJoinSignature},
		{"restart claim", func(p []byte) error { return auth.VerifyRestart(testPrefix, claim, p) }, restart, nil},
		{"registration proof as a restart claim", func(p []byte) error { return auth.VerifyRestart(testPrefix, claim, p) }, reg, ErrJoinSignature},
		{"join proof as a restart claim", func(p []byte) error { return auth.VerifyRestart(testPrefix, claim, p) }, join, ErrJoinSignature},
		{"restart proof as a registration", func(p []byte) error { return auth.VerifyRegistration(testPrefix, m, p) }, restart, ErrJoinSignature},
		{"restart proof as a join request", func(p []byte) error { return auth.Verify(testPrefix, m, nil, p) }, restart, ErrJoinSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.verify(tc.proof); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// With a JoinAuth, State leaves a registration without a valid proof out
// of Registered and lists it in Refused as a registration; an honest one
// stays. A join request proved with a registration's proof is refused
// too.
func TestStateRefusesUnprovedRegistrations(t *testing.T) {
	ca, rogueCA := newTestCA(t), newTestCA(t)
	k := keys{testPrefix}
	auth := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 1), ca)
	cert := func(ca *testCA, id ID) tls.Certificate {
		return ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, id)
	}
	kv := func(key string, v any) *mvccpb.KeyValue {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return &mvccpb.KeyValue{Key: []byte(key), Value: b, ModRevision: 7}
	}
	// registered returns the registration of m proved by cert.
	registered := func(m Member, cert tls.Certificate) *mvccpb.KeyValue {
		p, err := memberAuth(t, cert, ca).ProveRegistration(testPrefix, m)
		if err != nil {
			t.Fatal(err)
		}
		return kv(k.member(m.ID), registration{Member: m, Proof: p})
	}
	tampered := func(m Member) *mvccpb.KeyValue {
		p, err := memberAuth(t, cert(ca, m.ID), ca).ProveRegistration(testPrefix, m)
		if err != nil {
			t.Fatal(err)
		}
		m.Incarnation++ // a newer incarnation, under an older one's proof
		return kv(k.member(m.ID), registration{Member: m, Proof: p})
	}
	joinProofOf := func(m Member) []byte {
		p, err := memberAuth(t, cert(ca, m.ID), ca).Prove(testPrefix, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	regProofOf := func(m Member) []byte {
		p, err := memberAuth(t, cert(ca, m.ID), ca).ProveRegistration(testPrefix, m)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		members []*mvccpb.KeyValue
		joins   []*mvccpb.KeyValue
		want    error // nil: member 2 is registered (or asks to join)
		kind    RefusedKind
	}{
		{"honest", []*mvccpb.KeyValue{registered(member(2), cert(ca, 2))}, nil, nil, RefusedRegistration},
		{"honest join request", nil, []*mvccpb.KeyValue{kv(k.join(2), joinRequest{Member: member(2), Proof: joinProofOf(member(2))})}, nil, RefusedJoinRequest},
		{"another CA", []*mvccpb.KeyValue{registered(member(2), cert(rogueCA, 2))}, nil, ErrJoinCertificate, RefusedRegistration},
		{"certificate of another member", []*mvccpb.KeyValue{registered(member(2), cert(ca, 3))}, nil, ErrJoinIdentity, RefusedRegistration},
		{"tampered", []*mvccpb.KeyValue{tampered(member(2))}, nil, ErrJoinSignature, RefusedRegistration},
		{"missing", []*mvccpb.KeyValue{kv(k.member(2), member(2))}, nil, ErrJoinProofMissing, RefusedRegistration},
		{"malformed", []*mvccpb.KeyValue{{Key: []byte(k.member(2)), Value: []byte(`{"id":2,"incarnation":1,"addr":"h2:1","proof":"!!"}`), ModRevision: 7}}, nil, ErrJoinProofMalformed, RefusedRegistration},
		{"join proof replayed as a registration", []*mvccpb.KeyValue{kv(k.member(2), registration{Member: member(2), Proof: joinProofOf(member(2))})}, nil, ErrJoinSignature, RefusedRegistration},
		{"registration proof replayed as a join request", nil, []*mvccpb.KeyValue{kv(k.join(2), joinRequest{Member: member(2), Proof: regProofOf(member(2))})}, ErrJoinSignature, RefusedJoinRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{k: k, auth: auth}
			for range 2 { // the second time from the cache
				st, err := s.decodeState(1, View{}, tc.members, tc.joins, nil, nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, registered := st.Registered[2]
				asks := slices.Contains(st.Joins, member(2))
				if tc.want == nil {
					if registered != (len(tc.members) > 0) || asks != (len(tc.joins) > 0) || len(st.Refused) != 0 {
						t.Errorf("Registered %v, Joins %v, Refused %v: want member 2 admitted", st.Registered, st.Joins, st.Refused)
					}
					continue
				}
				if registered || asks {
					t.Errorf("Registered %v, Joins %v: want member 2 refused", st.Registered, st.Joins)
				}
				if len(st.Refused) != 1 || st.Refused[0].Kind != tc.kind || st.Refused[0].Member.ID != 2 || !errors.Is(st.Refused[0].Err, tc.want) {
					t.Errorf("Refused %v, want member 2's %v for %v", st.Refused, tc.kind, tc.want)
				}
			}
			// Without a JoinAuth, every record stands.
			st, err := (&Store{k: k}).decodeState(1, View{}, tc.members, tc.joins, nil, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Registered) != len(tc.members) || len(st.Joins) != len(tc.joins) || len(st.Refused) != 0 {
				t.Errorf("without a JoinAuth: Registered %v, Joins %v, Refused %v", st.Registered, st.Joins, st.Refused)
			}
		})
	}
}

// With a JoinAuth, State leaves a restart claim without a valid proof
// for it out of Recoveries and lists it in Refused as a restart claim: a
// claim that names a member's registered incarnation but was written by
// someone else, or altered, counts neither towards the restart nor for
// the log position the group restarts from.
func TestStateRefusesUnprovedRestartClaims(t *testing.T) {
	ca, rogueCA := newTestCA(t), newTestCA(t)
	k := keys{testPrefix}
	const epoch = 3
	m := Member{ID: 2, Incarnation: 9, Addr: "h2:9"}
	honest := Recovery{Epoch: epoch, Member: m, LogLast: 40, InView: true}
	auth := memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, 1), ca)
	authOf := func(ca *testCA, id ID) *JoinAuth {
		return memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, id), ca)
	}
	claimKV := func(c restartClaim) *mvccpb.KeyValue {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return &mvccpb.KeyValue{Key: []byte(k.recovery(epoch, c.Member.ID)), Value: b, ModRevision: 7}
	}
	proved := func(a *JoinAuth, r Recovery) []byte {
		p, err := a.ProveRestart(testPrefix, r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	forged := honest
	forged.LogLast = 4000 // a log position no member holds
	regProof, err := authOf(ca, 2).ProveRegistration(testPrefix, m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		claim *mvccpb.KeyValue
		want  error // nil: member 2's claim counts
	}{
		{"honest", claimKV(restartClaim{honest, proved(authOf(ca, 2), honest)}), nil},
		{"another CA", claimKV(restartClaim{forged, proved(authOf(rogueCA, 2), forged)}), ErrJoinCertificate},
		{"certificate of another member", claimKV(restartClaim{forged, proved(authOf(ca, 5), forged)}), ErrJoinIdentity},
		{"altered log position", claimKV(restartClaim{forged, proved(authOf(ca, 2), honest)}), ErrJoinSignature},
		{"missing", claimKV(restartClaim{Recovery: forged}), ErrJoinProofMissing},
		{"registration proof replayed", claimKV(restartClaim{forged, regProof}), ErrJoinSignature},
		{"malformed", &mvccpb.KeyValue{Key: []byte(k.recovery(epoch, 2)), Value: []byte(`{"epoch":3,"member":{"id":2},"proof":"!!"}`), ModRevision: 7}, ErrJoinProofMalformed},
		{"undecodable", &mvccpb.KeyValue{Key: []byte(k.recovery(epoch, 2)), Value: []byte(`{"epoch":4,"member":{"id":2}}`), ModRevision: 7}, ErrMalformedRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{k: k, auth: auth}
			for range 2 { // the second time from the cache
				rs, refused := s.decodeRecoveries([]*mvccpb.KeyValue{tc.claim}, epoch)
				if tc.want == nil {
					if rc, ok := rs[2]; !ok || rc != honest || len(refused) != 0 {
						t.Errorf("Recoveries %v, Refused %v: want member 2's claim admitted", rs, refused)
					}
					continue
				}
				if len(rs) != 0 {
					t.Errorf("Recoveries %v: want member 2's claim refused", rs)
				}
				if len(refused) != 1 || refused[0].Kind != RefusedRestart || refused[0].Member.ID != 2 || !errors.Is(refused[0].Err, tc.want) {
					t.Errorf("Refused %v, want member 2's restart claim for %v", refused, tc.want)
				}
			}
			// Without a JoinAuth, every claim that decodes stands.
			rs, refused := (&Store{k: k}).decodeRecoveries([]*mvccpb.KeyValue{tc.claim}, epoch)
			if undecodable := errors.Is(tc.want, ErrMalformedRecord); (len(rs) == 1) == undecodable || (len(refused) == 1) != undecodable {
				t.Errorf("without a JoinAuth: Recoveries %v, Refused %v", rs, refused)
			}
		})
	}
}

// PutRecovery proves its claim with the store's JoinAuth, and State
// admits it; a claim written over it by another process with a
// certificate of the group's for another member is refused.
func TestPutRecoveryProved(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		ca := newTestCA(t)
		ctx := testCtx(t)
		open := func(id ID) *Store {
			s := b.open(t, 0, "", false)
			s.auth = memberAuth(t, ca.issue(t, newKey(t, "ecdsa-p256"), time.Now(), time.Hour, id), ca)
			return s
		}
		s1, s2 := open(1), open(2)
		if err := s1.Bootstrap(ctx, firstView(1, 2, 3)); err != nil {
			t.Fatal(err)
		}
		m := Member{ID: 2, Incarnation: 5, Addr: "h2:5"}
		claim := Recovery{Epoch: 1, Member: m, LogLast: 12, InView: true}
		if err := s2.PutRecovery(ctx, claim); err != nil {
			t.Fatal(err)
		}
		st, err := s1.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rc, ok := st.Recoveries[2]; !ok || rc != claim || len(st.Refused) != 0 {
			t.Fatalf("Recoveries %v, Refused %v: want member 2's claim", st.Recoveries, st.Refused)
		}
		forged := claim
		forged.LogLast = 1 << 40
		if err := open(3).PutRecovery(ctx, forged); err != nil {
			t.Fatal(err)
		}
		if st, err = s1.State(ctx); err != nil {
			t.Fatal(err)
		}
		if len(st.Recoveries) != 0 || len(st.Refused) != 1 || st.Refused[0].Kind != RefusedRestart || !errors.Is(st.Refused[0].Err, ErrJoinIdentity) {
			t.Fatalf("Recoveries %v, Refused %v: want the forged claim refused", st.Recoveries, st.Refused)
		}
	})
}
