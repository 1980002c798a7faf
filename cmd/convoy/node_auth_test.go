package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	logclient "github.com/convoy-gcs/convoy/examples/log/client"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/examples/paxos/wire"
	"github.com/convoy-gcs/convoy/internal/devcerts"
)

// testToken is the bearer token of the tests' APIs.
const testToken = "JBSWY3DPEHPK3PXPconvoy"

// tlsTestSettings returns the settings of member id of a key-value store
// whose members authenticate each other with the certificates in certs
// ("convoy certs"), and whose API serves over TLS, with the member's
// certificate, behind the token in tokenFile.
func tlsTestSettings(t *testing.T, etcd []string, certs, tokenFile string, id uint64) nodeSettings {
	t.Helper()
	cert, key := filepath.Join(certs, devcerts.MemberCertFile(id)), filepath.Join(certs, devcerts.MemberKeyFile(id))
	return nodeSettings{
		ID: id, App: appKV, Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0",
		Etcd: etcd, Prefix: "/convoy/", Data: t.TempDir(), Initial: 1,
		TLSCA: filepath.Join(certs, devcerts.CACertFile), TLSCert: cert, TLSKey: key,
		HTTPCert: cert, HTTPKey: key, HTTPTokenFile: tokenFile,
	}
}

// writeCerts runs "convoy certs" for members into dir, writes the test
// token into a file there, and returns the token file and an HTTP client
// that trusts the CA.
func writeCerts(t *testing.T, dir string, members int) (tokenFile string, hc *http.Client) {
	t.Helper()
	if code, _, errOut := runCommand(t, &cli{}, "certs", "-out", dir, "-members", strconv.Itoa(members)); code != 0 {
		t.Fatalf("convoy certs: exit %d: %s", code, errOut)
	}
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := loadCertPool(filepath.Join(dir, devcerts.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	return tokenFile, hc
}

// get sends GET url with the Authorization header auth (none if empty)
// and returns the answer's status, challenge and body.
func get(t *testing.T, hc *http.Client, url, auth string) (code int, challenge, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

// TestNodeTokenTLS runs two members of a key-value store, over mutual TLS
// with the certificates of "convoy certs", whose APIs serve over TLS
// behind a bearer token: every route but the page at / answers 401
// without the token or with another, the stream upgrade included; with
// it, the clients work over HTTP and streams, GET /group reads the other
// member with the token, and "convoy status" reads both with
// CONVOY_HTTP_TOKEN and -http-ca.
func TestNodeTokenTLS(t *testing.T) {
	certs := t.TempDir()
	tokenFile, hc := writeCerts(t, certs, 2)
	etcd := startTestEtcd(t)
	line1, _ := startTestNode(t, tlsTestSettings(t, etcd.Endpoints(), certs, tokenFile, 1))
	line2, _ := startTestNode(t, tlsTestSettings(t, etcd.Endpoints(), certs, tokenFile, 2)) // joins
	for _, u := range []string{line1.HTTP, line2.HTTP} {
		if !strings.HasPrefix(u, "https://127.0.0.1:") {
			t.Fatalf("the API's URL is %s, want https", u)
		}
	}
	api := apiClient{hc: hc, token: testToken}
	ctx := t.Context()
	if _, err := waitStatus(ctx, api, nil, line1.HTTP, func(s memberStatus) bool { return s.Serving && len(s.Members) == 2 }); err != nil {
		t.Fatal(err)
	}

	// Without the token, or with another: 401 and the challenge.
	for _, path := range []string{"/status", "/group", "/kv/k", "/kv/k?stale=true", wire.StreamPath, "/nothing", "/metrics"} {
		for auth, challenge := range map[string]string{
			"":                          `Bearer realm="convoy"`,
			"Basic " + testToken:        `Bearer realm="convoy"`,
			"Bearer " + testToken + "x": `Bearer realm="convoy", error="invalid_token"`,
		} {
			if code, ch, body := get(t, hc, line1.HTTP+path, auth); code != http.StatusUnauthorized || ch != challenge || !strings.Contains(body, `"error"`) {
				t.Errorf("GET %s with %q: %d, WWW-Authenticate %q, %q; want 401, %q", path, auth, code, ch, body, challenge)
			}
		}
	}
	// The page's code stays open; its data does not.
	if code, _, body := get(t, hc, line1.HTTP+"/", ""); code != http.StatusOK || !strings.Contains(body, pageMarker) {
		t.Errorf("GET / without the token: %d, want 200 and the page", code)
	}
	// The stream upgrade is refused before the store sees it.
	if code := rawUpgrade(t, hc, line1.HTTP, ""); code != http.StatusUnauthorized {
		t.Errorf("stream upgrade without the token: %d, want 401", code)
	}
	if code := rawUpgrade(t, hc, line1.HTTP, "Bearer "+testToken); code != http.StatusSwitchingProtocols {
		t.Errorf("stream upgrade with the token: %d, want 101", code)
	}

	// With it: the API, over HTTP and over streams.
	if code, _, body := get(t, hc, line1.HTTP+"/status", "Bearer "+testToken); code != http.StatusOK || !strings.Contains(body, `"serving":true`) {
		t.Errorf("GET /status with the token: %d %q", code, body)
	}
	streams := api.kv([]string{line1.HTTP}, kvclient.WithStreams())
	defer streams.Close()
	if _, err := streams.Put(ctx, "k", []byte("over a stream, over TLS")); err != nil {
		t.Fatalf("Put over a stream: %v", err)
	}
	if v, _, err := api.kv([]string{line2.HTTP}).Get(ctx, "k"); err != nil || string(v) != "over a stream, over TLS" {
		t.Errorf("Get through member 2: %q, %v", v, err)
	}
	if _, _, err := (apiClient{hc: hc}).kv([]string{line2.HTTP}).Get(ctx, "k"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Get without the token: %v, want a 401", err)
	}
	if _, err := (apiClient{hc: hc}).log([]string{line2.HTTP}).Tail(ctx); err == nil || !strings.Contains(err.Error(), logclient.ErrUnauthorized.Error()) {
		t.Errorf("a log client without the token: %v, want ErrUnauthorized", err)
	}

	// GET /group: member 1 reads member 2's status with the token, over
	// TLS, trusting the member CA.
	code, _, body := get(t, hc, line1.HTTP+"/group", "Bearer "+testToken)
	var r statusReport
	if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
		t.Fatalf("GET /group: %d %q: %v", code, body, err)
	}
	for _, m := range r.Members {
		if m.Status == nil || !m.Status.Serving {
			t.Errorf("GET /group: member %d: %+v (%s)", m.ID, m.Status, m.Error)
		}
	}

	// convoy status, with the token from the environment and the CA.
	endpoints := strings.Join(etcd.Endpoints(), ",")
	caFile := filepath.Join(certs, devcerts.CACertFile)
	t.Setenv(settingEnv(httpTokenKey), testToken)
	code, out, errOut := runCommand(t, &cli{}, "status", "-etcd", endpoints, "-http-ca", caFile, "-json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Members {
		if m.Status == nil || !m.Status.Serving {
			t.Errorf("status: member %d: %+v (%s)", m.ID, m.Status, m.Error)
		}
	}
	t.Setenv(settingEnv(httpTokenKey), "")
	_, out, _ = runCommand(t, &cli{}, "status", "-etcd", endpoints, "-http-ca", caFile, "-json")
	if !strings.Contains(out, "HTTP 401") {
		t.Errorf("status without the token: %s; want the members' 401", out)
	}
	_, out, _ = runCommand(t, &cli{}, "status", "-etcd", endpoints, "-http-token-file", tokenFile, "-json")
	if !strings.Contains(out, "certificate signed by unknown authority") {
		t.Errorf("status without the CA: %s; want the members' certificates refused", out)
	}

	// A browser opens the page with the token in its fragment.
	if browser, err := findBrowserPath(); err == nil {
		deadline := time.Now().Add(time.Minute)
		for {
			dom, err := dumpDOM(ctx, t, browser, line1.HTTP+"/#token="+url.QueryEscape(testToken), "--ignore-certificate-errors")
			if err != nil {
				t.Fatal(err)
			}
			p, err := parsePage(dom)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(p.inView, []uint64{1, 2}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page, opened with the token, shows %+v\n%s", p, dom)
			}
		}
		dom, err := dumpDOM(ctx, t, browser, line1.HTTP+"/", "--ignore-certificate-errors")
		if err != nil {
			t.Fatal(err)
		}
		if p, err := parsePage(dom); err != nil || !strings.Contains(p.updated, "#token=") || len(p.inView) != 0 {
			t.Errorf("the page without the token: %+v, %v; want it to ask for one", p, err)
		}
	}
}

// rawUpgrade asks the member at base for a stream over a TLS connection
// of its own, with the Authorization header auth (none if empty), and
// returns the answer's status.
func rawUpgrade(t *testing.T, hc *http.Client, base, auth string) int {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hc.Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = u.Hostname()
	conn, err := tls.Dial("tcp", u.Host, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, err := http.NewRequest(http.MethodGet, base+wire.StreamPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.Protocol)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
