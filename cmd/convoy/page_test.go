package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/childproc"
)

// pageMarker is in the page a node serves at /.
const pageMarker = `<main id="convoy-group">`

// TestGroupPageRoutes checks which requests the group's page and report
// take, and that every other one goes to the application.
func TestGroupPageRoutes(t *testing.T) {
	// An etcd nobody listens on: GET /group must fail, within its
	// request's deadline.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	p := &groupPage{
		etcd: cli, api: apiClient{hc: &http.Client{}}, prefix: "/convoy/", log: slog.New(slog.DiscardHandler),
		app: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "app: %s %s", r.Method, r.URL.Path)
		}),
	}
	for _, tc := range []struct {
		method, path string
		code         int
		ctype        string // the Content-Type wanted
		body         string // what the body must hold
	}{
		{"GET", "/", http.StatusOK, "text/html; charset=utf-8", pageMarker},
		{"HEAD", "/", http.StatusOK, "text/html; charset=utf-8", ""},
		{"POST", "/", http.StatusMethodNotAllowed, "application/json", `{"error":"POST not allowed here"}`},
		{"DELETE", "/group", http.StatusMethodNotAllowed, "application/json", `{"error":"DELETE not allowed here"}`},
		{"GET", "/group", http.StatusServiceUnavailable, "application/json", `{"error":"reading etcd at http://127.0.0.1:1: `},
		{"GET", "/status", http.StatusOK, "", "app: GET /status"},
		{"PUT", "/kv/a", http.StatusOK, "", "app: PUT /kv/a"},
		{"GET", "/group/", http.StatusOK, "", "app: GET /group/"},
		{"GET", "/index.html", http.StatusOK, "", "app: GET /index.html"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			w := httptest.NewRecorder()
			p.ServeHTTP(w, httptest.NewRequestWithContext(ctx, tc.method, tc.path, nil))
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("%d %q, want %d with %q", w.Code, w.Body, tc.code, tc.body)
			}
			if got := w.Header().Get("Content-Type"); tc.ctype != "" && got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			if got := w.Header().Get("Allow"); (tc.code == http.StatusMethodNotAllowed) != (got == "GET, HEAD") {
				t.Errorf("Allow %q", got)
			}
		})
	}
}

// testNode is a member run by serveNode in this process.
type testNode struct {
	id  uint64
	url string // the API's base URL
	// stop ends the member and returns serveNode's error; it may be
	// called more than once.
	stop func() error
}

// startKVNode runs member id of a key-value store on etcd, in this
// process, and returns once it serves: it takes part in a view. It is
// stopped when the test ends.
func startKVNode(t *testing.T, etcd []string, id uint64) testNode {
	t.Helper()
	line, stop := startTestNode(t, nodeSettings{
		ID: id, App: appKV, Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0",
		Etcd: etcd, Prefix: "/convoy/", Data: t.TempDir(), Initial: 1,
	})
	return testNode{id: id, url: line.HTTP, stop: stop}
}

// startTestEtcd starts an etcd for the test, closed when the test ends,
// after the members started since.
func startTestEtcd(t *testing.T) *etcddev.Server {
	t.Helper()
	etcd, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	return etcd
}

// getGroup reads a node's GET /group.
func getGroup(t *testing.T, url string) statusReport {
	t.Helper()
	resp, err := http.Get(url + "/group")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /group: %s, %s: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	var r statusReport
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("GET /group: %q: %v", body, err)
	}
	return r
}

