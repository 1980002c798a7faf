// Package etcddev runs a single-node etcd inside the current process, for
// development, demos and tests: start one, and give its Endpoints to
// convoy.EtcdConfig. Production deployments point the group at a real
// etcd cluster, which is its own fixed quorum rather than one embedded in
// members that come and go. The library itself never imports this
// package, so a program that does not carries no etcd server.
package etcddev

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config configures an embedded etcd server.
type Config struct {
	// Dir is the data directory. Empty means a fresh temporary directory,
	// written without fsync and removed on Close.
	Dir string
	// ClientAddr and PeerAddr are host:port addresses to listen on for
	// clients and for (absent) peers. Empty, or port 0, picks a free
	// loopback port.
	ClientAddr, PeerAddr string
	// Logger receives etcd's warnings and errors (etcd's informational
	// chatter is dropped). Nil discards everything.
	Logger *slog.Logger
	// TLS, if set, makes etcd serve its clients over TLS, at https://
	// endpoints (its peers, if any, still over plain HTTP).
	TLS *TLSFiles

	// Name is this etcd member's name; it must stay the same across
	// restarts on one data directory. Empty means DefaultName.
	Name string
	// Cluster lists every member of the etcd cluster, this one included,
	// by name: their peer URLs ("http://host:port"). Empty means a
	// single-node cluster of this member. A multi-member cluster needs
	// explicit ports (PeerAddr must be the URL Cluster gives for Name),
	// fixed across restarts. Start returns once this member serves
	// clients, which takes a quorum of the cluster: start the members
	// concurrently. On a data directory that holds a member already,
	// etcd ignores Cluster and rejoins the cluster it belongs to.
	Cluster map[string]string
}

// TLSFiles are the PEM files of an embedded etcd's TLS towards its
// clients.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate and key.
	CertFile, KeyFile string
	// CAFile, if set, holds the CAs that sign the clients' certificates
	// and the server's: etcd then requires a client certificate signed by
	// one of them (etcd's --client-cert-auth), and Server.Client trusts
	// them for the server's.
	CAFile string
	// ClientCertFile and ClientKeyFile, if set, are the certificate and
	// key that Server.Client presents.
	ClientCertFile, ClientKeyFile string
}

// DefaultName is the etcd member name when Config.Name is empty.
const DefaultName = "convoy"

// lockFile is created inside the data directory and locked while a server
// uses it, so that a second server on the same directory fails at once
// instead of blocking on etcd's own database lock.
const lockFile = "convoy-etcddev.lock"

// startAttempts bounds the retries when a port picked as free was taken
// before etcd could bind it.
const startAttempts = 5

// Server is a running embedded etcd.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	lock      *fileutil.LockedFile
	tempDir   string // removed on Close; "" if the caller gave Dir
	zlog      *zap.Logger
	// clientTLS is the TLS configuration of Client's clients, nil
	// without TLS.
	clientTLS *tls.Config

	mu      sync.Mutex
	clients []*clientv3.Client
	closed  bool
	// rootPassword is root's password once EnableAuth has turned
	// authentication on ("" before).
	rootPassword string
}

// Start starts a single-node etcd and waits until it serves clients, ctx
// ends, or it fails.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcddev: start: %w", err)
	}
	s := &Server{zlog: zapLogger(cfg.Logger)}
	if cfg.TLS != nil {
		var err error
		if s.clientTLS, err = cfg.TLS.clientConfig(); err != nil {
			return nil, err
		}
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "convoy-etcd-")
		if err != nil {
			return nil, fmt.Errorf("etcddev: temp dir: %w", err)
		}
		dir, s.tempDir = d, d
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcddev: data dir: %w", err)
	}
	lock, err := fileutil.TryLockFile(filepath.Join(dir, lockFile), os.O_WRONLY|os.O_CREATE, fileutil.PrivateFileMode)
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("etcddev: data dir %s is in use: %w", dir, err)
	}
	s.lock = lock

	for attempt := 1; ; attempt++ {
		e, picked, err := s.start(ctx, cfg, dir)
		if err == nil {
			s.etcd = e
			s.endpoints = []string{scheme(cfg) + "://" + e.Clients[0].Addr().String()}
			if cfg.Logger != nil {
				cfg.Logger.Debug("embedded etcd started", "endpoints", s.endpoints, "dir", dir)
			}
			return s, nil
		}
		if !retryable(err, picked) || attempt == startAttempts || ctx.Err() != nil {
			s.release()
			return nil, err
		}
	}
}

