// Package devcerts makes the certificates of a development deployment of
// Convoy with crypto/x509 alone: a certificate authority, and the
// certificates it signs for the members, for an etcd server and for
// clients. Keys are ECDSA P-256.
//
// Write fills a directory:
//
//	err := devcerts.Write(dir, devcerts.Options{Members: 3})
//
// A member's certificate names its id as the URI subject alternative
// name convoy://member/<id> (rdma.MemberURI), which the tcp transport
// checks over mutual TLS, and the hosts it serves on (localhost,
// 127.0.0.1, ::1 and Options.Hosts), so that it serves the member's HTTP
// API too; it is good for both ends of a connection. The client
// certificate names no member and no host: it authenticates a tool or a
// client (to an etcd that asks for client certificates, say). The etcd
// certificate is a server certificate for the same hosts.
//
// The CA is for development: its key sits in the same directory as the
// certificates, unencrypted. A deployment keeps its CA key elsewhere, or
// uses its own PKI.
package devcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/convoy-gcs/convoy/rdma"
)

// The files Write writes, in the directory it is given; a member's are
// named by MemberCertFile and MemberKeyFile.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
	EtcdCertFile   = "etcd.crt"
	EtcdKeyFile    = "etcd.key"
)

// MemberCertFile returns the name of member id's certificate file.
func MemberCertFile(id uint64) string { return "member-" + strconv.FormatUint(id, 10) + ".crt" }

// MemberKeyFile returns the name of member id's key file.
func MemberKeyFile(id uint64) string { return "member-" + strconv.FormatUint(id, 10) + ".key" }

// Validity periods.
const (
	// DefaultValidity is how long the certificates Write issues are valid
	// unless Options.Validity says otherwise: a year, long enough not to
	// expire under a development cluster.
	DefaultValidity = 365 * 24 * time.Hour
	// CAValidity is how long a new CA is valid: ten years, so that it
	// outlives the certificates it issues again and again.
	CAValidity = 10 * 365 * 24 * time.Hour
	// backdate is how far before now a certificate starts to be valid, so
	// that a machine whose clock runs a little behind accepts it.
	backdate = time.Hour
)

// File modes: keys are for their owner only.
const (
	certMode fs.FileMode = 0o644
	keyMode  fs.FileMode = 0o600
	dirMode  fs.FileMode = 0o700
)

// Errors of Write and LoadCA.
var (
	// ErrHalfCA is returned by Write for a directory that holds one of
	// CACertFile and CAKeyFile but not the other.
	ErrHalfCA = errors.New("devcerts: the directory holds half a CA")
	// ErrBadPEM is wrapped by LoadCA's error for a file that holds no
	// PEM block of the kind expected.
	ErrBadPEM = errors.New("devcerts: no PEM block of the kind expected")
)

// Options says which certificates Write makes.
type Options struct {
	// Members is how many members get a certificate: ids 1 to Members.
	Members int
	// Hosts lists further DNS names and IP addresses the member and etcd
	// certificates are valid for, besides localhost, 127.0.0.1 and ::1.
	Hosts []string
	// Validity is how long the certificates issued are valid (not the
	// CA). Default DefaultValidity.
	Validity time.Duration
}

// Write writes into dir (created, for its owner only, if missing) the
// CA's certificate and key, a certificate and key for each member, for
// an etcd server and for a client, replacing the files of earlier calls.
// Keys get mode 0600, certificates 0644. If dir holds a CA already (both
// CACertFile and CAKeyFile), it signs with it, so that the new
// certificates join the deployment of the older ones: this is how to
// renew them, or to add members. Otherwise it makes a new CA.
//
// Each file is written whole under a temporary name, then renamed, so
// that a process reading it meanwhile sees the old file or the new one,
// never a part; a certificate and its key are two files, so for a
// moment a reader may find a new key with the old certificate.
func Write(dir string, opts Options) error {
	if opts.Members < 0 {
		return fmt.Errorf("devcerts: %d members", opts.Members)
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("devcerts: %w", err)
	}
	ca, err := loadOrNewCA(dir)
	if err != nil {
		return err
	}
	hosts := append([]string{"localhost", "127.0.0.1", "::1"}, opts.Hosts...)
	type issued struct {
		cert, key string
		leaf      Leaf
	}
	leaves := []issued{
		{ClientCertFile, ClientKeyFile, Leaf{Name: "convoy client", Client: true, Validity: opts.Validity}},
		{EtcdCertFile, EtcdKeyFile, Leaf{Name: "convoy etcd", Hosts: hosts, Server: true, Client: true, Validity: opts.Validity}},
	}
	for id := uint64(1); id <= uint64(opts.Members); id++ {
		leaves = append(leaves, issued{MemberCertFile(id), MemberKeyFile(id), Leaf{
			Name: "convoy member " + strconv.FormatUint(id, 10), Members: []uint64{id}, Hosts: hosts,
			Server: true, Client: true, Validity: opts.Validity,
		}})
	}
	for _, l := range leaves {
		certPEM, keyPEM, err := ca.Issue(l.leaf)
		if err != nil {
			return err
		}
		if err := WriteFile(filepath.Join(dir, l.key), keyPEM, keyMode); err != nil {
			return err
		}
		if err := WriteFile(filepath.Join(dir, l.cert), certPEM, certMode); err != nil {
			return err
		}
	}
	return nil
}