// TestNodeGroupPage runs two members: each serves the group's report at
// /group, as "convoy status -json" prints it, and its page at /, and the
// application's routes and errors as before.
func TestNodeGroupPage(t *testing.T) {
	etcd := startTestEtcd(t)
	n1 := startKVNode(t, etcd.Endpoints(), 1)
	n2 := startKVNode(t, etcd.Endpoints(), 2) // joins

	r := getGroup(t, n2.url)
	if r.Prefix != "/convoy/" || r.Epoch < 2 || r.inView() != 2 || len(r.Members) != 2 {
		t.Fatalf("GET /group: %+v; want a view of members 1 and 2", r)
	}
	for i, m := range r.Members {
		url := []string{n1.url, n2.url}[i]
		if m.ID != uint64(i+1) || !m.InView || m.Incarnation == 0 || m.Addr == "" || m.App != appKV || m.HTTP != url || m.Error != "" {
			t.Errorf("GET /group: member %+v, want member %d at %s in the view", m, i+1, url)
			continue
		}
		if s := m.Status; s == nil || !s.Serving || s.Epoch != r.Epoch || s.Group == nil || s.Group.Phase != "active" {
			t.Errorf("GET /group: member %d's own status %+v: want serving in view %d, active", m.ID, s, r.Epoch)
		}
	}
	// The same as "convoy status -json" prints, but for what moves on
	// its own (the members' frontiers, barriers, update times).
	cr := clusterStatus(t, etcd.Endpoints())
	if cr.Epoch != r.Epoch || cr.Start != r.Start || len(cr.Members) != len(r.Members) {
		t.Fatalf("convoy status -json: %+v\nGET /group: %+v", cr, r)
	}
	for i, m := range cr.Members {
		g := r.Members[i]
		if m.ID != g.ID || m.InView != g.InView || m.Incarnation != g.Incarnation || m.Addr != g.Addr || m.HTTP != g.HTTP || m.PID != g.PID {
			t.Errorf("convoy status -json: member %+v\nGET /group: member %+v", m, g)
		}
	}

	for _, tc := range []struct {
		method, path string
		code         int
		ctype, body  string
	}{
		{"GET", "/", http.StatusOK, "text/html; charset=utf-8", pageMarker},
		{"GET", "/status", http.StatusOK, "application/json", `"serving":true`},
		{"GET", "/nothing", http.StatusNotFound, "application/json", `{"error":"no such endpoint"}`},
		{"POST", "/group", http.StatusMethodNotAllowed, "application/json", `{"error":"POST not allowed here"}`},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, n1.url+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != tc.ctype || !bytes.Contains(body, []byte(tc.body)) {
			t.Errorf("%s %s: %s, %s, %q; want %d, %s, with %q", tc.method, tc.path, resp.Status, resp.Header.Get("Content-Type"), body, tc.code, tc.ctype, tc.body)
		}
	}
	for _, n := range []testNode{n2, n1} {
		if err := n.stop(); err != nil {
			t.Errorf("member %d: %v", n.id, err)
		}
	}
}

// findBrowser returns the path of a Chromium or Chrome on PATH. CI
// installs Debian's chromium (see .ci/run).
func findBrowser(t *testing.T) string {
	t.Helper()
	path, err := findBrowserPath()
	if err != nil {
		t.Skip(err.Error() + " (CI installs chromium)")
	}
	return path
}

// findBrowserPath returns the path of a Chromium or Chrome on PATH, or
// an error if there is none.
func findBrowserPath() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", errors.New("no chromium, chromium-browser or google-chrome on PATH")
}

// Bounds of a headless browser's run.
const (
	// browserTimeout bounds one run of the browser.
	browserTimeout = 30 * time.Second
	// browserVirtualTime is how long the page runs in the browser's
	// virtual time, which stands still while a request is in flight and
	// otherwise runs as fast as the browser can: a refresh every second
	// is a few requests in a row.
	browserVirtualTime = 4500 * time.Millisecond
)

