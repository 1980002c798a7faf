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
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/convoy-gcs/convoy/rdma"
)

// Why a join request is refused (JoinAuth.Verify), for callers to test
// with errors.Is.
var (
	// ErrJoinProofMissing: the request carries no proof.
	ErrJoinProofMissing = errors.New("membership: join request without a proof")
	// ErrJoinProofMalformed: the proof cannot be decoded.
	ErrJoinProofMalformed = errors.New("membership: malformed join proof")
	// ErrJoinCertificate: the proof's certificate chain does not verify
	// against the group's certificate authorities.
	ErrJoinCertificate = errors.New("membership: join proof's certificate not trusted")
	// ErrJoinIdentity: the proof's certificate does not name the member
	// that asks to join (rdma.CertifiesID).
	ErrJoinIdentity = errors.New("membership: join proof's certificate names another member")
	// ErrJoinSignature: the proof's signature does not verify with its
	// certificate's key over the request.
	ErrJoinSignature = errors.New("membership: join proof's signature does not verify")
)

// Bounds of a join proof.
const (
	// maxProofBytes bounds an encoded proof.
	maxProofBytes = 64 << 10
	// maxProofChain bounds the certificates a proof carries.
	maxProofChain = 8
	// joinProofVersion is the first byte of an encoded proof.
	joinProofVersion = 1
)

// joinDomain, registrationDomain and restartDomain separate the
// messages join, registration and restart claim proofs sign from each
// other and from anything else the same key signs (TLS handshakes among
// them): a proof of one kind is never a proof of another.
const (
	joinDomain         = "convoy join request v1\x00"
	registrationDomain = "convoy registration v1\x00"
	restartDomain      = "convoy restart claim v1\x00"
)

// JoinProof proves that a join request comes from the member it names,
// in a group whose members authenticate each other with TLS: the
// member's certificate chain, leaf first, and its signature, with the
// leaf's private key, over the request (JoinMessage).
type JoinProof struct {
	// Chain holds the certificates, DER, leaf first.
	Chain [][]byte
	// Scheme is the signature algorithm, as TLS numbers them.
	Scheme tls.SignatureScheme
	// Signature is the signature over JoinMessage.
	Signature []byte
}

// Encode returns p's encoding, which DecodeJoinProof reads: a version
// byte, the scheme (2 bytes, big-endian), the number of certificates
// (uvarint), each certificate and then the signature prefixed with its
// length (uvarint).
func (p *JoinProof) Encode() []byte {
	b := []byte{joinProofVersion}
	b = binary.BigEndian.AppendUint16(b, uint16(p.Scheme))
	b = binary.AppendUvarint(b, uint64(len(p.Chain)))
	for _, c := range p.Chain {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Signature)))
	return append(b, p.Signature...)
}

// DecodeJoinProof decodes what Encode returns. Every error wraps
// ErrJoinProofMalformed.
func DecodeJoinProof(b []byte) (JoinProof, error) {
	bad := func(what string) (JoinProof, error) {
		return JoinProof{}, fmt.Errorf("%w: %s", ErrJoinProofMalformed, what)
	}
	switch {
	case len(b) > maxProofBytes:
		return bad(fmt.Sprintf("%d bytes, more than %d", len(b), maxProofBytes))
	case len(b) < 3:
		return bad("too short")
	case b[0] != joinProofVersion:
		return bad(fmt.Sprintf("version %d", b[0]))
	}
	p := JoinProof{Scheme: tls.SignatureScheme(binary.BigEndian.Uint16(b[1:3]))}
	b = b[3:]
	field := func() ([]byte, bool) {
		n, k := uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(n)]
		b = b[k+int(n):]
		return f, true
	}
	n, k := uvarint(b)
	if k <= 0 || n == 0 || n > maxProofChain {
		return bad("certificate count")
	}
	b = b[k:]
	for range n {
		c, ok := field()
		if !ok || len(c) == 0 {
			return bad("certificate")
		}
		p.Chain = append(p.Chain, c)
	}
	sig, ok := field()
	if !ok || len(sig) == 0 {
		return bad("signature")
	}
	if len(b) != 0 {
		return bad(fmt.Sprintf("%d bytes after the signature", len(b)))
	}
	p.Signature = sig
	return p, nil
}

