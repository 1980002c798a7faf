package sharedlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzHTTP sends one request, read from raw bytes as the HTTP server
// reads it, to the API of a member of a group of one, whose log holds
// entries 0..3 (0 trimmed; 1..3 in stream s, 2 in t too). The member
// must answer every request it can read with a 2xx or a 4xx (never a
// 5xx, a panic or a hang), errors as a JSON object with an "error", and
// what it acknowledges must read back: an appended entry at its position
// and in its streams, a trim point below which entries are gone.
func FuzzHTTP(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself
		}
		n, _ := newLoopbackNode(t)
		h := n.Handler()
		for _, target := range []string{"/log?streams=", "/log?streams=s", "/log?streams=s,t", "/log?streams=s", "/log/trim?before=1"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, target, strings.NewReader("e")))
			if w.Code != http.StatusOK {
				t.Fatalf("setting up: %s: %d %s", target, w.Code, w.Body)
			}
		}
		body := &bytes.Buffer{}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(r.Body, body), r.Body}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		code, got := w.Code, w.Body.Bytes()
		if code >= 500 || code < 200 {
			t.Fatalf("%s %s: %d %s", r.Method, r.URL, code, got)
		}
		if r.RequestURI == "*" {
			return // the router's 400, before any handler of the API
		}
		if code/100 == 3 {
			// The router's answer to a path that is not clean.
			if w.Header().Get("Location") == "" {
				t.Fatalf("%s %s: %d without Location", r.Method, r.URL, code)
			}
			return
		}
		isEntry := code == http.StatusOK && r.Pattern == "GET /log/{position}"
		if !isEntry && r.Method != http.MethodHead {
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s %s: %d with Content-Type %q", r.Method, r.URL, code, ct)
			}
			if !json.Valid(got) {
				t.Fatalf("%s %s: %d %q is not JSON", r.Method, r.URL, code, got)
			}
			var e struct {
				Error string `json:"error"`
			}
			if code >= 400 && (json.Unmarshal(got, &e) != nil || e.Error == "") {
				t.Fatalf("%s %s: %d %q says no error", r.Method, r.URL, code, got)
			}
		}
		if code == http.StatusMethodNotAllowed && w.Header().Get("Allow") == "" {
			t.Fatalf("%s %s: 405 without Allow", r.Method, r.URL)
		}
		if code != http.StatusOK {
			return
		}
		get := func(target string) (int, []byte) {
			rw := httptest.NewRecorder()
			h.ServeHTTP(rw, httptest.NewRequest(http.MethodGet, target, nil))
			return rw.Code, rw.Body.Bytes()
		}
		switch r.Pattern {
		case "POST /log":
			var res struct{ Position uint64 }
			if err := json.Unmarshal(got, &res); err != nil {
				t.Fatalf("append: %q: %v", got, err)
			}
			if c, v := get(fmt.Sprint("/log/", res.Position)); c != http.StatusOK || !bytes.Equal(v, body.Bytes()) {
				t.Fatalf("append of %q acknowledged at %d, then read: %d %q", body, res.Position, c, v)
			}
			streams, _ := parseStreams(r.URL.Query().Get("streams"))
			for _, s := range streams {
				c, v := get(fmt.Sprintf("/streams/%s?from=%d", url.PathEscape(s), res.Position))
				var es []Entry
				if err := json.Unmarshal(v, &es); c != http.StatusOK || err != nil ||
					!slices.ContainsFunc(es, func(e Entry) bool { return e.Position == res.Position }) {
					t.Fatalf("append to %q acknowledged at %d, then the stream: %d %s", s, res.Position, c, v)
				}
			}
		case "POST /log/trim":
			var res struct{ Trim uint64 }
			if err := json.Unmarshal(got, &res); err != nil {
				t.Fatalf("trim: %q: %v", got, err)
			}
			if c, v := get(fmt.Sprint("/log/", res.Trim-1)); res.Trim > 0 && c != http.StatusGone {
				t.Fatalf("trim to %d acknowledged, then read of %d: %d %q", res.Trim, res.Trim-1, c, v)
			}
		}
	})
}
