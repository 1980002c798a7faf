package etcddev

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/convoy-gcs/convoy/internal/devcerts"
)

// Environment of a re-executed test binary that runs only an etcd server
// (see runChild and startProcess).
const (
	childEnv    = "CONVOY_ETCDEMBED_CHILD" // "1" in the child
	childDirEnv = "CONVOY_ETCDEMBED_DIR"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m, leakOptions()...)
}

// leakOptions lists goroutines that outlive a closed embedded etcd: the
// HTTP connections between the members of a cluster (TestCluster), which
// etcd's peer transport leaves open when a member stops.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).abortPendingRead"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	}
}

// runChild serves etcd on the data directory named by the environment,
// prints "endpoint URL" on stdout, and runs until stdin closes (the parent
// ended or closed it) or a SIGTERM/SIGINT arrives.
func runChild() int {
	srv, err := Start(context.Background(), Config{Dir: os.Getenv(childDirEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("endpoint %s\n", srv.Endpoints()[0])
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// process is an etcd server in a child process.
type process struct {
	cmd      *exec.Cmd
	stdin    io.Closer
	endpoint string
}

// startProcess re-executes the test binary as an etcd server on dir and
// waits for its endpoint. The process is killed at the end of the test
// unless the test stopped it before.
func startProcess(t *testing.T, dir string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, stdin: stdin}
	t.Cleanup(p.kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("etcd child: %v", err)
	}
	ep, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint ")
	if !ok {
		t.Fatalf("etcd child said %q", line)
	}
	p.endpoint = ep
	return p
}

// kill ends the process without letting it clean up (a crash).
func (p *process) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// stop asks the process to close its server and waits for it.
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("etcd child: %v", err)
	}
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func client(t *testing.T, s *Server) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t *testing.T, c *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, k, v); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c *clientv3.Client, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return ""
	}
	return string(r.Kvs[0].Value)
}

func TestStartClose(t *testing.T) {
	s := start(t, Config{})
	dir := s.tempDir
	c := client(t, s)
	put(t, c, "k", "v")
	if got := get(t, c, "k"); got != "v" {
		t.Fatalf("get = %q, want v", got)
	}
	client(t, s) // a second tracked client, left open
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s still there: %v", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Client(context.Background()); err == nil {
		t.Error("Client after Close succeeded")
	}
}

// Once EnableAuth has turned authentication on, a client must log in:
// one that does not is refused, one with a wrong password cannot
// connect, and Client's log in as root.
func TestEnableAuth(t *testing.T) {
	s := start(t, Config{})
	defer s.Close()
	anonymous := client(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.EnableAuth(ctx, "secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := anonymous.Put(ctx, "k", "v"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("put without logging in: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	put(t, client(t, s), "k", "v")
	login := func(password string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Username: RootUser, Password: password})
	}
	c, err := login("secret")
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, "k"); got != "v" {
		t.Errorf("get = %q, want v", got)
	}
	c.Close()
	if c, err := login("wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		if err == nil {
			c.Close()
		}
		t.Errorf("login with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}
	if err := s.EnableAuth(ctx, "again"); err == nil {
		t.Error("EnableAuth twice succeeded")
	}
}

// With TLS and a CA for clients, etcd serves at an https endpoint and
// requires a client certificate of the CA: Client's present one; a
// client without one cannot connect, nor one that does not trust the
// server.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	if err := devcerts.Write(dir, devcerts.Options{}); err != nil {
		t.Fatal(err)
	}
	files := &TLSFiles{
		CertFile: filepath.Join(dir, devcerts.EtcdCertFile), KeyFile: filepath.Join(dir, devcerts.EtcdKeyFile),
		CAFile:         filepath.Join(dir, devcerts.CACertFile),
		ClientCertFile: filepath.Join(dir, devcerts.ClientCertFile), ClientKeyFile: filepath.Join(dir, devcerts.ClientKeyFile),
	}
	s := start(t, Config{TLS: files})
	defer s.Close()
	if ep := s.Endpoints(); len(ep) != 1 || !strings.HasPrefix(ep[0], "https://127.0.0.1:") {
		t.Fatalf("endpoints %q, want https", ep)
	}
	put(t, client(t, s), "k", "v")

	tlsOf := func(f TLSFiles) *tls.Config {
		cfg, err := f.clientConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for name, cfg := range map[string]*tls.Config{
		"no client certificate": tlsOf(TLSFiles{CAFile: files.CAFile}),
		"not trusting the CA":   tlsOf(TLSFiles{ClientCertFile: files.ClientCertFile, ClientKeyFile: files.ClientKeyFile}),
	} {
		c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), TLS: cfg, DialTimeout: 300 * time.Millisecond, Logger: zap.NewNop()})
		if err != nil {
			continue // refused while dialing
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		if _, err := c.Get(ctx, "k"); err == nil {
			t.Errorf("%s: a client read etcd", name)
		}
		cancel()
		c.Close()
	}
}

