package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

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
