package paxos

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/client"
)

// TestLocal serves a store that NewLocal made and uses it through the
// client.
func TestLocal(t *testing.T) {
	n, err := NewLocal(Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c := client.New([]string{srv.URL}, client.WithHTTPClient(hc))
	ctx := context.Background()

	i1, err := c.Put(ctx, "a", []byte("1"))
	if err != nil || i1 != 1 {
		t.Fatalf("Put: index %d, %v; want 1", i1, err)
	}
	if v, i, err := c.Get(ctx, "a"); err != nil || string(v) != "1" || i < i1 {
		t.Errorf("Get: %q at %d, %v", v, i, err)
	}
	old := []byte("1")
	if ok, _, err := c.CAS(ctx, "a", &old, []byte("2")); err != nil || !ok {
		t.Errorf("CAS: %v, %v", ok, err)
	}
	if _, err := c.Delete(ctx, "a"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, _, err := c.GetStale(ctx, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("GetStale after Delete: %v, want ErrNotFound", err)
	}
	if s, err := c.Status(ctx, srv.URL); err != nil || !s.Serving || len(s.Members) != 1 {
		t.Errorf("Status: %+v, %v", s, err)
	}
	if n.Group() != nil {
		t.Error("a local node has a group")
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Put(short, "a", []byte("3")); !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "503") {
		t.Errorf("Put after Close: %v, want unavailable after 503s", err)
	}
}
