package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/examples/paxos"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/childproc"
	"github.com/convoy-gcs/convoy/internal/freeport"
)

// The overload test's workload and the members' limits.
const (
	overloadMembers = 3
	// overloadValueBytes is the size of a value written.
	overloadValueBytes = 1 << 10
	// overloadDuration is how long the load lasts, and overloadCalibrate
	// how long the measure of the sustainable rate before it.
	overloadDuration  = 60 * time.Second
	overloadCalibrate = 5 * time.Second
	// overloadCalibrators are the closed-loop callers that measure the
	// sustainable rate: enough to keep the group busy.
	overloadCalibrators = 64
	// overloadHTTPClients and overloadStreamCallers are the closed-loop
	// callers of the load: each writes (and now and then reads) its own
	// keys, one request at a time, without pause.
	overloadHTTPClients   = 2048
	overloadStreamCallers = 1024
	// overloadStreamClients are the Go clients (each with a stream per
	// member it uses) the stream callers share.
	overloadStreamClients = 8
	// overloadKeys is how many keys each caller writes, in turn.
	overloadKeys = 4
	// overloadOpTimeout bounds one operation, retries included.
	overloadOpTimeout = 10 * time.Second
)

// The members' limits under test (see the key-value store's package
// documentation, "Overload and memory"), and their failure detector's
// timeout: on two cores shared with other work, the system leaves a
// process without a CPU for up to 200 ms at a time under this load
// (execution traces of the members showed it), and two such pauses
// close together silence a member past the default 250 ms: it is
// excluded.
const (
	overloadWindowBytes     = 8 << 20
	overloadMaxValueBytes   = 64 << 10
	overloadMaxRequests     = 256
	overloadMaxRequestBytes = 8 << 20
	overloadMaxStreams      = 32
	overloadMaxConns        = 1024
	overloadSuspectTimeout  = time.Second
)