// loadOrNewCA returns the CA in dir, or a new one written there.
func loadOrNewCA(dir string) (*CA, error) {
	certFile, keyFile := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		return LoadCA(certFile, keyFile)
	case certErr == nil || keyErr == nil:
		return nil, fmt.Errorf("%w: %s", ErrHalfCA, dir)
	case !errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("devcerts: %w", certErr)
	case !errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("devcerts: %w", keyErr)
	}
	ca, err := NewCA("convoy development CA", CAValidity)
	if err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := WriteFile(keyFile, keyPEM, keyMode); err != nil {
		return nil, err
	}
	if err := WriteFile(certFile, ca.CertPEM(), certMode); err != nil {
		return nil, err
	}
	return ca, nil
}

// CA is a certificate authority that issues certificates.
type CA struct {
	// Cert is the CA's certificate.
	Cert *x509.Certificate
	key  crypto.Signer
}

// NewCA returns a new CA, with a new key, named name and valid for
// validity from now.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devcerts: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devcerts: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devcerts: CA certificate: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA reads a CA's certificate and key from PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certDER, err := readPEM(certFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("devcerts: %s: %w", certFile, err)
	}
	keyDER, err := readPEM(keyFile, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("devcerts: %s: %w", keyFile, err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("devcerts: %s: a %T cannot sign", keyFile, k)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("devcerts: %s is not a CA certificate", certFile)
	}
	return &CA{Cert: cert, key: key}, nil
}

// readPEM returns the first PEM block of type kind in the file at path.
func readPEM(path, kind string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("devcerts: %w", err)
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("%w: %s holds no %s", ErrBadPEM, path, kind)
		}
		if b.Type == kind {
			return b.Bytes, nil
		}
	}
}

// CertPEM returns the CA's certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA's private key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	return encodeKey(ca.key)
}

// Leaf describes a certificate for CA.Issue.
type Leaf struct {
	// Name is the subject's common name.
	Name string
	// Members lists the member ids the certificate names, each as the URI
	// convoy://member/<id> (rdma.MemberURI).
	Members []uint64
	// Hosts lists the DNS names and IP addresses it is valid for.
	Hosts []string
	// Server and Client say which ends of a TLS connection it may
	// authenticate (extended key usages server and client auth).
	Server, Client bool
	// Validity is how long it is valid from now.
	Validity time.Duration
}

// Issue returns a new certificate for l, signed by ca, and its new key,
// both in PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	cert, key, err := ca.issue(l)
	if err != nil {
		return nil, nil, err
	}
	kp, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), kp, nil
}

func (ca *CA) issue(l Leaf) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("devcerts: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.Name},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(l.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, id := range l.Members {
		tmpl.URIs = append(tmpl.URIs, rdma.MemberURI(rdma.NodeID(id)))
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("devcerts: certificate %q: %w", l.Name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("devcerts: certificate %q: %w", l.Name, err)
	}
	return cert, key, nil
}

// encodeKey encodes key in PEM (PKCS #8).
func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("devcerts: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("devcerts: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // positive
}

// WriteFile writes data to path with mode perm, whole: under a temporary
// name in the same directory, synced, then renamed over path.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("devcerts: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devcerts: %w", err)
	}
	return nil
}
