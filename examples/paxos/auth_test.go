package paxos

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/httpauth"
)

// TestTokenTLS serves a store over TLS behind a bearer token (httpauth,
// as "convoy node -http-token-file" does): clients with the token work
// over HTTP and over streams, which upgrade a TLS connection dialed with
// the HTTP client's TLS settings; a client without the token, or with
// another, is refused with ErrUnauthorized, its stream upgrade included.
func TestTokenTLS(t *testing.T) {
	const token = "JBSWY3DPEHPK3PXP"
	n, err := NewLocal(Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpauth.Bearer(token, n.Handler())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(h)
	defer func() {
		n.Close()
		srv.Close()
	}()
	ctx := testContext(t)
	newClient := func(opts ...client.Option) *client.Client {
		hc := srv.Client()
		opts = append([]client.Option{client.WithHTTPClient(hc), client.WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)
		c := client.New([]string{srv.URL}, opts...)
		t.Cleanup(func() {
			c.Close()
			hc.CloseIdleConnections()
		})
		return c
	}

	// Without the token: refused at once, over HTTP and on the stream's
	// upgrade, which the node never serves.
	for name, c := range map[string]*client.Client{
		"no token, HTTP":         newClient(),
		"no token, streams":      newClient(client.WithStreams()),
		"another token, HTTP":    newClient(client.WithToken("another")),
		"another token, streams": newClient(client.WithToken("another"), client.WithStreams()),
	} {
		_, err := c.Put(ctx, "k", []byte("v"))
		var ce *client.Error
		if !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &ce) || ce.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: Put: %v; want ErrUnauthorized (401)", name, err)
		}
		if _, err := c.Status(ctx, srv.URL); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: Status: %v; want ErrUnauthorized", name, err)
		}
	}
	if got := n.streamCount(); got != 0 {
		t.Fatalf("the node serves %d streams to clients without the token", got)
	}

	// With it, over streams and over HTTP.
	sc := newClient(client.WithToken(token), client.WithStreams())
	if _, err := sc.Put(ctx, "k", []byte("over a stream")); err != nil {
		t.Fatalf("Put over a stream: %v", err)
	}
	if got := n.streamCount(); got != 1 {
		t.Errorf("the node serves %d streams, want 1", got)
	}
	hc := newClient(client.WithToken(token))
	if v, _, err := hc.Get(ctx, "k"); err != nil || string(v) != "over a stream" {
		t.Errorf("Get over HTTP: %q, %v", v, err)
	}
	if s, err := hc.Status(ctx, srv.URL); err != nil || s.Applied != 1 {
		t.Errorf("Status: %+v, %v", s, err)
	}
}