// TestOverload runs three "convoy node -app kv" processes under a load
// many times what they sustain, and checks that they refuse what they
// cannot carry instead of holding it: each member's memory (RSS, sampled
// every second) stays within the bound the key-value store's package
// documentation gives for their settings ("Overload and memory"),
// requests are refused with 503 (counted in the refusals' metric), no
// member leaves the view, the members' goroutines come back to their
// number before the load, every acknowledged write is on every member,
// and overloadRest after the load (and at least its idle release after
// the check's reads) each member's Go heap is back within
// the part of the documentation's bound at rest it holds (see
// checkHeapAtRest). It logs the figures, among them each member's RSS
// then against the documentation's bound at rest.
func TestOverload(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	// etcd runs in a process of its own: in this one, the clients' load
	// would starve it.
	etcd := startEtcdProcess(ctx, t)
	members := startOverloadMembers(t, etcd)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: overloadHTTPClients}}
	defer hc.CloseIdleConnections()
	api := apiClient{hc: hc}
	var epoch uint64
	for _, m := range members {
		s, err := waitStatus(ctx, api, m.proc, m.url, func(s memberStatus) bool { return s.Serving && len(s.Members) == overloadMembers })
		if err != nil {
			t.Fatal(err)
		}
		epoch = s.Epoch
	}
	urls := make([]string, len(members))
	for i, m := range members {
		urls[i] = m.url
		m.idleRSS = mustRSS(t, m.proc.pid())
		m.idleHeap = mustHeapStats(t, m.metrics)
		m.idleGoroutines = goroutines(t, m.metrics)
	}
	started := time.Now()
	// From now on to the end, every member's RSS and view are sampled
	// every second.
	sampling := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Go(func() { sampleMembers(t, api, members, epoch, sampling) })
	stopSampling := sync.OnceFunc(func() {
		close(sampling)
		sampled.Wait()
	})
	defer stopSampling()

	// What the group sustains: closed-loop callers over streams, enough
	// to keep it busy.
	sustained := calibrate(ctx, t, hc, urls)

	// The load.
	w := newOverloadLoad(hc, urls)
	loadStart := time.Now()
	w.run(ctx, overloadDuration)
	loaded := time.Since(loadStart)

	// Refusals, as the members count them; no view change.
	var refused [2]float64
	for _, m := range members {
		e := scrape(t, m.metrics+"/metrics")
		refused[0] += e.sum("convoy_kv_refused_requests_total", "api", "http")
		refused[1] += e.sum("convoy_kv_refused_requests_total", "api", "stream")
		if v := e.sum("convoy_membership_views_total"); v != 1 {
			t.Errorf("member %d installed %v views: it left the view, or a member did", m.id, v)
		}
	}
	acked, failed, reads := w.acked.Load(), w.failed.Load(), w.reads.Load()
	t.Logf("sustained: %.0f writes/s acknowledged to %d closed-loop callers over streams, in %v",
		sustained, overloadCalibrators, overloadCalibrate)
	t.Logf("load: %d callers over HTTP (a connection each) and %d over %d stream clients, without pause (%d times the callers that sustain the rate above), for %v: %d writes acknowledged (%.0f/s), %d reads, %d operations failed; the members refused %.0f requests over HTTP and %.0f over streams (%.0f/s)",
		overloadHTTPClients, overloadStreamCallers, overloadStreamClients, (overloadHTTPClients+overloadStreamCallers)/overloadCalibrators,
		loaded.Round(time.Millisecond), acked, float64(acked)/loaded.Seconds(), reads, failed,
		refused[0], refused[1], (refused[0]+refused[1])/loaded.Seconds())
	w.mu.Lock()
	for _, s := range w.wrong {
		t.Error(s)
	}
	w.mu.Unlock()
	if refused[0]+refused[1] == 0 {
		t.Errorf("no request refused: the load did not reach the members' limits")
	}
	if acked == 0 {
		t.Fatalf("no write acknowledged")
	}

	// After the load: the members' goroutines come back to their number
	// before it, once the clients' connections and streams are closed.
	w.close()
	hc.CloseIdleConnections()
	settleStart := time.Now()
	for _, m := range members {
		deadline := time.Now().Add(30 * time.Second)
		for {
			m.afterGoroutines = goroutines(t, m.metrics)
			if m.afterGoroutines <= m.idleGoroutines+overloadGoroutineSlack || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		m.afterRSS = mustRSS(t, m.proc.pid())
	}
	settled := time.Since(settleStart)

	// Every acknowledged write is on every member.
	checkStart := time.Now()
	w.check(ctx, t, hc, members)
	checked := time.Since(checkStart)
	stopSampling()

	// At rest again: each member's RSS overloadRest after the load, and
	// once it has been idle long enough since the check's reads, its last
	// requests, to have returned the memory they held (nodeIdleRelease,
	// and a margin for the ticks that notice it and for the collections):
	// under the race detector and a busy test run the check takes most of
	// overloadRest, and a member read last had not released yet.
	time.Sleep(max(time.Until(loadStart.Add(loaded+overloadRest)), nodeIdleRelease+overloadReleaseMargin))
	for _, m := range members {
		m.restAfter = time.Since(loadStart.Add(loaded)).Round(time.Second)
		m.restRSS = mustRSS(t, m.proc.pid())
		m.restHeap = mustHeapStats(t, m.metrics)
	}
	rested := time.Since(checkStart) - checked

	// Memory: every sample within the bound; the view the same
	// throughout.
	state := w.stateBytes()
	for _, m := range members {
		bound := overloadBound(m.idleRSS, state)
		m.mu.Lock()
		peak, epochs := max(m.mu.peakRSS, m.afterRSS), m.mu.epochs
		m.mu.Unlock()
		if len(epochs) > 0 {
			t.Errorf("member %d during the load: %s; want view %d, serving, throughout", m.id, strings.Join(epochs, ", "), epoch)
		}
		t.Logf("member %d: RSS at rest %s, at most %s (%.0f%% of the bound, %s), after the load %s; goroutines before the load %d, after %d",
			m.id, mib(m.idleRSS), mib(peak), 100*float64(peak)/float64(bound), mib(bound), mib(m.afterRSS), m.idleGoroutines, m.afterGoroutines)
		if peak > bound {
			t.Errorf("member %d: RSS reached %s, above the bound %s", m.id, mib(peak), mib(bound))
		}
		// At rest again: the Go heap is checked; the RSS, which holds
		// Pebble's memtables too, is logged against the bound at rest.
		checkHeapAtRest(t, m, state)
		rest := overloadRestBound(m.idleRSS, state)
		t.Logf("member %d: RSS %v after the load %s, %.0f%% of the bound at rest, %s", m.id, m.restAfter, mib(m.restRSS), 100*float64(m.restRSS)/float64(rest), mib(rest))
		if m.afterGoroutines > m.idleGoroutines+overloadGoroutineSlack {
			t.Errorf("member %d: %d goroutines after the load, %d before", m.id, m.afterGoroutines, m.idleGoroutines)
		}
	}

	t.Logf("took %v: starting %v, measuring the rate %v, the load %v, goroutines settling %v, reading every key from every member %v, at rest %v",
		time.Since(began).Round(time.Second), started.Sub(began).Round(time.Millisecond), overloadCalibrate,
		loaded.Round(time.Millisecond), settled.Round(time.Millisecond), checked.Round(time.Millisecond), rested.Round(time.Millisecond))
}

