package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/bench/internal/replica"
	sharedlog "github.com/convoy-gcs/convoy/examples/log"
	logclient "github.com/convoy-gcs/convoy/examples/log/client"
)

// runLogReplica runs one member of the shared log of examples/log as
// "convoy node -app log" runs it: a member of a group whose views live
// in etcd (a.Etcd), durable when a.Durable, serving the log's HTTP API on
// a.Client.
func runLogReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
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
	n, err := sharedlog.Open(openCtx, cfg, sharedlog.Options{Logger: log})
	if err != nil {
		return err
	}
	return serveHTTP(ctx, l, n.Handler(), n, ready, log)
}

// logClients is conns clients of the shared log's Go client (package
// client of examples/log), client i trying the members from member i on,
// all sharing one HTTP transport, which holds a connection per request
// in flight (HTTP/1.1) and keeps them open between requests. A write is
// an append of the value; the key goes nowhere.
type logClients struct {
	clients   []*logclient.Client
	transport *http.Transport
}

func dialLogHTTP(_ context.Context, addrs []string, conns int) (client, error) {
	t := &http.Transport{MaxIdleConnsPerHost: kvMaxIdleConns}
	hc := &http.Client{Transport: t}
	c := &logClients{transport: t}
	for i := range conns {
		var urls []string
		for j := range addrs {
			urls = append(urls, "http://"+addrs[(i+j)%len(addrs)])
		}
		c.clients = append(c.clients, logclient.New(urls, logclient.WithHTTPClient(hc)))
	}
	return c, nil
}

// Put appends value through the client of caller (any number: callers
// with the same number share a client).
func (c *logClients) Put(ctx context.Context, caller int, _, value []byte) error {
	_, err := c.clients[caller%len(c.clients)].Append(ctx, value)
	return err
}

func (c *logClients) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}
