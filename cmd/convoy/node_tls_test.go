package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
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
	ports, err := freePorts("127.0.0.1", 2)
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
		if _, err := waitStatus(wctx, hc, nil, n.url, func(s memberStatus) bool { return s.Serving && len(s.Members) == 2 }); err != nil {
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
	caFile := filepath.Join(dir, devcerts.CACertFile)
	cert, key := filepath.Join(dir, devcerts.MemberCertFile(1)), filepath.Join(dir, devcerts.MemberKeyFile(1))
	s := nodeSettings{TLSCA: caFile, TLSCert: cert, TLSKey: key, EtcdCA: caFile, EtcdCert: cert, EtcdKey: key}
	mt, err := s.memberTLS()
	if err != nil || mt == nil || len(mt.Certificates) != 1 || mt.RootCAs == nil || mt.ClientCAs == nil {
		t.Fatalf("member TLS %+v, %v", mt, err)
	}
	et, err := s.etcdTLS()
	if err != nil || et == nil || len(et.Certificates) != 1 || et.RootCAs == nil {
		t.Fatalf("etcd TLS %+v, %v", et, err)
	}
	if mt, err := (nodeSettings{}).memberTLS(); mt != nil || err != nil {
		t.Errorf("no files: member TLS %v, %v; want none", mt, err)
	}
	if _, err := (nodeSettings{TLSCA: cert + ".missing", TLSCert: cert, TLSKey: key}).memberTLS(); err == nil {
		t.Error("missing CA file accepted")
	}
	if _, err := (nodeSettings{TLSCA: key, TLSCert: cert, TLSKey: key}).memberTLS(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as CA: %v", err)
	}
}
