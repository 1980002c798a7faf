package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/etcddev"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/devcerts"
	"github.com/convoy-gcs/convoy/internal/freeport"
	"github.com/convoy-gcs/convoy/rdma"
)

// safeBuffer is a bytes.Buffer safe for a writer and a reader at once.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNodeMutualTLS runs two "convoy node" members of the key-value
// store in this process, talking to each other over mutual TLS with the
// certificates "convoy certs" made: they form a group, a value put
// through one is read from the other's local state, each prints its
// serving line, and "convoy status" finds both through the URLs they
// recorded in etcd. SIGTERM (here: the end of the context) closes them
// with status 0.
func TestNodeMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a group")
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if code, _, errOut := runCommand(t, &cli{}, "certs", "-out", certs, "-members", "2"); code != 0 {
		t.Fatalf("convoy certs: exit %d: %s", code, errOut)
	}
	caFile := filepath.Join(certs, devcerts.CACertFile)
	srv, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ports, err := freeport.Pick("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	type node struct {
		url         string
		stdout      safeBuffer
		stderr      safeBuffer
		exit        chan int
		certs, keys string
	}
	nodes := make([]*node, 2)
	for i := range nodes {
		n := &node{url: "http://" + hostPort("127.0.0.1", ports[i]), exit: make(chan int, 1)}
		n.certs, n.keys = filepath.Join(certs, devcerts.MemberCertFile(uint64(i+1))), filepath.Join(certs, devcerts.MemberKeyFile(uint64(i+1)))
		nodes[i] = n
		args := []string{"node",
			"-id", strconv.Itoa(i + 1), "-app", "kv", "-initial", "2",
			"-etcd", strings.Join(srv.Endpoints(), ","), "-prefix", "/tls/",
			"-data", filepath.Join(dir, "data"+strconv.Itoa(i+1)),
			"-http", hostPort("127.0.0.1", ports[i]),
			"-tls-ca", caFile, "-tls-cert", n.certs, "-tls-key", n.keys,
			"-heartbeat", "10ms", "-suspect-timeout", "250ms",
		}
		go func() {
			n.exit <- run(ctx, args, &cli{stdin: strings.NewReader(""), stdout: &n.stdout, stderr: &n.stderr})
		}()
	}
	defer func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d stderr:\n%s", i+1, n.stderr.String())
			}
		}
	}()

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		if _, err := waitStatus(wctx, apiClient{hc: hc}, nil, n.url, func(s memberStatus) bool { return s.Serving && len(s.Members) == 2 }); err != nil {
			t.Fatalf("%s: %v", n.url, err)
		}
	}
	if _, err := kvclient.New([]string{nodes[0].url}, kvclient.WithHTTPClient(hc)).Put(wctx, "k", []byte("over TLS")); err != nil {
		t.Fatal(err)
	}
	// A linearizable read: member 2 may apply the put a moment after
	// member 1 answered it, so its local (stale) state need not hold it
	// yet; a read barrier through member 2 crosses the TLS links too.
	got, _, err := kvclient.New([]string{nodes[1].url}, kvclient.WithHTTPClient(hc)).Get(wctx, "k")
	if err != nil || string(got) != "over TLS" {
		t.Errorf("read from member 2: %q, %v", got, err)
	}
	for i, n := range nodes {
		var line servingLine
		if err := json.Unmarshal([]byte(n.stdout.String()), &line); err != nil {
			t.Errorf("node %d stdout %q: %v", i+1, n.stdout.String(), err)
		} else if want := (servingLine{Serving: true, ID: uint64(i + 1), App: appKV, HTTP: n.url, PID: os.Getpid()}); line != want {
			t.Errorf("node %d serving line %+v, want %+v", i+1, line, want)
		}
	}

	code, out, errOut := runCommand(t, &cli{}, "status", "-etcd", strings.Join(srv.Endpoints(), ","), "-prefix", "/tls/", "-json")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 2 || r.inView() != 2 {
		t.Fatalf("status %+v: want two members in the view", r)
	}
	pool, err := loadCertPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Members {
		// The transport speaks TLS and refuses a client without a
		// certificate of the CA's (TLS 1.3 tells it after the handshake).
		conn, err := tls.Dial("tcp", m.Addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("member %d's transport at %s, dialed without a client certificate: %v; want it refused", m.ID, m.Addr, err)
		}
		if m.HTTP != nodes[m.ID-1].url || m.Status == nil || !m.Status.Serving || m.Status.Applied < 1 || m.Status.Tail != nil {
			t.Errorf("status of member %d: %+v, own status %+v", m.ID, m, m.Status)
		}
	}

	stop()
	for i, n := range nodes {
		select {
		case code := <-n.exit:
			if code != 0 {
				t.Errorf("node %d exited with %d", i+1, code)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("node %d did not close", i+1)
		}
	}
}

