package main

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"time"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/devcerts"
)

// tokenFileName is the file, next to the certificates, that holds the
// bearer token of a local cluster's APIs ("convoy cluster -tls", "convoy
// demo -tls").
const tokenFileName = "http-token"

// devCertsValidity is how long the certificates of a local cluster are
// valid: longer than any run, and renewed at each start.
const devCertsValidity = 30 * 24 * time.Hour

// devTLS secures a local cluster: the certificates "convoy certs" makes
// and a bearer token, in one directory. Members authenticate each other
// with mutual TLS, serve their APIs over TLS behind the token, and reach
// the embedded etcd over TLS with the client certificate.
type devTLS struct {
	dir   string
	token string
	// client trusts the CA: for the command's own requests to the APIs.
	client *tls.Config
}

// setUpDevTLS writes into dir the certificates of members 1 to members
// (from the CA there, or a new one) and a token (kept if dir holds one).
func setUpDevTLS(dir string, members int) (*devTLS, error) {
	err := devcerts.Write(dir, devcerts.Options{Members: members, Validity: devCertsValidity})
	if err != nil {
		return nil, err
	}
	d := &devTLS{dir: dir}
	tokenFile := d.file(tokenFileName)
	d.token, err = readSecretFile(tokenFile)
	if errors.Is(err, fs.ErrNotExist) {
		d.token = rand.Text()
		err = devcerts.WriteFile(tokenFile, []byte(d.token+"\n"), 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("HTTP token: %w", err)
	}
	pool, err := loadCertPool(d.file(devcerts.CACertFile))
	if err != nil {
		return nil, err
	}
	d.client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return d, nil
}

// file returns the path of the file name in the directory.
func (d *devTLS) file(name string) string { return filepath.Join(d.dir, name) }

// etcdTLS returns the embedded etcd's TLS, nil if d is: its
// certificate, and client certificates of the CA required.
func (d *devTLS) etcdTLS() *etcddev.TLSFiles {
	if d == nil {
		return nil
	}
	return &etcddev.TLSFiles{
		CertFile:       d.file(devcerts.EtcdCertFile),
		KeyFile:        d.file(devcerts.EtcdKeyFile),
		CAFile:         d.file(devcerts.CACertFile),
		ClientCertFile: d.file(devcerts.ClientCertFile),
		ClientKeyFile:  d.file(devcerts.ClientKeyFile),
	}
}

// nodeArgs returns the flags of "convoy node" for member id: its
// certificate between members and for its API, the token's file, and
// etcd's CA with the client certificate; none if d is nil.
func (d *devTLS) nodeArgs(id uint64) []string {
	if d == nil {
		return nil
	}
	cert, key := d.file(devcerts.MemberCertFile(id)), d.file(devcerts.MemberKeyFile(id))
	ca := d.file(devcerts.CACertFile)
	return []string{
		"-tls-ca", ca, "-tls-cert", cert, "-tls-key", key,
		"-http-cert", cert, "-http-key", key, "-http-token-file", d.file(tokenFileName),
		"-etcd-ca", ca, "-etcd-cert", d.file(devcerts.ClientCertFile), "-etcd-key", d.file(devcerts.ClientKeyFile),
	}
}

// scheme returns the scheme of the members' API URLs, d nil or not.
func (d *devTLS) scheme() string {
	if d == nil {
		return "http"
	}
	return "https"
}

// transport returns t, trusting the CA if d is not nil.
func (d *devTLS) transport(t *http.Transport) *http.Transport {
	if d != nil {
		t.TLSClientConfig = d.client.Clone()
	}
	return t
}

// apiToken returns the token of the APIs, "" if d is nil.
func (d *devTLS) apiToken() string {
	if d == nil {
		return ""
	}
	return d.token
}