// The members' settings in the bound: their group's size and the
// library's constants the package documentation names.
const (
	// overloadPebbleBytes is P: two memtables of 64 MiB and the block
	// cache.
	overloadPebbleBytes = 2*64<<20 + 8<<20
	// overloadGCFactor is 1 + GOGC/100, GOGC at its default.
	overloadGCFactor = 2
	// overloadIDBytes bounds a request id of package client: 32 hex
	// digits, a dash and a counter.
	overloadIDBytes = 32 + 1 + 20
)

// overloadRest is how long after the load a member's RSS is measured
// again, at rest.
const overloadRest = 30 * time.Second

// overloadReleaseMargin is how long past nodeIdleRelease after its last
// request a member is given to return the memory its requests held: its
// idle ticks come every quarter of nodeIdleRelease, and the release's
// two collections take a moment under the race detector.
const overloadReleaseMargin = 5 * time.Second

// overloadBound returns the bound of the key-value store's package
// documentation ("Overload and memory") on the RSS of a member of the
// test, at rest at idle bytes, with a state of state bytes. Under the
// race detector, what the bound allows above idle is raceMemory times
// as much.
func overloadBound(idle, state int64) int64 {
	a := int64(overloadMaxRequestBytes + overloadMaxRequests*16<<10)
	g := int64(3 * overloadMembers * overloadWindowBytes)
	c := int64(overloadMaxConns * 48 << 10)
	t := int64(overloadMaxStreams * (4*(256<<10+overloadMaxValueBytes+31) + 536<<10))
	d := int64(paxos.DedupeWindow * (overloadIDBytes + 180))
	return idle + raceMemory*(overloadPebbleBytes+overloadGCFactor*(a+g+c+t+state+d))
}

// overloadRestBound returns the bound of the key-value store's package
// documentation ("Overload and memory") on the RSS of a member of the
// test at rest after a load, at rest before it at idle bytes, with a
// state of state bytes: overloadBound's without the terms of the load,
// Pebble's memtables and cache, and the state and the kept results with
// the garbage collector's room. Under the race detector, what it allows
// above idle is raceMemory times as much.
func overloadRestBound(idle, state int64) int64 {
	d := int64(paxos.DedupeWindow * (overloadIDBytes + 180))
	return idle + raceMemory*(overloadPebbleBytes+overloadGCFactor*(state+d))
}

// etcdChildEnv, set, makes the test binary run an embedded etcd instead
// of its tests (see TestMain and startEtcdProcess).
const etcdChildEnv = "CONVOY_TEST_ETCD"

