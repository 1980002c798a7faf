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
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/convoy-gcs/convoy/etcddev"
)

// startTestNode runs "convoy node" with settings s in this process until
// the test ends or the returned function stops it (its result is the
// node's), and returns the line it printed once serving.
func startTestNode(t *testing.T, s nodeSettings) (servingLine, func() error) {
	t.Helper()
	return startTestNodeLog(t, s, slog.New(slog.DiscardHandler))
}

// startTestNodeLog is startTestNode with the node logging to log.
func startTestNodeLog(t *testing.T, s nodeSettings, log *slog.Logger) (servingLine, func() error) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- serveNode(ctx, s, pw, log)
		pw.Close()
	}()
	var line servingLine
	if err := json.NewDecoder(pr).Decode(&line); err != nil {
		stop()
		t.Fatalf("member %d: serving line: %v (%v)", s.ID, err, <-served)
	}
	go io.Copy(io.Discard, pr)
	var once sync.Once
	var err error
	done := func() error {
		once.Do(func() { stop(); err = <-served })
		return err
	}
	t.Cleanup(func() { done() })
	return line, done
}

// A member run with -metrics-addr serves its group's metrics, and a
// scripted workload moves them: writes to the key-value store move the
// sent and delivered counters (by mode), the latencies and the durable
// log's syncs; a second member joining moves the views and the state
// transferred, on both sides; a third stopping without leaving (its
// group closed, its connections with it) moves the suspicions and the
// views once more. The profiler answers too.
func TestNodeMetrics(t *testing.T) {
	etcd, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	settings := func(id uint64) nodeSettings {
		return nodeSettings{
			ID: id, App: "kv", Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			Etcd: etcd.Endpoints(), Prefix: "/convoy/", Data: t.TempDir(), Initial: 1,
			Heartbeat: 10 * time.Millisecond, SuspectTimeout: 250 * time.Millisecond,
		}
	}
	first, _ := startTestNode(t, settings(1))
	if first.Metrics == "" {
		t.Fatalf("serving line %+v names no metrics address", first)
	}
	metrics1 := "http://" + first.Metrics + "/metrics"
	before := scrape(t, metrics1)

	const writes = 5
	for i := range writes {
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/kv/k%d", first.HTTP, i), strings.NewReader("value"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("PUT: %s", resp.Status)
		}
	}
	// A put is answered once applied here: by then it was sent,
	// delivered, synced and applied.
	after := scrape(t, metrics1)
	atomic := []string{"mode", "atomic"}
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"convoy_sent_messages_total", atomic, writes},
		{"convoy_sent_bytes_total", atomic, writes * 5},
		{"convoy_delivered_messages_total", atomic, writes},
		{"convoy_delivered_bytes_total", atomic, writes * 5},
		{"convoy_delivery_latency_seconds_count", atomic, writes},
		{"convoy_persistence_sync_latency_seconds_count", nil, 1},
		{"convoy_persistence_batch_entries_count", nil, 1},
		{"convoy_persistence_fsyncs_total", nil, 1},
	} {
		if d := after.sum(c.name, c.labels...) - before.sum(c.name, c.labels...); d < c.min {
			t.Errorf("%s%v grew by %v, want at least %v", c.name, c.labels, d, c.min)
		}
	}
	for _, name := range []string{"convoy_barrier_lag_seconds", "convoy_durable_lag", "convoy_membership_epoch"} {
		if !after.has(name) {
			t.Errorf("no %s series", name)
		}
	}
	if !after.has("convoy_barrier_lag_seconds", "barrier", "commit") || !after.has("convoy_barrier_lag_seconds", "barrier", "delivery") {
		t.Errorf("convoy_barrier_lag_seconds lacks a barrier")
	}

	// A second member joins: the first donates its state.
	second, _ := startTestNode(t, settings(2))
	metrics2 := "http://" + second.Metrics + "/metrics"
	waitScrape(t, metrics1, "convoy_membership_views_total", after.sum("convoy_membership_views_total")+1)
	waitScrape(t, metrics1, "convoy_transfer_bytes_total", 1, "role", "donor", "kind", "snapshot")
	waitScrape(t, metrics2, "convoy_transfer_bytes_total", 1, "role", "joiner", "kind", "snapshot")
	waitScrape(t, metrics2, "convoy_transfer_duration_seconds_count", 1, "role", "joiner", "kind", "snapshot")

	// A third joins, then stops without leaving: the others suspect it,
	// confirm, and go on without it.
	_, stop3 := startTestNode(t, settings(3))
	joined := waitScrape(t, metrics1, "convoy_membership_views_total", after.sum("convoy_membership_views_total")+2)
	if err := stop3(); err != nil {
		t.Fatal(err)
	}
	waitScrape(t, metrics1, "convoy_membership_views_total", joined.sum("convoy_membership_views_total")+1)
	gone := scrape(t, metrics1).add(scrape(t, metrics2))
	for _, state := range []string{"raised", "confirmed"} {
		if gone.sum("convoy_membership_suspicions_total", "state", state) < 1 {
			t.Errorf("no suspicion %s of the crashed member", state)
		}
	}

	resp, err := http.Get("http://" + first.Metrics + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/debug/pprof/: %s", resp.Status)
	}
}

// sample is one series of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is a scraped Prometheus text exposition.
type exposition []sample

// sum adds the values of the series of metric name whose labels include
// the given ones (pairs of name and value).
func (e exposition) sum(name string, labels ...string) float64 {
	var total float64
	for _, s := range e {
		if s.name == name && s.matches(labels) {
			total += s.value
		}
	}
	return total
}

// has reports whether metric name has a series with the given labels.
func (e exposition) has(name string, labels ...string) bool {
	for _, s := range e {
		if s.name == name && s.matches(labels) {
			return true
		}
	}
	return false
}

// add returns the series of e and o together.
func (e exposition) add(o exposition) exposition { return append(append(exposition(nil), e...), o...) }

func (s sample) matches(labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if s.labels[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// scrape reads the Prometheus text exposition at url.
func scrape(t *testing.T, url string) exposition {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out exposition
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		// name{labels} value, or name value.
		s := sample{labels: map[string]string{}}
		rest := l
		if i := strings.IndexByte(l, '{'); i >= 0 {
			j := strings.LastIndexByte(l, '}')
			s.name, rest = l[:i], l[j+1:]
			for _, kv := range splitLabels(l[i+1 : j]) {
				k, v, _ := strings.Cut(kv, "=")
				if uq, err := strconv.Unquote(v); err == nil {
					s.labels[k] = uq
				}
			}
		} else {
			s.name, rest, _ = strings.Cut(l, " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// splitLabels splits the inside of {…} at the commas between labels
// (not those in quoted values).
func splitLabels(s string) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// waitScrape scrapes url until the series of metric name with the given
// labels add up to at least min, and returns that exposition.
func waitScrape(t *testing.T, url, name string, min float64, labels ...string) exposition {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e := scrape(t, url)
		if e.sum(name, labels...) >= min {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s%v = %v, want at least %v", url, name, labels, e.sum(name, labels...), min)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	start := func(id uint64) (stop func() error) {
		_, stop = startTestNode(t, nodeSettings{
			ID: id, App: "kv", Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0", OTLPEndpoint: collector.URL,
			Etcd: etcd.Endpoints(), Prefix: "/convoy/", Data: t.TempDir(), Initial: 1,
		})
		return stop
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
