package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/bench/internal/replica"
	sharedlog "github.com/convoy-gcs/convoy/examples/log"
	logclient "github.com/convoy-gcs/convoy/examples/log/client"
)

// runLogReplica runs one member of the shared log of examples/log as
// "convoy node -app log" runs it (see runMember).
func runLogReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	return runMember(ctx, a, ready, log, func(ctx context.Context, cfg convoy.Config) (*sharedlog.Node, error) {
		return sharedlog.Open(ctx, cfg, sharedlog.Options{Logger: log})
	})
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
		c.clients = append(c.clients, logclient.New(memberURLs(addrs, i), logclient.WithHTTPClient(hc)))
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
