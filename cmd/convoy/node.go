package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/convoy-gcs/convoy"
	sharedlog "github.com/convoy-gcs/convoy/examples/log"
	"github.com/convoy-gcs/convoy/examples/paxos"
	"github.com/convoy-gcs/convoy/examples/pubsub"
	"github.com/convoy-gcs/convoy/internal/skewclock"
)

const nodeCmdUsage = `Usage:
  convoy node -id N -app kv|log|pubsub -etcd URL,... -data DIR [flags]
  convoy node -config FILE [flags]

Runs one member of a Convoy group that serves an example application over
HTTP/JSON: the replicated key-value store (-app kv, see examples/paxos),
the shared log (-app log, see examples/log) or pub/sub (-app pubsub, see
examples/pubsub). All use durable delivery: the member keeps its log in
-data, and restarted on the same directory it replays it and rejoins
(or, if the whole group went down, restarts the group from the members'
logs); a pub/sub member serves its topics' event streams from there,
and subscribes again to the topics its log holds.

The group's views live in etcd (-etcd): a real etcd cluster in a
deployment, the embedded one of "convoy cluster" or "convoy demo" on one
machine. The member registers there under the -prefix; members with the
same prefix form one group; the first -initial of them found it.

Every setting is a flag, an environment variable (named in brackets
below), and a field of the JSON file that -config (or CONVOY_CONFIG)
names, the flag's name with "_" for "-". A flag overrides the variable,
which overrides the file. Durations are written like "250ms"; etcd is a
comma-separated string or an array. For example:

  {"id": 1, "app": "kv", "etcd": ["http://10.0.0.9:2379"], "data": "/var/lib/convoy",
   "listen": "10.0.0.1:7000", "http": "10.0.0.1:7101", "initial": 3}

A secured etcd: -etcd-ca, -etcd-cert and -etcd-key set up TLS (the
client certificate also logs in, to an etcd run with
--client-cert-auth); with authentication enabled, -etcd-username logs in
with the password in CONVOY_ETCD_PASSWORD or on the first line of
-etcd-password-file (a -etcd-password flag shows in the process list).

Members authenticate each other with mutual TLS given -tls-ca, -tls-cert
and -tls-key: a member's certificate must name its id as the URI
convoy://member/<id> ("convoy certs" makes such certificates for
development). -http-cert and -http-key serve the HTTP API over TLS
(HTTP/1.1; the base URL becomes https://...). The node reads its
certificate, key and CA files (the member's and the API's) again when
their contents change, every -tls-reload-interval and on SIGHUP, and
logs it: connections made from then on use the new ones, and those
already up go on. Files that cannot be used (a key that does not match,
a file half written) are logged and the ones in use kept.

A bearer token, in CONVOY_HTTP_TOKEN (or the settings file's
http_token) or on the first line of -http-token-file (there is no flag:
a flag shows in the process list), guards the API: a request without
the header "Authorization: Bearer <token>", or with another token, gets
401 with "WWW-Authenticate: Bearer". That holds for every route: the application's, the key-value
store's stream upgrade (GET /stream), GET /status and GET /group. Only
GET /, the page's code, stays open: it holds no data, and reads it from
GET /group with the token it is given (open it as /#token=<token>). The
members of a group share their token: this node sends it when it reads
the others' status for GET /group, trusting -http-ca (default: -tls-ca)
for their certificates. Send the token over TLS only. The operator
endpoints of -metrics-addr (/metrics, /debug/pprof/) are not guarded:
listen for them on a private address.

The node refuses what it cannot carry rather than queue it: it keeps at
most -max-conns connections to its API open (closing new ones at once
beyond), and the service serves at most -max-requests requests holding
at most -max-request-bytes (the key-value store's requests, the shared
log's appends, the pub/sub service's publishes), and the key-value store
and the pub/sub service at most -max-streams streams (event streams for
pub/sub), refusing the others with 503 and Retry-After (a key-value
stream's request first waits up to its Retry-After for a place); the
group's window (-window-messages, -window-bytes) bounds the messages sent
and not yet delivered. The key-value store's package documentation (examples/paxos,
"Overload and memory") gives the bound on a member's memory they make.

-clock-offset and -clock-drift-ppm set the member's clock (which stamps
its messages and times its failure detector) off the machine's, to test
a group under clock skew: skew between members costs latency, never
correctness.

The node answers 503 on -http until it takes part in a view, then serves
the application's API. From the start it also serves, at GET /group, the
report "convoy status -json" prints, read from etcd and the members by
this node, and at GET / a page that shows it (the view, every member,
its frontiers and lag, suspicions, members that do not answer) and
refreshes itself every second. It records its API's base URL in etcd
under {prefix}http/{id}, on a lease, for "convoy status"; prints one
JSON line on stdout once it serves:

  {"serving":true,"id":1,"app":"kv","http":"http://10.0.0.1:7101","pid":4242}

and runs until SIGINT or SIGTERM, when it closes its group and exits. If
its group fails (its disk failed, for one), it exits with status 1. It
logs to stderr (log/slog text) at -log-level.
`

