package httpauth

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const token = "s3cret-Token_~+/=="

// server serves, behind Bearer over TLS, "ok" at every path but
// /upgrade, which takes over the connection and writes "hijacked".
func server(t *testing.T) *httptest.Server {
	t.Helper()
	h, err := Bearer(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upgrade" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nhijacked")
		_ = brw.Flush()
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestBearer(t *testing.T) {
	srv := server(t)
	hc := srv.Client()
	for _, tc := range []struct {
		name, auth string
		code       int
		challenge  string
	}{
		{"no header", "", http.StatusUnauthorized, `Bearer realm="convoy"`},
		{"another scheme", "Basic " + token, http.StatusUnauthorized, `Bearer realm="convoy"`},
		{"no token", "Bearer ", http.StatusUnauthorized, `Bearer realm="convoy"`},
		{"wrong token", "Bearer s3cret-Token_~+/=", http.StatusUnauthorized, `Bearer realm="convoy", error="invalid_token"`},
		{"longer token", "Bearer " + token + "x", http.StatusUnauthorized, `Bearer realm="convoy", error="invalid_token"`},
		{"right token", "Bearer " + token, http.StatusOK, ""},
		{"scheme in lower case", "bearer " + token, http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/kv/a", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || resp.Header.Get("WWW-Authenticate") != tc.challenge {
				t.Errorf("%s, WWW-Authenticate %q; want %d, %q", resp.Status, resp.Header.Get("WWW-Authenticate"), tc.code, tc.challenge)
			}
			if tc.code == http.StatusUnauthorized && (resp.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(string(body), `{"error":`)) {
				t.Errorf("body %q (%s), want a JSON error", body, resp.Header.Get("Content-Type"))
			}
			if tc.code == http.StatusOK && string(body) != "ok" {
				t.Errorf("body %q, want the handler's", body)
			}
		})
	}
}

// upgrade asks srv for /upgrade over a connection of its own and returns
// the status and, after a 101, what follows.
func upgrade(t *testing.T, srv *httptest.Server, auth string) (int, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), srv.Client().Transport.(*http.Transport).TLSClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/upgrade", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "test")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
		return resp.StatusCode, ""
	}
	rest, _ := io.ReadAll(br)
	return resp.StatusCode, string(rest)
}

// The guarded handler may take over the connection: Bearer hands it the
// server's ResponseWriter. Without the token, it never gets the chance.
func TestBearerUpgrade(t *testing.T) {
	srv := server(t)
	if code, rest := upgrade(t, srv, "Bearer "+token); code != http.StatusSwitchingProtocols || rest != "hijacked" {
		t.Errorf("with the token: %d %q, want 101 and the handler's bytes", code, rest)
	}
	if code, _ := upgrade(t, srv, ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
}

func TestCheckToken(t *testing.T) {
	for _, tok := range []string{"", "=", "a b", "a\n", "tök", "a=b", `a"`} {
		if _, err := Bearer(tok, http.NotFoundHandler()); !errors.Is(err, ErrBadToken) {
			t.Errorf("Bearer(%q): %v, want ErrBadToken", tok, err)
		}
	}
	for _, tok := range []string{"a", "A-z.0_9~+/", "abc==", "JBSWY3DPEHPK3PXP"} {
		if err := CheckToken(tok); err != nil {
			t.Errorf("CheckToken(%q): %v", tok, err)
		}
	}
}