// dumpDOM loads url in a headless browser run with the flags given,
// lets its scripts run for browserVirtualTime, and returns the document
// as it then stands.
func dumpDOM(ctx context.Context, t *testing.T, browser, url string, flags ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	args := append([]string{
		"--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=" + strconv.FormatInt(browserVirtualTime.Milliseconds(), 10),
	}, flags...)
	cmd := exec.CommandContext(ctx, browser, append(args, "--dump-dom", url)...)
	// The browser starts helper processes: it runs in a process group of
	// its own, and the whole group is killed once it exits or runs late.
	cmd.SysProcAttr = childproc.SysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		tail := stderr.Bytes()[max(0, stderr.Len()-2000):]
		return "", fmt.Errorf("%s: %w (%w); stderr ends:\n%s", browser, err, context.Cause(ctx), tail)
	}
	return string(out), nil
}

// renderedPage is what a test reads of the page as a browser rendered it.
type renderedPage struct {
	epoch   uint64
	inView  []uint64 // the members shown in the view, in the table's order
	outside []uint64 // the processes shown outside it
	// classes holds each member row's class ("down", "stale", "out", or
	// "").
	classes map[uint64]string
	updated string // the line under the table
	dom     string
}

var (
	epochRE   = regexp.MustCompile(`<strong id="epoch">(\d+)</strong>`)
	rowRE     = regexp.MustCompile(`<tr data-member="(\d+)" data-in-view="(true|false)"(?: class="(\w*)")?>`)
	updatedRE = regexp.MustCompile(`<p id="updated"(?: class="\w*")?>([^<]*)</p>`)
)

// parsePage reads a rendered page.
func parsePage(dom string) (renderedPage, error) {
	p := renderedPage{classes: make(map[uint64]string), dom: dom}
	if !strings.Contains(dom, pageMarker) {
		return p, errors.New("not the group's page")
	}
	if m := epochRE.FindStringSubmatch(dom); m != nil {
		p.epoch, _ = strconv.ParseUint(m[1], 10, 64)
	}
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		id, _ := strconv.ParseUint(m[1], 10, 64)
		if m[2] == "true" {
			p.inView = append(p.inView, id)
		} else {
			p.outside = append(p.outside, id)
		}
		p.classes[id] = m[3]
	}
	if m := updatedRE.FindStringSubmatch(dom); m != nil {
		p.updated = m[1]
	}
	return p, nil
}

// waitPage loads url in the browser again and again until ok accepts the
// page, and returns it; it fails the test if that has not happened
// within timeout, or if the browser fails.
func waitPage(t *testing.T, browser, url string, timeout time.Duration, ok func(renderedPage) bool) renderedPage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last renderedPage
	for {
		dom, err := dumpDOM(ctx, t, browser, url)
		if err != nil && ctx.Err() != nil {
			t.Fatalf("the page at %s did not show what was expected within %v; it last showed %+v\n%s", url, timeout, last, last.dom)
		}
		if err != nil {
			t.Fatal(err)
		}
		if last, err = parsePage(dom); err != nil {
			t.Fatalf("%s: %v\n%s", url, err, dom)
		}
		if ok(last) {
			return last
		}
	}
}

