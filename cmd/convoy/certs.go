package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/convoy-gcs/convoy/internal/devcerts"
)

const certsUsage = `Usage:
  convoy certs -out DIR -members N [-hosts HOST,...] [-valid DURATION]

Makes the certificates of a development deployment, with nothing but
this program (Go's crypto/x509; ECDSA P-256 keys). Into DIR (created, for
its owner only, if missing) it writes:

  ca.crt, ca.key                  the certificate authority that signs the others
  member-<i>.crt, member-<i>.key  member i's, for i from 1 to N
  etcd.crt, etcd.key              a server certificate for an etcd
  client.crt, client.key          a client certificate for tools and clients

A member's certificate names its id as the URI subject alternative name
convoy://member/<i>, which members check of each other over mutual TLS,
and the hosts localhost, 127.0.0.1, ::1 and those of -hosts. It is good
for both ends of a connection: give it to "convoy node" as -tls-cert and
-tls-key (with -tls-ca ca.crt), and as -http-cert and -http-key to serve
the HTTP API over TLS. etcd.crt is valid for the same hosts.
client.crt names no member and no host: it identifies a tool or a
client, to an etcd that asks for client certificates for one
(-etcd-cert and -etcd-key of "convoy node" and "convoy status").

Keys get mode 0600. If DIR holds a CA already, the new certificates come
from it: running the command again renews every certificate (new keys
and serial numbers) or adds members, and running members pick up their
new files without a restart ("convoy node" reads its certificate files
again when they change). The CA's key lies next to the certificates,
unencrypted: this CA is for development.
`

// runCerts is "convoy certs".
func runCerts(_ context.Context, args []string, c *cli) error {
	fs := newFlagSet("certs", certsUsage, c)
	out := fs.String("out", "", "`directory` to write the files into (required)")
	members := fs.Int("members", 0, "how many members get a certificate, ids 1 to `N` (required)")
	hosts := fs.String("hosts", "", "further DNS names and IP `addresses`, comma-separated, that the member and etcd certificates are valid for")
	valid := fs.Duration("valid", devcerts.DefaultValidity, "how `long` the certificates are valid (a new CA: ten years)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return usagef("certs: -out is required")
	case *members < 1:
		return usagef("certs: -members must be positive")
	case *valid <= 0:
		return usagef("certs: -valid must be positive")
	}
	err := devcerts.Write(*out, devcerts.Options{Members: *members, Hosts: splitList(*hosts), Validity: *valid})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wrote the CA (%s), %d member certificates (%s to %s), %s and %s into %s, valid for %v\n",
		devcerts.CACertFile, *members, devcerts.MemberCertFile(1), devcerts.MemberCertFile(uint64(*members)),
		devcerts.EtcdCertFile, devcerts.ClientCertFile, filepath.Clean(*out), *valid)
	return nil
}