// Timeouts of a node.
const (
	// nodeShutdownTimeout bounds the HTTP server's shutdown, once the
	// group is closed (requests still waiting have had their 503).
	nodeShutdownTimeout = 5 * time.Second
	// nodeCheckInterval is how often the node checks that its group has
	// not failed.
	nodeCheckInterval = 500 * time.Millisecond
	// etcdDialTimeout bounds connecting to etcd.
	etcdDialTimeout = 5 * time.Second
	// registerRetry is the pause before registering the API's URL again
	// after etcd failed or the lease was lost.
	registerRetry = time.Second
	// defaultRegisterTTL is the TTL of the URL's lease when the settings
	// leave the library's default.
	defaultRegisterTTL = 5 * time.Second
	// nodeIdleTimeout closes the API's idle keep-alive connections, which
	// would otherwise hold places of -max-conns for good.
	nodeIdleTimeout = 30 * time.Second
)

// Bounds of the HTTP API's connections, which a member's memory bound
// counts (see examples/paxos).
const (
	// defaultMaxConns is what -max-conns 0 (its default) stands for.
	defaultMaxConns = 1024
	// nodeMaxHeaderBytes bounds a request's header (net/http reads up to
	// 4 KiB more): the API's requests carry a few short headers.
	nodeMaxHeaderBytes = 16 << 10
)

// service is what a node runs: *paxos.Node or *sharedlog.Node.
type service interface {
	Handler() http.Handler
	Group() *convoy.Group
	Close() error
}

// servingLine is what a node prints on stdout once it serves.
type servingLine struct {
	Serving bool   `json:"serving"`
	ID      uint64 `json:"id"`
	App     string `json:"app"`
	HTTP    string `json:"http"`
	PID     int    `json:"pid"`
	// Metrics is the address of the operator endpoints, if served.
	Metrics string `json:"metrics,omitempty"`
}

// runNode is "convoy node".
func runNode(ctx context.Context, args []string, c *cli) error {
	s, err := loadNodeSettings(args, c)
	if err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	level, _ := parseLogLevel(s.LogLevel) // checked
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})).With("app", s.App)
	return serveNode(ctx, s, c.stdout, log)
}