// start makes one attempt. picked lists the addresses whose ports were
// chosen here (a retry may choose better ones).
func (s *Server) start(ctx context.Context, cfg Config, dir string) (e *embed.Etcd, picked []string, err error) {
	clientURL, pickedC, err := listenURL(scheme(cfg), cfg.ClientAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("etcddev: client address: %w", err)
	}
	peerURL, pickedP, err := listenURL("http", cfg.PeerAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("etcddev: peer address: %w", err)
	}
	if pickedC {
		picked = append(picked, clientURL.Host)
	}
	if pickedP {
		picked = append(picked, peerURL.Host)
	}

	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	ec := embed.NewConfig()
	// Passwords are hashed at bcrypt's lowest cost (4, bcrypt.MinCost):
	// a development server's logins must not cost a loaded machine
	// seconds of CPU each (etcd's default is 10, 64 times the work).
	ec.BcryptCost = 4
	ec.Name = name
	ec.Dir = dir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	if t := cfg.TLS; t != nil {
		ec.ClientTLSInfo = transport.TLSInfo{
			CertFile:       t.CertFile,
			KeyFile:        t.KeyFile,
			TrustedCAFile:  t.CAFile,
			ClientCertAuth: t.CAFile != "",
		}
	}
	ec.InitialCluster = ec.InitialClusterFromName(name)
	if len(cfg.Cluster) > 0 {
		if cfg.Cluster[name] != peerURL.String() {
			return nil, picked, fmt.Errorf("etcddev: the cluster gives %s the peer URL %q, not %q", name, cfg.Cluster[name], peerURL)
		}
		var members []string
		for _, n := range slices.Sorted(maps.Keys(cfg.Cluster)) {
			members = append(members, n+"="+cfg.Cluster[n])
		}
		ec.InitialCluster = strings.Join(members, ",")
	}
	ec.TickMs = 10
	ec.ElectionMs = 100
	ec.EnableGRPCGateway = false
	ec.UnsafeNoFsync = s.tempDir != ""
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(s.zlog)

	e, err = embed.StartEtcd(ec)
	if err != nil {
		return nil, picked, fmt.Errorf("etcddev: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, picked, nil
	case err = <-e.Err():
		if err == nil {
			err = errors.New("stopped")
		}
		err = fmt.Errorf("etcddev: start: %w", err)
	case <-e.Server.StopNotify():
		err = errors.New("etcddev: start: server stopped before it was ready")
	case <-ctx.Done():
		err = fmt.Errorf("etcddev: start: %w", ctx.Err())
	}
	e.Close()
	return nil, picked, err
}

// scheme returns the scheme of the client URLs cfg makes.
func scheme(cfg Config) string {
	if cfg.TLS != nil {
		return "https"
	}
	return "http"
}

// clientConfig returns the TLS configuration of Server.Client's clients.
func (t *TLSFiles) clientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcddev: CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcddev: %s holds no PEM certificate", t.CAFile)
		}
	}
	if t.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcddev: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// listenURL turns a host:port into a URL of scheme, picking a free
// loopback port if addr is empty or its port is 0.
func listenURL(scheme, addr string) (u *url.URL, picked bool, err error) {
	host, port := "127.0.0.1", "0"
	if addr != "" {
		host, port, err = net.SplitHostPort(addr)
		if err != nil {
			return nil, false, err
		}
		if host == "" {
			host = "127.0.0.1"
		}
	}
	if port == "0" || port == "" {
		p, err := freePort(host)
		if err != nil {
			return nil, false, err
		}
		port, picked = strconv.Itoa(p), true
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}, picked, nil
}

// freePort asks the kernel for a free port on host. Another process may
// take it before etcd binds it; Start retries then.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// retryable says whether err is a failure to bind one of the addresses
// whose ports were picked.
func retryable(err error, picked []string) bool {
	if !errors.Is(err, syscall.EADDRINUSE) && !strings.Contains(err.Error(), "address already in use") {
		return false
	}
	for _, addr := range picked {
		if strings.Contains(err.Error(), addr) {
			return true
		}
	}
	return false
}