// uvarint decodes a uvarint as binary.Uvarint does, but only in its
// shortest form (k <= 0 otherwise), so that a proof has one encoding.
func uvarint(b []byte) (n uint64, k int) {
	n, k = binary.Uvarint(b)
	if k > 0 && k != len(binary.AppendUvarint(nil, n)) {
		return 0, -1
	}
	return n, k
}

// JoinMessage returns what a join proof signs: a domain separator, then
// the store's key prefix, the member's id, incarnation and address, and
// the log position of a request that has one (RequestJoinFrom), strings
// prefixed with their length, numbers 8 bytes big-endian. A proof thus
// holds for that request of that incarnation in that group only.
func JoinMessage(prefix string, m Member, pos *LogPos) []byte {
	return proofMessage(joinDomain, prefix, m, pos)
}

// RegistrationMessage returns what a registration proof signs: as
// JoinMessage, without a log position, under another domain separator,
// so that a registration's proof holds for that registration only and a
// join request's never passes for it, nor the other way round.
func RegistrationMessage(prefix string, m Member) []byte {
	return proofMessage(registrationDomain, prefix, m, nil)
}

// RestartMessage returns what a restart claim's proof signs: as
// RegistrationMessage for the claim's member, under another domain
// separator, followed by the claim's view epoch, log epoch and log index
// (8 bytes big-endian each) and a byte of flags (1: Beyond, 2: InView),
// so that the proof holds for that claim only, and no other kind of
// proof passes for it, nor it for another kind.
func RestartMessage(prefix string, r Recovery) []byte {
	b := proofMessage(restartDomain, prefix, r.Member, nil)
	for _, v := range []uint64{r.Epoch, r.LogEpoch, r.LogLast} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	var flags byte
	if r.Beyond {
		flags |= 1
	}
	if r.InView {
		flags |= 2
	}
	return append(b, flags)
}

// proofMessage returns the message of JoinMessage under domain.
func proofMessage(domain, prefix string, m Member, pos *LogPos) []byte {
	b := []byte(domain)
	str := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	str(prefix)
	b = binary.BigEndian.AppendUint64(b, m.ID)
	b = binary.BigEndian.AppendUint64(b, m.Incarnation)
	str(m.Addr)
	if pos == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	for _, v := range []uint64{pos.Last, pos.Epoch, pos.Sender, pos.Seq} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

// JoinAuth proves a member's join requests, registrations and restart
// claims and checks the others', in a group whose members authenticate
// each other with mutual TLS: a join request, a registration (the first
// view is made of the registered members, and a newer incarnation's
// registration ends a member's) or a restart claim (the group restarts
// from the logs the claims describe) counts only if it carries a proof
// (JoinProof) whose
// certificate chain the group's certificate authorities issued, whose
// leaf names the member (rdma.CertifiesID), as the transport requires of
// a peer, and whose signature holds for the request.
//
// The check must come out alike at every member, as each decides views
// from it: it does not read the clock. A chain is verified as of the
// latest NotBefore among its certificates, so that a certificate is
// judged on what it is, not on when a member happens to look; the
// expiry of a certificate is left to the TLS handshake, which refuses
// an expired one when the member connects.
type JoinAuth struct {
	// cert returns the member's own certificate.
	cert func() (*tls.Certificate, error)
	// trust returns the certificate authorities of the moment (nil: the
	// system's) and the key usage a peer's certificate needs.
	trust func() (*x509.CertPool, x509.ExtKeyUsage)
}

// NewJoinAuth returns the JoinAuth of a member whose transport runs TLS
// with cfg: it proves with cfg's certificate (Certificates[0], else
// GetCertificate's, else GetClientCertificate's) and trusts the
// authorities the member verifies the peers that dial it with, as of
// each check: the ClientCAs of the configuration GetConfigForClient
// returns, if it returns one with ClientCAs, else cfg.ClientCAs (with
// the client key usage), else cfg.RootCAs (with the server key usage),
// else the system's.
func NewJoinAuth(cfg *tls.Config) (*JoinAuth, error) {
	if cfg == nil {
		return nil, errors.New("membership: NewJoinAuth without a TLS configuration")
	}
	a := &JoinAuth{trust: func() (*x509.CertPool, x509.ExtKeyUsage) {
		if cfg.GetConfigForClient != nil {
			if c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{}); err == nil && c != nil && c.ClientCAs != nil {
				return c.ClientCAs, x509.ExtKeyUsageClientAuth
			}
		}
		if cfg.ClientCAs != nil {
			return cfg.ClientCAs, x509.ExtKeyUsageClientAuth
		}
		return cfg.RootCAs, x509.ExtKeyUsageServerAuth
	}}
	switch {
	case len(cfg.Certificates) > 0:
		c := &cfg.Certificates[0]
		a.cert = func() (*tls.Certificate, error) { return c, nil }
	case cfg.GetCertificate != nil:
		get := cfg.GetCertificate
		a.cert = func() (*tls.Certificate, error) { return get(&tls.ClientHelloInfo{}) }
	case cfg.GetClientCertificate != nil:
		get := cfg.GetClientCertificate
		a.cert = func() (*tls.Certificate, error) { return get(&tls.CertificateRequestInfo{}) }
	default:
		return nil, errors.New("membership: the TLS configuration has no certificate to prove join requests with")
	}
	return a, nil
}

