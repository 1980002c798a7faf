package rdma

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
)

// MemberURI returns the URI that names node id in a certificate, as a URI
// subject alternative name: convoy://member/<id>. Over TLS, a node may
// claim only an id its certificate names (TCPConfig.VerifyPeer).
func MemberURI(id NodeID) *url.URL {
	return &url.URL{Scheme: "convoy", Host: "member", Path: "/" + strconv.FormatUint(uint64(id), 10)}
}

// CertifiesID reports whether cert names node id (MemberURI).
func CertifiesID(cert *x509.Certificate, id NodeID) bool {
	want := MemberURI(id).String()
	for _, u := range cert.URIs {
		if u.String() == want {
			return true
		}
	}
	return false
}

// errNoPeerCert is the error of a TLS connection whose peer presented no
// certificate, which a verified connection never is.
var errNoPeerCert = errors.New("no peer certificate")

// verifyPeerID is the default TCPConfig.VerifyPeer: the peer's leaf
// certificate must name the id it claims.
func verifyPeerID(id NodeID, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errNoPeerCert
	}
	if leaf := cs.PeerCertificates[0]; !CertifiesID(leaf, id) {
		return fmt.Errorf("its certificate (%q) does not name node %d (%s)", leaf.Subject.CommonName, id, MemberURI(id))
	}
	return nil
}