// serveNode runs the member s describes until ctx ends.
func serveNode(ctx context.Context, s nodeSettings, stdout io.Writer, log *slog.Logger) error {
	etcdTLS, err := s.etcdTLS()
	if err != nil {
		return err
	}
	etcdUser, etcdPassword, err := s.etcdLogin()
	if err != nil {
		return err
	}
	token, err := s.httpToken()
	if err != nil {
		return err
	}
	memberFiles, httpFiles, err := s.tlsFiles(log)
	if err != nil {
		return err
	}
	var reloaded []*tlsFiles
	for _, f := range []*tlsFiles{memberFiles, httpFiles} {
		if f != nil {
			reloaded = append(reloaded, f)
		}
	}
	if len(reloaded) > 0 {
		stopWatching := watchFiles(ctx, s.TLSReloadInterval, reloaded)
		defer stopWatching()
	}

	// The operator endpoints, if any, serve first: they count what the
	// API refuses too.
	mp := metric.MeterProvider(noop.NewMeterProvider())
	var metricsAddr string
	if s.MetricsAddr != "" {
		ops, err := startOps(s.MetricsAddr, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := ops.close(); err != nil {
				log.Warn("closing the operator endpoints", "err", err)
			}
		}()
		mp, metricsAddr = ops.mp, ops.addr.String()
	}
	refusedConns, err := mp.Meter("github.com/convoy-gcs/convoy/cmd/convoy").
		Int64Counter("convoy.node.refused.connections", metric.WithUnit("{connection}"),
			metric.WithDescription("Connections to the HTTP API closed as soon as accepted, because -max-conns were open."))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	// The API listens from the start, answering 503 until the member
	// takes part in a view, so that clients move on to other members.
	ln, err := net.Listen("tcp", s.HTTP)
	if err != nil {
		return fmt.Errorf("HTTP API: %w", err)
	}
	// Below TLS: a connection refused costs no handshake.
	ln = limitConns(ln, cmp.Or(s.MaxConns, defaultMaxConns), refusedConns)
	scheme := "http"
	if s.HTTPCert != "" {
		ln = tls.NewListener(ln, httpFiles.serverConfig())
		scheme = "https"
	}
	url := s.HTTPURL
	if url == "" {
		url = baseURL(scheme, ln.Addr())
	}
	// The client does not wait for etcd: the API starts serving at once.
	etcd, err := dialEtcd(s.Etcd, etcdTLS, etcdUser, etcdPassword)
	if err != nil {
		ln.Close()
		return err
	}
	defer etcd.Close()
	// The group's page and its report (GET / and /group) read etcd and
	// the other members, so they serve while this member starts too.
	// The report's reads of the other members carry this member's token:
	// a group shares one.
	var h switchHandler
	peers := &http.Client{Transport: s.peersTransport(memberFiles, httpFiles)}
	defer peers.CloseIdleConnections()
	page := &groupPage{etcd: etcd, api: apiClient{hc: peers, token: token}, prefix: s.Prefix, log: log, app: &h}
	handler, err := guardPage(page, token)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       nodeIdleTimeout,
		MaxHeaderBytes:    nodeMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		// Over TLS too, HTTP/1.1 only: see tlsFiles.serverConfig.
		Protocols: httpOneOnly(),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), nodeShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("HTTP server shutdown", "err", err)
		}
	}()

	ttl := s.LeaseTTL
	if ttl == 0 {
		ttl = defaultRegisterTTL
	}
	rec := httpRecord{ID: s.ID, App: s.App, URL: url, PID: os.Getpid()}
	stopRegister := registerHTTP(ctx, etcd, s.Prefix, rec, ttl, log)
	defer stopRegister()

	cfg := convoy.Config{
		Self: convoy.NodeID(s.ID),
		Etcd: &convoy.EtcdConfig{
			Endpoints: s.Etcd,
			Prefix:    s.Prefix,
			TLS:       etcdTLS,
			Username:  etcdUser,
			Password:  etcdPassword,
			LeaseTTL:  s.LeaseTTL,
		},
		ListenAddr:        s.Listen,
		Addr:              s.Addr,
		InitialMembers:    s.Initial,
		HeartbeatInterval: s.Heartbeat,
		SuspectTimeout:    s.SuspectTimeout,
		StallTimeout:      s.StallTimeout,
		WindowMessages:    s.WindowMessages,
		WindowBytes:       s.WindowBytes,
		Durable:           &convoy.DurableConfig{Dir: s.Data},
		Logger:            log,
		MeterProvider:     mp,
	}
	if memberFiles != nil {
		cfg.TLS = memberFiles.memberConfig()
	}
	if s.OTLPEndpoint != "" {
		tp, err := startTracing(ctx, s.OTLPEndpoint, s.ID)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), nodeShutdownTimeout)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("sending the last traces", "err", err)
			}
		}()
		cfg.TracerProvider = tp
	}
	if s.ClockOffset != 0 || s.ClockDriftPPM != 0 {
		cfg.Clock = skewclock.New(s.ClockOffset, s.ClockDriftPPM)
		log.Info("clock set off", "offset", s.ClockOffset, "drift_ppm", s.ClockDriftPPM)
	}
	log.Info("opening the group", "id", s.ID, "http", url, "prefix", s.Prefix, "data", s.Data)
	svc, err := openService(ctx, s, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := svc.Close(); err != nil {
			log.Warn("closing the group", "err", err)
		}
	}()
	app := svc.Handler()
	h.h.Store(&app)
	line, err := json.Marshal(servingLine{Serving: true, ID: s.ID, App: s.App, HTTP: url, PID: os.Getpid(), Metrics: metricsAddr})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		log.Warn("writing to stdout", "err", err)
	}
	v, _ := svc.Group().View()
	log.Info("serving", "id", s.ID, "http", url, "epoch", v.Epoch, "members", len(v.Members))

	tick := time.NewTicker(nodeCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("closing", "id", s.ID)
			return nil
		case err := <-serveErr:
			return fmt.Errorf("HTTP API: %w", err)
		case <-tick.C:
			if err := svc.Group().Err(); err != nil {
				return fmt.Errorf("member %d: %w", s.ID, err)
			}
		}
	}
}