// TestGroupPageBrowser renders the page in a headless browser against a
// report that changes: the page refreshes on its own, shows the view and
// its members, marks a member that does not answer and one outside the
// view, and keeps the last table, marked old, when the report cannot be
// read.
func TestGroupPageBrowser(t *testing.T) {
	browser := findBrowser(t)
	first := statusReport{Prefix: "/convoy/", Epoch: 4, Start: 10, Members: []statusMember{
		{ID: 1, InView: true, Incarnation: 1, Status: &memberStatus{ID: 1, Epoch: 4, Serving: true}},
		{ID: 2, InView: true, Incarnation: 1, Status: &memberStatus{ID: 2, Epoch: 4, Serving: true}},
	}}
	second := statusReport{Prefix: "/convoy/", Epoch: 5, Start: 20, Members: []statusMember{
		{ID: 1, InView: true, Incarnation: 1795753223048671081, Status: &memberStatus{ID: 1, Epoch: 5, Serving: true}},
		{ID: 2, InView: true, Incarnation: 1, Error: "unreachable: connect: connection refused", SuspectedBy: map[uint64]string{1: "silent"}},
		{ID: 3, Error: "starting"},
	}, Problems: []string{`API record "/convoy/http/9": <b>not JSON</b>`}}
	var mu sync.Mutex
	var reads int
	reports := func() (statusReport, bool) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		switch {
		case reads == 1:
			return first, true
		case reads <= 3:
			return second, true
		default:
			return statusReport{}, false
		}
	}
	p := &groupPage{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { p.serveIndex(w) })
	mux.HandleFunc("GET /group", func(w http.ResponseWriter, r *http.Request) {
		if rep, ok := reports(); ok {
			_ = printJSON(w, rep)
			return
		}
		writeJSONError(w, http.StatusServiceUnavailable, "etcd is away")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dom, err := dumpDOM(t.Context(), t, browser, srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parsePage(dom)
	if err != nil {
		t.Fatalf("%v:\n%s", err, dom)
	}
	mu.Lock()
	n := reads
	mu.Unlock()
	// The page read the report at least four times in the browser's
	// virtual time (about once a second): it shows the second report,
	// the last it could read.
	if n < 4 || got.epoch != 5 || !slices.Equal(got.inView, []uint64{1, 2}) || !slices.Equal(got.outside, []uint64{3}) {
		t.Errorf("after %d reads: epoch %d, members %v in the view, %v outside; want 4 or more reads, epoch 5, [1 2], [3]\n%s",
			n, got.epoch, got.inView, got.outside, dom)
	}
	if want := map[uint64]string{1: "", 2: "down", 3: "stale"}; !maps.Equal(got.classes, want) {
		t.Errorf("rows marked %v, want %v", got.classes, want)
	}
	if !strings.Contains(got.updated, "Cannot read the group: etcd is away") || !strings.Contains(dom, `<tbody id="members" class="old">`) {
		t.Errorf("under the table %q, want the failure, and the table marked old\n%s", got.updated, dom)
	}
	// An incarnation beyond 2^53 shows whole, not rounded as a
	// JavaScript number.
	for _, s := range []string{"View <strong", "2 members (1, 2)", ">1795753223048671081<", ">ok<", "1 (silent)", "connection refused", "starting: not yet serving",
		// A record's problem is shown as text, never as markup.
		`<li class="problem">Ignored: API record "/convoy/http/9": &lt;b&gt;not JSON&lt;/b&gt;</li>`} {
		if !strings.Contains(dom, s) {
			t.Errorf("the page lacks %q\n%s", s, dom)
		}
	}
}

// TestNodeGroupPageBrowser renders a real member's page in a headless
// browser: it lists the view's members and its epoch; once a third
// member joins, the page shows the new view with it.
func TestNodeGroupPageBrowser(t *testing.T) {
	browser := findBrowser(t)
	etcd := startTestEtcd(t)
	n1 := startKVNode(t, etcd.Endpoints(), 1)
	startKVNode(t, etcd.Endpoints(), 2)

	before := waitPage(t, browser, n1.url+"/", time.Minute, func(p renderedPage) bool {
		return p.epoch > 0 && slices.Equal(p.inView, []uint64{1, 2}) && len(p.outside) == 0
	})
	if want := getGroup(t, n1.url).Epoch; before.epoch != want {
		t.Errorf("the page shows view %d, GET /group %d", before.epoch, want)
	}
	startKVNode(t, etcd.Endpoints(), 3) // joins
	after := waitPage(t, browser, n1.url+"/", time.Minute, func(p renderedPage) bool {
		return p.epoch > before.epoch && slices.Equal(p.inView, []uint64{1, 2, 3})
	})
	if !strings.Contains(after.dom, fmt.Sprintf("View <strong id=\"epoch\">%d</strong>: 3 members (1, 2, 3)", after.epoch)) {
		t.Errorf("the page does not state view %d of 3 members:\n%s", after.epoch, after.dom)
	}
}
