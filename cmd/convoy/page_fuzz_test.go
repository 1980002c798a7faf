package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/etcddev"
)

// FuzzNodeHandler sends the front of a node's API (the group's page and
// report, behind the bearer token, and the application behind them) an
// arbitrary request, read from raw bytes as the HTTP server reads it,
// while etcd holds an arbitrary API record of member 1 and member 1
// answers GET /status with arbitrary bytes. Only GET and HEAD of / are
// served without the token; every other request without it gets 401
// and reaches nothing; with it, GET and HEAD of /group answer the
// group's report as JSON (or 503 if it cannot be read), and every other
// path reaches the application. No request gets any other 5xx.
func FuzzNodeHandler(f *testing.F) {
	const token = "fuzz-T0ken"
	srv, err := etcddev.Start(context.Background(), etcddev.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	cli, err := srv.Client(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	prefix := fmt.Sprintf("/fuzz-%d/", os.Getpid()) // one per worker process
	f.Fuzz(func(t *testing.T, raw, record, answer []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself
		}
		ctx := context.Background()
		if len(record) > 0 {
			if _, err := cli.Put(ctx, httpKey(prefix, 1), string(record)); err != nil {
				t.Fatal(err)
			}
			defer cli.Delete(ctx, prefix, clientv3.WithPrefix())
		}
		reached := false
		p := &groupPage{
			etcd: cli, api: apiClient{hc: &http.Client{Transport: canned(answer)}, token: token}, prefix: prefix,
			log: slog.New(slog.DiscardHandler),
			app: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }),
		}
		h, err := guardPage(p, token)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		code, body := w.Code, w.Body.Bytes()
		scheme, offered, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		authorized := strings.EqualFold(scheme, "bearer") && strings.TrimLeft(offered, " ") == token
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		fail := func(what string) {
			t.Helper()
			t.Fatalf("%s %s (authorized: %v): %s: %d %q %q", r.Method, r.URL, authorized, what, code, w.Header(), body)
		}
		if code >= 500 && !(code == http.StatusServiceUnavailable && r.URL.Path == "/group") {
			fail("a 5xx")
		}
		if ct := w.Header().Get("Content-Type"); !reached && code != http.StatusOK && ct != "application/json" {
			fail("an error that is not JSON")
		}
		switch {
		case r.URL.Path == "/":
			if reached || read && (code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html")) ||
				!read && (code != http.StatusMethodNotAllowed || w.Header().Get("Allow") == "") {
				fail("not the page")
			}
		case !authorized:
			if reached || code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
				fail("served without the token")
			}
		case r.URL.Path == "/group":
			if reached || !read && code != http.StatusMethodNotAllowed {
				fail("not the report")
			}
			if !read || code == http.StatusServiceUnavailable || r.Method == http.MethodHead {
				return
			}
			var rep statusReport
			if code != http.StatusOK || json.Unmarshal(body, &rep) != nil {
				fail("a report that does not decode")
			}
			if err := rep.print(io.Discard); err != nil {
				t.Fatal(err)
			}
		default:
			if !reached {
				fail("not the application")
			}
		}
	})
}