// openService opens the group with the state machine of s.App.
func openService(ctx context.Context, s nodeSettings, cfg convoy.Config, log *slog.Logger) (service, error) {
	switch s.App {
	case appKV:
		n, err := paxos.Open(ctx, cfg, paxos.Options{
			MaxValueBytes:   s.MaxValueBytes,
			MaxRequests:     s.MaxRequests,
			MaxRequestBytes: s.MaxRequestBytes,
			MaxStreams:      s.MaxStreams,
			// A member is the process's main work: after a load, it
			// returns the memory the load held (paxos.Options.IdleRelease).
			IdleRelease: nodeIdleRelease,
			Logger:      log,
		})
		if err != nil {
			return nil, err
		}
		return n, nil
	case appLog:
		n, err := sharedlog.Open(ctx, cfg, s.logOptions(log))
		if err != nil {
			return nil, err
		}
		return n, nil
	case appPubSub:
		n, err := pubsub.Open(ctx, cfg, s.pubsubOptions(log))
		if err != nil {
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("unknown app %q", s.App)
}

// logOptions returns the shared log's options of s.
func (s nodeSettings) logOptions(log *slog.Logger) sharedlog.Options {
	return sharedlog.Options{
		MaxValueBytes:   s.MaxValueBytes,
		MaxRequests:     s.MaxRequests,
		MaxRequestBytes: s.MaxRequestBytes,
		Logger:          log,
	}
}

// pubsubOptions returns the pub/sub service's options of s.
func (s nodeSettings) pubsubOptions(log *slog.Logger) pubsub.Options {
	return pubsub.Options{
		MaxMessageBytes: s.MaxValueBytes,
		MaxRequests:     s.MaxRequests,
		MaxRequestBytes: s.MaxRequestBytes,
		MaxStreams:      s.MaxStreams,
		Logger:          log,
	}
}

// switchHandler serves with the handler it holds, or answers 503 while
// it holds none.
type switchHandler struct {
	h atomic.Pointer[http.Handler]
}

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"error":"starting: not yet a member of the group"}`+"\n")
}

// httpOneOnly returns the protocols of a server that speaks HTTP/1.1
// alone, over TCP or TLS.
func httpOneOnly() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	return &p
}

// baseURL returns the URL, with scheme, of a listener's address; an
// unspecified host (all interfaces) becomes this machine's host name.
func baseURL(scheme string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// watchFiles reads files again every interval (0: never on a timer)
// and on every SIGHUP, until ctx ends or the returned function is
// called, which waits for the watching to stop.
func watchFiles(ctx context.Context, interval time.Duration, files []*tlsFiles) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchTLSFiles(ctx, interval, hup, files)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

// httpRecord is what a node records in etcd under {prefix}http/{id}.
type httpRecord struct {
	ID  uint64 `json:"id"`
	App string `json:"app"`
	// URL is the API's base URL.
	URL string `json:"url"`
	PID int    `json:"pid"`
}

// httpKeys returns the prefix of the API records of a group's prefix.
func httpKeys(prefix string) string { return prefix + "http/" }

// httpKey returns the key of member id's API record.
func httpKey(prefix string, id uint64) string {
	return httpKeys(prefix) + strconv.FormatUint(id, 10)
}

// registerHTTP records rec in etcd on a lease of ttl, kept alive, and
// records it again whenever the lease is lost, until ctx ends or the
// returned function is called, which revokes the lease.
func registerHTTP(ctx context.Context, cli *clientv3.Client, prefix string, rec httpRecord, ttl time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var lease atomic.Int64
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			err := keepHTTPRecord(ctx, cli, httpKey(prefix, rec.ID), rec, ttl, &lease)
			if ctx.Err() != nil {
				return
			}
			log.Warn("recording the API's URL in etcd; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(registerRetry):
			}
		}
	}()
	return func() {
		cancel()
		<-done
		if id := lease.Load(); id != 0 {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = cli.Revoke(rctx, clientv3.LeaseID(id))
		}
	}
}

// keepHTTPRecord puts rec on a new lease and keeps the lease alive until
// ctx ends (nil) or the lease is lost (an error).
func keepHTTPRecord(ctx context.Context, cli *clientv3.Client, key string, rec httpRecord, ttl time.Duration, lease *atomic.Int64) error {
	value, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	grant, err := cli.Grant(ctx, secs)
	if err != nil {
		return fmt.Errorf("grant a lease: %w", err)
	}
	lease.Store(int64(grant.ID))
	if _, err := cli.Put(ctx, key, string(value), clientv3.WithLease(grant.ID)); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	ch, err := cli.KeepAlive(ctx, grant.ID)
	if err != nil {
		return fmt.Errorf("keep the lease alive: %w", err)
	}
	for range ch {
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("lease lost")
}

// nodeIdleRelease is how long a member serves no request before it
// returns the memory its requests held to the system
// (paxos.Options.IdleRelease).
const nodeIdleRelease = 5 * time.Second