func TestTwoServers(t *testing.T) {
	a := start(t, Config{})
	defer a.Close()
	b := start(t, Config{})
	defer b.Close()
	if a.Endpoints()[0] == b.Endpoints()[0] {
		t.Fatalf("both servers on %s", a.Endpoints()[0])
	}
	put(t, client(t, a), "k", "a")
	put(t, client(t, b), "k", "b")
	if got := get(t, client(t, a), "k"); got != "a" {
		t.Errorf("a: get = %q, want a", got)
	}
}

func TestExplicitAddr(t *testing.T) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := start(t, Config{ClientAddr: addr, PeerAddr: "127.0.0.1:0"})
	defer s.Close()
	if got, want := s.Endpoints()[0], "http://"+addr; got != want {
		t.Errorf("endpoint %s, want %s", got, want)
	}
	// The address is taken now: a second server must fail, not retry.
	if s2, err := Start(context.Background(), Config{ClientAddr: addr}); err == nil {
		s2.Close()
		t.Fatal("second server on the same address started")
	}
}

func TestRetryable(t *testing.T) {
	inUse := errors.New("etcddev: start: listen tcp 127.0.0.1:4001: bind: address already in use")
	for _, tc := range []struct {
		err    error
		picked []string
		want   bool
	}{
		{inUse, []string{"127.0.0.1:4001"}, true},
		{inUse, []string{"127.0.0.1:4002", "127.0.0.1:4001"}, true},
		{inUse, []string{"127.0.0.1:4002"}, false},
		{inUse, nil, false},
		{errors.New("permission denied 127.0.0.1:4001"), []string{"127.0.0.1:4001"}, false},
	} {
		if got := retryable(tc.err, tc.picked); got != tc.want {
			t.Errorf("retryable(%q, %q) = %v, want %v", tc.err, tc.picked, got, tc.want)
		}
	}
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	s := start(t, Config{Dir: dir})
	put(t, client(t, s), "k", "kept")
	// A second server on the same directory fails at once.
	if s2, err := Start(context.Background(), Config{Dir: dir}); err == nil {
		s2.Close()
		t.Fatal("second server on the same dir started")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("data dir removed: %v", err)
	}
	s = start(t, Config{Dir: dir})
	defer s.Close()
	if got := get(t, client(t, s), "k"); got != "kept" {
		t.Fatalf("after restart: get = %q, want kept", got)
	}
}

func TestStartCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := Start(ctx, Config{}); err == nil {
		s.Close()
		t.Fatal("Start with a canceled context succeeded")
	}
}

// TestProcess runs etcd in a child process, crashes it, and restarts it on
// the same directory.
func TestProcess(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, dir)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, "k", "durable")
	c.Close()
	p.kill()

	p = startProcess(t, dir)
	c, err = clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := get(t, c, "k")
	c.Close()
	if got != "durable" {
		t.Fatalf("after crash: get = %q, want durable", got)
	}
	p.stop(t)
}

// TestCluster starts a three-member cluster, writes through one member
// and reads through another, then restarts a member on its directory.
func TestCluster(t *testing.T) {
	names := []string{"e1", "e2", "e3"}
	peers := make(map[string]string)
	clients := make(map[string]string)
	for _, n := range names {
		for _, m := range []map[string]string{peers, clients} {
			p, err := freePort("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			m[n] = fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
	cluster := make(map[string]string)
	for _, n := range names {
		cluster[n] = "http://" + peers[n]
	}
	dirs := make(map[string]string)
	cfg := func(n string) Config {
		if dirs[n] == "" {
			dirs[n] = t.TempDir()
		}
		return Config{Name: n, Dir: dirs[n], ClientAddr: clients[n], PeerAddr: peers[n], Cluster: cluster}
	}
	servers := make([]*Server, len(names))
	errs := make([]error, len(names))
	done := make(chan int)
	for i, n := range names {
		c := cfg(n)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			servers[i], errs[i] = Start(ctx, c)
			done <- i
		}()
	}
	for range names {
		<-done
	}
	defer func() {
		for _, s := range servers {
			if s != nil {
				s.Close()
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	put(t, client(t, servers[0]), "k", "v")
	if got := get(t, client(t, servers[2]), "k"); got != "v" {
		t.Fatalf("get through e3 = %q, want v", got)
	}
	if err := servers[1].Close(); err != nil {
		t.Fatal(err)
	}
	servers[1] = start(t, cfg("e2"))
	if got := get(t, client(t, servers[1]), "k"); got != "v" {
		t.Fatalf("get through e2 after its restart = %q, want v", got)
	}

	bad := cfg("e1")
	bad.Cluster = map[string]string{"e1": "http://127.0.0.1:1"}
	if s, err := Start(context.Background(), bad); err == nil {
		s.Close()
		t.Fatal("Start with a cluster that gives another peer URL succeeded")
	}
}