// Endpoints returns the client URLs to give clientv3.
func (s *Server) Endpoints() []string {
	return append([]string(nil), s.endpoints...)
}

// Client returns a new client connected to s, checked with one request
// bounded by ctx. s tracks it and closes it in Close, before stopping etcd
// (a server with open clients takes seconds to stop); the caller may also
// close it earlier. After EnableAuth, the client logs in as root. Over
// TLS (Config.TLS), it trusts the CAs of CAFile and presents the client
// certificate of ClientCertFile, if any.
func (s *Server) Client(ctx context.Context) (*clientv3.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("etcddev: server closed")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         s.clientTLS,
		Logger:      s.zlog,
		Username:    s.rootUser(),
		Password:    s.rootPassword,
	})
	if err != nil {
		return nil, fmt.Errorf("etcddev: client: %w", err)
	}
	if _, err := cli.Status(ctx, s.endpoints[0]); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcddev: client: %w", err)
	}
	s.clients = append(s.clients, cli)
	return cli, nil
}

// RootUser is the user EnableAuth creates, with etcd's root role: it may
// do anything, and grant others access.
const RootUser = "root"

// rootUser returns the user Client logs in as: RootUser once
// authentication is on, nobody before. REQUIRES: s.mu.
func (s *Server) rootUser() string {
	if s.rootPassword == "" {
		return ""
	}
	return RootUser
}

// EnableAuth turns etcd's authentication on, as an operator secures a
// cluster: it adds the user RootUser with password (not empty), grants
// it the root role, and enables authentication, within ctx. From then
// on a client must log in (clientv3.Config's Username and Password, or a
// token); Client's log in as RootUser. It works once per data directory:
// authentication stays on across restarts, and enabling it again fails.
func (s *Server) EnableAuth(ctx context.Context, password string) error {
	if password == "" {
		return errors.New("etcddev: enable auth: empty root password")
	}
	cli, err := s.Client(ctx)
	if err != nil {
		return fmt.Errorf("etcddev: enable auth: %w", err)
	}
	defer cli.Close()
	if _, err := cli.UserAdd(ctx, RootUser, password); err != nil {
		return fmt.Errorf("etcddev: enable auth: add user %s: %w", RootUser, err)
	}
	if _, err := cli.UserGrantRole(ctx, RootUser, "root"); err != nil {
		return fmt.Errorf("etcddev: enable auth: grant %s the root role: %w", RootUser, err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcddev: enable auth: %w", err)
	}
	s.mu.Lock()
	s.rootPassword = password
	s.mu.Unlock()
	return nil
}

// Close closes every client made by Client, stops etcd, and removes the
// data directory if Start created it. Calling it again does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()

	for _, c := range clients {
		c.Close() // a client the caller closed already reports an error
	}
	s.etcd.Close()
	var err error
	select {
	case e, ok := <-s.etcd.Err():
		if ok && e != nil {
			err = fmt.Errorf("etcddev: %w", e)
		}
	default:
	}
	return errors.Join(err, s.release())
}

// release unlocks the data directory and removes it if it is temporary.
func (s *Server) release() error {
	var err error
	if s.lock != nil {
		err = s.lock.Close()
		s.lock = nil
	}
	return errors.Join(err, s.removeTemp())
}

func (s *Server) removeTemp() error {
	if s.tempDir == "" {
		return nil
	}
	if err := os.RemoveAll(s.tempDir); err != nil {
		return fmt.Errorf("etcddev: remove temp dir: %w", err)
	}
	s.tempDir = ""
	return nil
}

// zapLogger returns the logger etcd and its clients log to: a no-op one,
// or one that forwards warnings and errors to lg.
func zapLogger(lg *slog.Logger) *zap.Logger {
	if lg == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{lg: lg, min: zapcore.WarnLevel})
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	lg     *slog.Logger
	min    zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{lg: c.lg, min: c.min, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	c.lg.LogAttrs(context.Background(), level, "etcd: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
