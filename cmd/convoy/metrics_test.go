package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/convoy-gcs/convoy/etcddev"
)

// A member run with -metrics-addr serves its group's metrics: writes to
// the key-value store move the delivery counters, and the view shows in
// the view counter; the profiler answers too.
func TestNodeMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	etcd, err := etcddev.Start(ctx, etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	s := nodeSettings{
		ID: 1, App: "kv", Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		Etcd: etcd.Endpoints(), Prefix: "/convoy/", Data: t.TempDir(), Initial: 1,
	}
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- serveNode(ctx, s, pw, slog.New(slog.DiscardHandler))
		pw.Close()
	}()
	var line servingLine
	if err := json.NewDecoder(bufio.NewReader(pr)).Decode(&line); err != nil {
		t.Fatalf("serving line: %v (%v)", err, <-served)
	}
	go io.Copy(io.Discard, pr)
	if line.Metrics == "" {
		t.Fatalf("serving line %+v names no metrics address", line)
	}
	const writes = 5
	for i := range writes {
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/kv/k%d", line.HTTP, i), strings.NewReader("v"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("PUT: %s", resp.Status)
		}
	}
	// A put is answered once applied here, and the counter moves as the
	// message is handed to the application.
	m := scrape(t, "http://"+line.Metrics+"/metrics")
	delivered, views := m["convoy_delivered_messages_total"], m["convoy_membership_views_total"]
	if delivered < writes || views < 1 {
		t.Errorf("metrics: %v messages delivered (want at least %d), %v views (want at least 1)", delivered, writes, views)
	}
	resp, err := http.Get("http://" + line.Metrics + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/debug/pprof/: %s", resp.Status)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// scrape reads a Prometheus text exposition, summing each metric's
// samples over their labels.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		// name{labels} value, or name value.
		name, rest, _ := strings.Cut(l, " ")
		if i := strings.IndexByte(l, '{'); i >= 0 {
			name, rest = l[:i], strings.TrimSpace(l[strings.LastIndexByte(l, '}')+1:])
		}
		if f := strings.Fields(rest); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				out[name] += v
			}
		}
	}
	return out
}

// Members run with -otlp-endpoint send their spans to the collector: a
// view change when a second member joins, and the state transfer into it.
func TestNodeTraces(t *testing.T) {
	var mu sync.Mutex
	names := make(map[string]int)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					names[sp.Name]++
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	defer collector.Close()

	ctx := context.Background()
	etcd, err := etcddev.Start(ctx, etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	start := func(id uint64) (cancel func() error) {
		nctx, stop := context.WithCancel(ctx)
		s := nodeSettings{
			ID: id, App: "kv", Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0", OTLPEndpoint: collector.URL,
			Etcd: etcd.Endpoints(), Prefix: "/convoy/", Data: t.TempDir(), Initial: 1,
		}
		pr, pw := io.Pipe()
		served := make(chan error, 1)
		go func() {
			served <- serveNode(nctx, s, pw, slog.New(slog.DiscardHandler))
			pw.Close()
		}()
		var line servingLine
		if err := json.NewDecoder(pr).Decode(&line); err != nil {
			stop()
			t.Fatalf("member %d: serving line: %v (%v)", id, err, <-served)
		}
		go io.Copy(io.Discard, pr)
		return func() error { stop(); return <-served }
	}
	stop1 := start(1)
	stop2 := start(2) // joins: a view change, and a state transfer into it
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if names["convoy.view.change"] == 0 || names["convoy.state.transfer"] == 0 {
		t.Errorf("the collector received spans %v; want convoy.view.change and convoy.state.transfer", names)
	}
}