// Prove returns the proof of the join request of m, with log position
// pos if any, in the group whose store prefix is prefix, encoded.
func (a *JoinAuth) Prove(prefix string, m Member, pos *LogPos) ([]byte, error) {
	return a.prove(JoinMessage(prefix, m, pos))
}

// ProveRegistration returns the proof of the registration of m
// (Store.Register) in the group whose store prefix is prefix, encoded
// as a join proof is.
func (a *JoinAuth) ProveRegistration(prefix string, m Member) ([]byte, error) {
	return a.prove(RegistrationMessage(prefix, m))
}

// ProveRestart returns the proof of the restart claim r
// (Store.PutRecovery) in the group whose store prefix is prefix, encoded
// as a join proof is.
func (a *JoinAuth) ProveRestart(prefix string, r Recovery) ([]byte, error) {
	return a.prove(RestartMessage(prefix, r))
}

// prove returns the encoded proof of msg.
func (a *JoinAuth) prove(msg []byte) ([]byte, error) {
	cert, err := a.cert()
	if err != nil {
		return nil, fmt.Errorf("membership: certificate for a join proof: %w", err)
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return nil, errors.New("membership: no certificate for a join proof")
	}
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("membership: join proof: private key %T cannot sign", cert.PrivateKey)
	}
	scheme, err := schemeFor(signer.Public())
	if err != nil {
		return nil, err
	}
	opts, digest := signOpts(scheme, msg)
	sig, err := signer.Sign(rand.Reader, digest, opts)
	if err != nil {
		return nil, fmt.Errorf("membership: sign join proof: %w", err)
	}
	p := JoinProof{Chain: cert.Certificate, Scheme: scheme, Signature: sig}
	if len(p.Chain) > maxProofChain {
		p.Chain = p.Chain[:maxProofChain]
	}
	return p.Encode(), nil
}

// Verify checks proof, encoded, against the join request of m, with log
// position pos if any, in the group whose store prefix is prefix. Its
// error wraps ErrJoinProofMissing, ErrJoinProofMalformed,
// ErrJoinCertificate, ErrJoinIdentity or ErrJoinSignature.
func (a *JoinAuth) Verify(prefix string, m Member, pos *LogPos, proof []byte) error {
	roots, usage := a.trust()
	return verifyProof(roots, usage, m.ID, JoinMessage(prefix, m, pos), proof)
}

// VerifyRegistration checks proof, encoded, against the registration of
// m in the group whose store prefix is prefix, as Verify checks a join
// request's, with the same errors.
func (a *JoinAuth) VerifyRegistration(prefix string, m Member, proof []byte) error {
	roots, usage := a.trust()
	return verifyProof(roots, usage, m.ID, RegistrationMessage(prefix, m), proof)
}

// VerifyRestart checks proof, encoded, against the restart claim r in
// the group whose store prefix is prefix, as Verify checks a join
// request's, with the same errors.
func (a *JoinAuth) VerifyRestart(prefix string, r Recovery, proof []byte) error {
	roots, usage := a.trust()
	return verifyProof(roots, usage, r.Member.ID, RestartMessage(prefix, r), proof)
}