// TestNodeTLSFiles checks that the TLS settings load into the
// configurations the library and the etcd client get, and that bad files
// are refused.
func TestNodeTLSFiles(t *testing.T) {
	dir := t.TempDir()
	if err := devcerts.Write(dir, devcerts.Options{Members: 1}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	caFile := filepath.Join(dir, devcerts.CACertFile)
	cert, key := filepath.Join(dir, devcerts.MemberCertFile(1)), filepath.Join(dir, devcerts.MemberKeyFile(1))
	s := nodeSettings{TLSCA: caFile, TLSCert: cert, TLSKey: key, EtcdCA: caFile, EtcdCert: cert, EtcdKey: key, HTTPCert: cert, HTTPKey: key}
	member, api, err := s.tlsFiles(log)
	if err != nil || member == nil || api == nil || member.roots() == nil || api.roots() != nil {
		t.Fatalf("TLS files %+v, %+v, %v", member, api, err)
	}
	if c, err := member.certificate(); err != nil || !rdma.CertifiesID(c.Leaf, 1) {
		t.Errorf("member certificate %v, %v", c, err)
	}
	if mt := member.memberConfig(); mt.GetCertificate == nil || mt.GetClientCertificate == nil || mt.GetConfigForClient == nil || mt.VerifyConnection == nil {
		t.Errorf("member TLS %+v: want the certificate and the CAs taken at each handshake", mt)
	}
	if pt := s.peersTransport(member, api); pt.DialTLSContext == nil {
		t.Errorf("the peers' transport %+v: want the member CA, as it stands at each connection", pt)
	}
	et, err := s.etcdTLS()
	if err != nil || et == nil || len(et.Certificates) != 1 || et.RootCAs == nil {
		t.Fatalf("etcd TLS %+v, %v", et, err)
	}
	if member, api, err := (nodeSettings{}).tlsFiles(log); member != nil || api != nil || err != nil {
		t.Errorf("no files: TLS files %v, %v, %v; want none", member, api, err)
	}
	if pt := (nodeSettings{}).peersTransport(nil, nil); pt.DialTLSContext != nil || pt.TLSClientConfig != nil {
		t.Errorf("no CA: the peers' transport %+v, want the system's CAs", pt)
	}
	if _, _, err := (nodeSettings{TLSCA: cert + ".missing", TLSCert: cert, TLSKey: key}).tlsFiles(log); err == nil {
		t.Error("missing CA file accepted")
	}
	if _, _, err := (nodeSettings{TLSCA: key, TLSCert: cert, TLSKey: key}).tlsFiles(log); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as CA: %v", err)
	}
	if _, _, err := (nodeSettings{HTTPCert: cert, HTTPKey: caFile}).tlsFiles(log); err == nil || !strings.Contains(err.Error(), "HTTP TLS") {
		t.Errorf("a certificate as key: %v", err)
	}
}

// TestNodeReloadsCertificates runs a member with mutual TLS and its API
// over TLS, then renews its certificates ("convoy certs" run again on
// their directory) while it runs: new connections to its transport and
// to its API get the new certificates, with no restart. Files that
// cannot be used then (a key that is not the certificate's) leave the
// ones in use in place.
func TestNodeReloadsCertificates(t *testing.T) {
	certs := t.TempDir()
	tokenFile, hc := writeCerts(t, certs, 1)
	etcd := startTestEtcd(t)
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	s := tlsTestSettings(t, etcd.Endpoints(), certs, tokenFile, 1)
	s.Listen = hostPort("127.0.0.1", ports[0])
	s.TLSReloadInterval = 20 * time.Millisecond
	var logs safeBuffer
	line, _ := startTestNodeLog(t, s, slog.New(slog.NewTextHandler(&logs, nil)))

	pool, err := loadCertPool(filepath.Join(certs, devcerts.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(certs, devcerts.ClientCertFile), filepath.Join(certs, devcerts.ClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	// served returns the serial numbers of the certificates a new
	// connection to the transport and one to the API get.
	served := func() (transport, api string) {
		t.Helper()
		conn, err := tls.Dial("tcp", s.Listen, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}})
		if err != nil {
			t.Fatal(err)
		}
		transport = conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
		conn.Close()
		hc.CloseIdleConnections()
		resp, err := hc.Get(line.HTTP + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return transport, resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	fileSerial := func() string {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf.SerialNumber.String()
	}
	first := fileSerial()
	if tr, api := served(); tr != first || api != first {
		t.Fatalf("serving %s (transport) and %s (API), want %s", tr, api, first)
	}

	if code, _, errOut := runCommand(t, &cli{}, "certs", "-out", certs, "-members", "1"); code != 0 {
		t.Fatalf("convoy certs again: exit %d: %s", code, errOut)
	}
	renewed := fileSerial()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr, api := served()
		if tr == renewed && api == renewed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serving %s (transport) and %s (API) 10s after the renewal, want %s", tr, api, renewed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, what := range []string{"member TLS", "HTTP TLS"} {
		if !strings.Contains(logs.String(), what+": read the files again") {
			t.Errorf("no log of the %s reload:\n%s", what, logs.String())
		}
	}

	// A key that is not the certificate's: once the member has seen it
	// (and said so), it goes on with the renewed files.
	deadline = time.Now().Add(10 * time.Second)
	if err := os.WriteFile(s.TLSKey, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(logs.String(), "member TLS: the files changed but cannot be used; keeping those in use") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the bad key:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tr, api := served(); tr != renewed || api != renewed {
		t.Errorf("serving %s (transport) and %s (API) after a bad key was written, want %s kept", tr, api, renewed)
	}
	if _, err := waitStatus(t.Context(), apiClient{hc: hc, token: testToken}, nil, line.HTTP, func(s memberStatus) bool { return s.Serving }); err != nil {
		t.Error(err)
	}
}
