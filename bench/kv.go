package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/bench/internal/replica"
	"github.com/convoy-gcs/convoy/examples/paxos"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
)

// The key-value service of examples/paxos, measured as users run it
// (workload e).
const (
	// kvOpenTimeout bounds how long a member waits for the group to form:
	// every member must have registered in etcd.
	kvOpenTimeout = time.Minute
	// kvViewsPrefix is the etcd key prefix of the group's views.
	kvViewsPrefix = "/bench/"
	// kvShutdownTimeout bounds the HTTP server's shutdown once the node
	// is closed (the requests still waiting have had their 503).
	kvShutdownTimeout = 5 * time.Second
)

// runKVReplica runs one member of the replicated key-value store of
// examples/paxos as "convoy node -app kv" runs it (see runMember).
func runKVReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	return runMember(ctx, a, ready, log, func(ctx context.Context, cfg convoy.Config) (*paxos.Node, error) {
		return paxos.Open(ctx, cfg, paxos.Options{Logger: log})
	})
}

// member is a service's member: its HTTP API, and Close.
type member interface {
	Handler() http.Handler
	Close() error
}

// runMember runs the member that open returns as "convoy node" runs a
// service's members: in a group whose views live in etcd (a.Etcd),
// durable when a.Durable, serving the service's HTTP API on a.Client.
func runMember[M member](ctx context.Context, a replica.Args, ready func() error, log *slog.Logger, open func(context.Context, convoy.Config) (M, error)) error {
	l, err := net.Listen("tcp", a.Client)
	if err != nil {
		return err
	}
	defer l.Close()
	if a.Etcd == "" {
		return errors.New("-etcd is required: the group keeps its views there")
	}
	cfg := convoy.Config{
		Self:           convoy.NodeID(a.ID),
		Etcd:           &convoy.EtcdConfig{Endpoints: []string{a.Etcd}, Prefix: kvViewsPrefix},
		Addr:           a.Peers[a.ID-1],
		InitialMembers: len(a.Peers),
		Logger:         log,
	}
	if a.Durable {
		cfg.Durable = &convoy.DurableConfig{Dir: a.Dir}
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, kvOpenTimeout)
	defer cancelOpen()
	n, err := open(openCtx, cfg)
	if err != nil {
		return err
	}
	return serveHTTP(ctx, l, n.Handler(), n, ready, log)
}

// runKVLocalReplica runs the same store, HTTP API and state machine
// without replication (paxos.NewLocal): one process, its state in memory.
func runKVLocalReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	l, err := net.Listen("tcp", a.Client)
	if err != nil {
		return err
	}
	defer l.Close()
	n, err := paxos.NewLocal(paxos.Options{Logger: log})
	if err != nil {
		return err
	}
	return serveHTTP(ctx, l, n.Handler(), n, ready, log)
}

// serveHTTP serves h on l, calls ready, and once ctx ends closes node (so
// that the requests still waiting end) and shuts the server down.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler, node io.Closer, ready func() error, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	var err error
	if err = ready(); err == nil {
		select {
		case <-ctx.Done():
		case err = <-served:
		}
	}
	err = errors.Join(err, node.Close())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), kvShutdownTimeout)
	defer cancel()
	return errors.Join(err, srv.Shutdown(shutdownCtx))
}

// serviceClients is conns clients of the store's Go client (package client of
// examples/paxos), client i trying the members from member i on, all
// sharing one HTTP transport. With streams (client.WithStreams) each
// client holds one connection per member, carrying all its requests at
// once; without, HTTP/1.1 carries one request at a time over a
// connection, so the transport holds a connection per request in
// flight, and keeps them all open between requests.
type serviceClients struct {
	clients   []*kvclient.Client
	transport *http.Transport
}

// kvMaxIdleConns bounds the connections the clients keep open to one
// member between requests: above any client count the benchmark sweeps.
const kvMaxIdleConns = 1 << 16

func dialKVStreams(_ context.Context, addrs []string, conns int) (client, error) {
	return dialKVService(addrs, conns, true), nil
}

func dialKVHTTP(_ context.Context, addrs []string, conns int) (client, error) {
	return dialKVService(addrs, conns, false), nil
}

func dialKVService(addrs []string, conns int, streams bool) *serviceClients {
	t := &http.Transport{MaxIdleConnsPerHost: kvMaxIdleConns}
	hc := &http.Client{Transport: t}
	k := &serviceClients{transport: t}
	for i := range conns {
		opts := []kvclient.Option{kvclient.WithHTTPClient(hc)}
		if streams {
			opts = append(opts, kvclient.WithStreams())
		}
		k.clients = append(k.clients, kvclient.New(memberURLs(addrs, i), opts...))
	}
	return k
}

// Put writes through the client of caller (any number: callers with the
// same number share a client).
func (k *serviceClients) Put(ctx context.Context, caller int, key, value []byte) error {
	_, err := k.clients[caller%len(k.clients)].Put(ctx, string(key), value)
	return err
}

func (k *serviceClients) Close() error {
	for _, c := range k.clients {
		c.Close()
	}
	k.transport.CloseIdleConnections()
	return nil
}

// memberURLs returns the base URLs of the members at addrs, from member
// i (modulo their number) on: client i tries them in that order.
func memberURLs(addrs []string, i int) []string {
	var urls []string
	for j := range addrs {
		urls = append(urls, "http://"+addrs[(i+j)%len(addrs)])
	}
	return urls
}