// verifyProof checks proof against msg, signed for member id, with the
// certificate authorities roots, for certificates of key usage usage.
func verifyProof(roots *x509.CertPool, usage x509.ExtKeyUsage, id ID, msg, proof []byte) error {
	if len(proof) == 0 {
		return ErrJoinProofMissing
	}
	p, err := DecodeJoinProof(proof)
	if err != nil {
		return err
	}
	certs := make([]*x509.Certificate, len(p.Chain))
	for i, der := range p.Chain {
		if certs[i], err = x509.ParseCertificate(der); err != nil {
			return fmt.Errorf("%w: %w", ErrJoinCertificate, err)
		}
	}
	leaf := certs[0]
	at := leaf.NotBefore
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
		if c.NotBefore.After(at) {
			at = c.NotBefore
		}
	}
	// The validity periods are checked as of the chain's latest start:
	// see JoinAuth.
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("%w: %w", ErrJoinCertificate, err)
	}
	if !rdma.CertifiesID(leaf, rdma.NodeID(id)) {
		return fmt.Errorf("%w: %q does not name member %d", ErrJoinIdentity, leaf.Subject.CommonName, id)
	}
	if err := verifySignature(leaf.PublicKey, p.Scheme, msg, p.Signature); err != nil {
		return fmt.Errorf("%w: %w", ErrJoinSignature, err)
	}
	return nil
}

// schemeFor returns the signature scheme a key signs join proofs with,
// as TLS 1.3 would pick it: ECDSA with the curve's hash, Ed25519, or
// RSA-PSS with SHA-256.
func schemeFor(pub crypto.PublicKey) (tls.SignatureScheme, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return tls.ECDSAWithP256AndSHA256, nil
		case elliptic.P384():
			return tls.ECDSAWithP384AndSHA384, nil
		case elliptic.P521():
			return tls.ECDSAWithP521AndSHA512, nil
		}
		return 0, fmt.Errorf("membership: join proof: unsupported ECDSA curve %v", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return tls.Ed25519, nil
	case *rsa.PublicKey:
		return tls.PSSWithSHA256, nil
	}
	return 0, fmt.Errorf("membership: join proof: unsupported key type %T", pub)
}

// schemeHash returns the hash of a signature scheme, and whether the
// scheme is one join proofs accept.
func schemeHash(s tls.SignatureScheme) (crypto.Hash, bool) {
	switch s {
	case tls.ECDSAWithP256AndSHA256, tls.PSSWithSHA256, tls.PKCS1WithSHA256:
		return crypto.SHA256, true
	case tls.ECDSAWithP384AndSHA384, tls.PSSWithSHA384, tls.PKCS1WithSHA384:
		return crypto.SHA384, true
	case tls.ECDSAWithP521AndSHA512, tls.PSSWithSHA512, tls.PKCS1WithSHA512:
		return crypto.SHA512, true
	case tls.Ed25519:
		return 0, true
	}
	return 0, false
}

// signOpts returns what crypto.Signer.Sign takes for scheme over msg:
// the options and the digest (msg itself for Ed25519).
func signOpts(s tls.SignatureScheme, msg []byte) (crypto.SignerOpts, []byte) {
	h, _ := schemeHash(s)
	if h == 0 {
		return crypto.Hash(0), msg
	}
	d := h.New()
	d.Write(msg)
	switch s {
	case tls.PSSWithSHA256, tls.PSSWithSHA384, tls.PSSWithSHA512:
		return &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: h}, d.Sum(nil)
	}
	return h, d.Sum(nil)
}

// verifySignature checks sig, by scheme s, over msg with pub.
func verifySignature(pub crypto.PublicKey, s tls.SignatureScheme, msg, sig []byte) error {
	h, ok := schemeHash(s)
	if !ok {
		return fmt.Errorf("unsupported scheme %v", s)
	}
	_, digest := signOpts(s, msg)
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if want, _ := schemeFor(k); want != s {
			return fmt.Errorf("scheme %v with an ECDSA key on %s", s, k.Curve.Params().Name)
		}
		if !ecdsa.VerifyASN1(k, digest, sig) {
			return errors.New("bad ECDSA signature")
		}
	case ed25519.PublicKey:
		if s != tls.Ed25519 || !ed25519.Verify(k, digest, sig) {
			return fmt.Errorf("bad Ed25519 signature (scheme %v)", s)
		}
	case *rsa.PublicKey:
		var err error
		switch s {
		case tls.PSSWithSHA256, tls.PSSWithSHA384, tls.PSSWithSHA512:
			err = rsa.VerifyPSS(k, h, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		case tls.PKCS1WithSHA256, tls.PKCS1WithSHA384, tls.PKCS1WithSHA512:
			err = rsa.VerifyPKCS1v15(k, h, digest, sig)
		default:
			err = fmt.Errorf("scheme %v with an RSA key", s)
		}
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported key type %T", pub)
	}
	return nil
}
