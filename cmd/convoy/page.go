package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/internal/httpauth"
)

// groupReadTimeout bounds one GET /group: reading etcd, then every
// member's GET /status (each bounded by statusTimeout as well).
const groupReadTimeout = 4 * time.Second

// pageHTML is the page a node serves at GET /: it shows the whole group,
// fetching GET /group every second or so.
//
//go:embed page.html
var pageHTML []byte

// groupPage serves a node's view of its whole group: the page at / and,
// at /group, the report "convoy status -json" prints. Every other path
// goes to the application's handler.
type groupPage struct {
	etcd *clientv3.Client
	// api reads the members' status.
	api    apiClient
	prefix string
	log    *slog.Logger
	// app serves every other path.
	app http.Handler
}

// ServeHTTP serves GET and HEAD of / and /group, refuses their other
// methods, and hands every other path to p.app.
func (p *groupPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		if allowRead(w, r) {
			p.serveIndex(w)
		}
	case "/group":
		if allowRead(w, r) {
			p.serveGroup(w, r)
		}
	default:
		p.app.ServeHTTP(w, r)
	}
}

// guardPage returns the handler of a node's API: p, behind the bearer
// token if there is one (httpauth), except for the page at /. The page
// is code that holds no data, which it reads from /group, behind the
// token; a browser that loads it can then be given the token (see
// page.html), which it could not be for the page itself.
func guardPage(p *groupPage, token string) (http.Handler, error) {
	if token == "" {
		return p, nil
	}
	guarded, err := httpauth.Bearer(token, p)
	if err != nil {
		return nil, fmt.Errorf("HTTP token: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			p.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	}), nil
}

// allowRead answers 405 to a method other than GET and HEAD and reports
// whether the request may go on.
func allowRead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeJSONError(w, http.StatusMethodNotAllowed, r.Method+" not allowed here")
	return false
}

func (p *groupPage) serveIndex(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(pageHTML)
}

// serveGroup answers with the group's statusReport, or 503 if etcd could
// not be read in time.
func (p *groupPage) serveGroup(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), groupReadTimeout)
	defer cancel()
	rep, err := readStatus(ctx, p.etcd, p.api, p.prefix)
	if err != nil {
		p.log.Debug("GET /group", "err", err)
		writeJSONError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := printJSON(w, rep); err != nil {
		p.log.Debug("GET /group: writing the answer", "err", err)
	}
}

// writeJSONError answers code with the body {"error": msg}, as the
// applications do.
func writeJSONError(w http.ResponseWriter, code int, msg string) {
	b, err := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	if err != nil {
		b = []byte(`{"error":"encoding the response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, string(b)+"\n")
}