// runTestEtcd runs an embedded etcd, prints its endpoints as a JSON line,
// and serves until its standard input ends (its parent closed it, or
// died).
func runTestEtcd() int {
	srv, err := etcddev.Start(context.Background(), etcddev.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	if err := json.NewEncoder(os.Stdout).Encode(srv.Endpoints()); err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startEtcdProcess runs an embedded etcd in a process of its own (this
// test binary, see runTestEtcd) until the test ends, and returns its
// endpoints.
func startEtcdProcess(ctx context.Context, t *testing.T) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	p, err := childproc.Start(exec.Command(self), childproc.Options{
		Name: "etcd",
		Env:  []string{etcdChildEnv + "=1"},
		Ready: func(line []byte) bool {
			return json.Unmarshal(line, &endpoints) == nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return endpoints
}

// overloadGoroutineSlack is how many more goroutines than before the
// load a member may run after it: connections that close on their own
// time (the HTTP server's, etcd's).
const overloadGoroutineSlack = 20

// overloadMember is one member process of the overload test.
type overloadMember struct {
	id           uint64
	url, metrics string
	proc         *memberProc

	// idleRSS and idleHeap are the RSS and the Go heap before the load;
	// restRSS and restHeap restAfter after it ended (overloadRest or
	// more).
	restAfter                       time.Duration
	idleRSS, afterRSS, restRSS      int64
	idleHeap, restHeap              heapStats
	idleGoroutines, afterGoroutines int

	mu struct {
		sync.Mutex
		peakRSS int64
		// epochs are the views the samples found the member in, if
		// another than the first, or not serving.
		epochs []string
	}
}

// startOverloadMembers starts the members' processes ("convoy node", as
// "convoy cluster" starts them) with the settings under test, their
// logs in files shown if the test fails.
func startOverloadMembers(t *testing.T, etcd []string) []*overloadMember {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freeport.Pick("127.0.0.1", 2*overloadMembers)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var members []*overloadMember
	for i := range overloadMembers {
		id := uint64(i + 1)
		m := &overloadMember{
			id:      id,
			url:     "http://" + hostPort("127.0.0.1", ports[2*i]),
			metrics: "http://" + hostPort("127.0.0.1", ports[2*i+1]),
		}
		args := []string{
			"-id", strconv.FormatUint(id, 10), "-app", appKV,
			"-listen", "127.0.0.1:0", "-http", hostPort("127.0.0.1", ports[2*i]),
			"-metrics-addr", hostPort("127.0.0.1", ports[2*i+1]),
			"-etcd", strings.Join(etcd, ","),
			"-data", filepath.Join(dir, fmt.Sprintf("node-%d", id)),
			"-initial", strconv.Itoa(overloadMembers),
			"-window-bytes", strconv.Itoa(overloadWindowBytes),
			"-max-value-bytes", strconv.Itoa(overloadMaxValueBytes),
			"-max-requests", strconv.Itoa(overloadMaxRequests),
			"-max-request-bytes", strconv.Itoa(overloadMaxRequestBytes),
			"-max-streams", strconv.Itoa(overloadMaxStreams),
			"-max-conns", strconv.Itoa(overloadMaxConns),
			"-suspect-timeout", (overloadSuspectTimeout * raceSlowdown).String(),
		}
		logPath := filepath.Join(dir, fmt.Sprintf("node-%d.log", id))
		m.proc, err = startMember(selfExec{path: self, env: []string{childEnv + "=1"}}, fmt.Sprintf("member %d", id), id, m.url, args, logPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			m.proc.stop(memberStopTimeout)
			if t.Failed() {
				if b, err := os.ReadFile(logPath); err == nil {
					t.Logf("member %d's log, the end:\n%s", id, tail(b, 40))
				}
			}
		})
		members = append(members, m)
	}
	return members
}

// rss returns the resident set size of process pid, in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// mustRSS is rss, failing the test on an error.
func mustRSS(t *testing.T, pid int) int64 {
	t.Helper()
	r, err := rss(pid)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// goroutines returns a member's goroutine count, from its profiler.
func goroutines(t *testing.T, metrics string) int {
	t.Helper()
	resp, err := http.Get(metrics + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		t.Fatalf("goroutine profile's first line %q: %v", line, err)
	}
	return n
}

// sampleMembers records every member's RSS every second until stop is
// closed, and the views it finds them in other than epoch.
func sampleMembers(t *testing.T, api apiClient, members []*overloadMember, epoch uint64, stop chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, m := range members {
			r, err := rss(m.proc.pid())
			if err != nil {
				t.Errorf("member %d: %v", m.id, err)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := fetchStatus(ctx, api, m.url)
			cancel()
			m.mu.Lock()
			m.mu.peakRSS = max(m.mu.peakRSS, r)
			if err == nil && (s.Epoch != epoch || !s.Serving) {
				m.mu.epochs = append(m.mu.epochs, fmt.Sprintf("view %d (serving %v)", s.Epoch, s.Serving))
			}
			m.mu.Unlock()
		}
	}
}

// mib formats bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// tail returns the last n lines of b.
func tail(b []byte, n int) []byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	return bytes.Join(lines[max(len(lines)-n, 0):], nil)
}

// calibrationKey is calibrating caller c's key k.
func calibrationKey(c, k int) string { return fmt.Sprintf("calibrate-%d-%d", c, k) }

// calibrate returns the writes per second that closed-loop callers over
// streams get acknowledged, a measure of what the group sustains.
func calibrate(ctx context.Context, t *testing.T, hc *http.Client, urls []string) float64 {
	t.Helper()
	var clients []*kvclient.Client
	for i := range overloadMembers {
		clients = append(clients, kvclient.New(rotate(urls, i), kvclient.WithHTTPClient(hc), kvclient.WithStreams()))
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	var acked atomic.Int64
	value := make([]byte, overloadValueBytes)
	ctx, cancel := context.WithTimeout(ctx, overloadCalibrate)
	defer cancel()
	var wg sync.WaitGroup
	for i := range overloadCalibrators {
		c := clients[i%len(clients)]
		wg.Go(func() {
			for seq := 0; ctx.Err() == nil; seq++ {
				if _, err := c.Put(ctx, calibrationKey(i, seq%overloadKeys), value); err == nil {
					acked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(acked.Load()) / overloadCalibrate.Seconds()
}

// overloadLoad is the load's callers and what they did.
type overloadLoad struct {
	http   []*kvclient.Client // one per member to start from
	stream []*kvclient.Client
	// keys[c*overloadKeys+k] is what caller c wrote to its key k.
	keys                 []keyRecord
	acked, failed, reads atomic.Int64

	mu sync.Mutex
	// wrong describes the reads that found a value their key may not
	// hold.
	wrong []string
}

// keyRecord is what one caller wrote to one of its keys: the sequence
// number of its last acknowledged write (0: none) and the index it was
// applied at, and those of the writes that failed, which may or may not
// have been applied (at any time: a command the group holds may be
// delivered after later writes).
type keyRecord struct {
	acked      int
	ackedIndex uint64
	maybe      []int
}

// allows reports whether the key may hold the value of write seq (0: no
// value).
func (r *keyRecord) allows(seq int) bool {
	return seq == r.acked || slices.Contains(r.maybe, seq)
}

func newOverloadLoad(hc *http.Client, urls []string) *overloadLoad {
	w := &overloadLoad{keys: make([]keyRecord, (overloadHTTPClients+overloadStreamCallers)*overloadKeys)}
	for i := range overloadMembers {
		w.http = append(w.http, kvclient.New(rotate(urls, i), kvclient.WithHTTPClient(hc)))
	}
	for i := range overloadStreamClients {
		w.stream = append(w.stream, kvclient.New(rotate(urls, i), kvclient.WithHTTPClient(hc), kvclient.WithStreams()))
	}
	return w
}

// close closes the clients' streams.
func (w *overloadLoad) close() {
	for _, c := range append(w.http, w.stream...) {
		c.Close()
	}
}

// overloadKey is caller c's key k.
func overloadKey(c, k int) string { return fmt.Sprintf("load-%d-%d", c, k) }

// overloadValue is the value of write seq of caller c to its key k: it
// names them, and is overloadValueBytes long.
func overloadValue(c, k, seq int) []byte {
	v := make([]byte, overloadValueBytes)
	copy(v, fmt.Sprintf("%d/%d/%d/", c, k, seq))
	return v
}

// parseOverloadValue returns the sequence number of a value of caller c's
// key k, or -1 if it is not one.
func parseOverloadValue(c, k int, v []byte) int {
	prefix := fmt.Sprintf("%d/%d/", c, k)
	if len(v) != overloadValueBytes || !bytes.HasPrefix(v, []byte(prefix)) {
		return -1
	}
	rest := v[len(prefix):]
	end := bytes.IndexByte(rest, '/')
	if end < 0 {
		return -1
	}
	seq, err := strconv.Atoi(string(rest[:end]))
	if err != nil || !bytes.Equal(overloadValue(c, k, seq), v) {
		return -1
	}
	return seq
}

// stateBytes is S of the bound for the keys the test writes (its
// calibration's and its load's): for each, its name twice, and the
// command of a write to it (its value, name and request id and 20
// bytes), and 100 bytes of map.
func (w *overloadLoad) stateBytes() int64 {
	var s int64
	add := func(key string) {
		s += int64(2*len(key) + overloadValueBytes + len(key) + overloadIDBytes + 20 + 100)
	}
	for i := range overloadCalibrators {
		for k := range overloadKeys {
			add(calibrationKey(i, k))
		}
	}
	for i := range w.keys {
		add(overloadKey(i/overloadKeys, i%overloadKeys))
	}
	return s
}

// run runs every caller for d.
func (w *overloadLoad) run(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for c := range overloadHTTPClients + overloadStreamCallers {
		var cl *kvclient.Client
		if c < overloadHTTPClients {
			cl = w.http[c%len(w.http)]
		} else {
			cl = w.stream[c%len(w.stream)]
		}
		wg.Go(func() { w.caller(ctx, c, cl) })
	}
	wg.Wait()
}

// caller writes caller c's keys in turn until ctx ends; every tenth
// operation reads the key instead, which must hold a value it may hold.
func (w *overloadLoad) caller(ctx context.Context, c int, cl *kvclient.Client) {
	for op := 1; ; op++ {
		k := op % overloadKeys
		rec := &w.keys[c*overloadKeys+k]
		octx, cancel := context.WithTimeout(ctx, overloadOpTimeout)
		if op%10 == 0 {
			v, index, err := cl.Get(octx, overloadKey(c, k))
			cancel()
			if ctx.Err() != nil {
				return
			}
			switch seq := parseOverloadValue(c, k, v); {
			case errors.Is(err, kvclient.ErrNotFound) && rec.allows(0):
				w.reads.Add(1)
			case err != nil:
				w.failed.Add(1)
			case !rec.allows(seq):
				w.mu.Lock()
				w.wrong = append(w.wrong, fmt.Sprintf("read of %s at index %d: write %d, want %d (applied at %d) or one of %v",
					overloadKey(c, k), index, seq, rec.acked, rec.ackedIndex, rec.maybe))
				w.mu.Unlock()
			default:
				w.reads.Add(1)
			}
			continue
		}
		index, err := cl.Put(octx, overloadKey(c, k), overloadValue(c, k, op))
		cancel()
		if err != nil {
			// The write may still be applied, whenever.
			rec.maybe = append(rec.maybe, op)
			if ctx.Err() != nil {
				return
			}
			w.failed.Add(1)
			continue
		}
		rec.acked, rec.ackedIndex = op, index
		w.acked.Add(1)
	}
}

// check reads every key from every member (a linearizable read through
// that member alone: its read barrier, then its local state) and checks
// it holds its last acknowledged write, or one that failed and may have
// been applied after it.
func (w *overloadLoad) check(ctx context.Context, t *testing.T, hc *http.Client, members []*overloadMember) {
	t.Helper()
	var bad atomic.Int64
	for _, m := range members {
		cl := kvclient.New([]string{m.url}, kvclient.WithHTTPClient(hc), kvclient.WithStreams())
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(w.keys) {
						return
					}
					c, k := i/overloadKeys, i%overloadKeys
					rec := &w.keys[i]
					octx, cancel := context.WithTimeout(ctx, 30*time.Second)
					v, _, err := cl.Get(octx, overloadKey(c, k))
					cancel()
					seq := 0
					switch {
					case errors.Is(err, kvclient.ErrNotFound):
					case err != nil:
						t.Errorf("member %d: read %s: %v", m.id, overloadKey(c, k), err)
						bad.Add(1)
						continue
					default:
						seq = parseOverloadValue(c, k, v)
					}
					if !rec.allows(seq) && bad.Add(1) <= 20 {
						t.Errorf("member %d: %s holds write %d, want %d (applied at %d) or one of %v", m.id, overloadKey(c, k), seq, rec.acked, rec.ackedIndex, rec.maybe)
					}
				}
			})
		}
		wg.Wait()
		cl.Close()
	}
	if n := bad.Load(); n > 0 {
		t.Errorf("%d reads of %d wrong", n, len(w.keys)*len(members))
	}
}
