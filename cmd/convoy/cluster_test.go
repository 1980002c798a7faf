package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	logclient "github.com/convoy-gcs/convoy/examples/log/client"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/devcerts"
)

// freeBase returns a port p such that p to p+n are free on 127.0.0.1.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.N(40000)
		free := true
		for i := 0; i <= n && free; i++ {
			l, err := net.Listen("tcp", hostPort("127.0.0.1", base+i))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// clusterProc is a "convoy cluster" process run by a test, and the JSON
// lines it prints.
type clusterProc struct {
	cmd   *exec.Cmd
	lines chan string
}

// startCluster runs "convoy cluster args..." as a process of its own (this
// test binary run as the command), so that the test can signal it.
func startCluster(t *testing.T, args ...string) *clusterProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{"cluster"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &clusterProc{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("cluster stderr:\n%s", stderr.String())
		}
	})
	return p
}

// next decodes the next line the cluster prints into v.
func (p *clusterProc) next(t *testing.T, v any, timeout time.Duration) {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatal("the cluster's output ended")
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
	case <-time.After(timeout):
		t.Fatalf("no line from the cluster within %v", timeout)
	}
}

// clusterStatus runs "convoy status -json" in this process.
func clusterStatus(t *testing.T, etcd []string) statusReport {
	t.Helper()
	code, out, errOut := runCommand(t, &cli{}, "status", "-etcd", strings.Join(etcd, ","), "-json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var r statusReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("status output %q: %v", out, err)
	}
	return r
}

// TestCluster runs "convoy cluster -app log" with three members: it
// serves appends and reads through any member, shows in "convoy status",
// keeps serving without a member killed with SIGKILL (not restarted:
// no -restart), and on SIGTERM stops every member and exits.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and member processes")
	}
	dir := t.TempDir()
	base := freeBase(t, 3)
	p := startCluster(t, "-app", "log", "-nodes", "3", "-data", dir, "-http", hostPort("127.0.0.1", base))
	var ready clusterReady
	p.next(t, &ready, time.Minute)
	if !ready.Ready || len(ready.Etcd) != 1 || ready.Etcd[0] != "http://"+hostPort("127.0.0.1", base) || ready.Prefix != "/convoy/" || len(ready.Members) != 3 {
		t.Fatalf("ready line %+v", ready)
	}
	var pids []int
	for i, m := range ready.Members {
		if want := fmt.Sprintf("http://127.0.0.1:%d", base+i+1); m.ID != uint64(i+1) || m.HTTP != want || m.PID == 0 {
			t.Errorf("member %+v, want id %d at %s", m, i+1, want)
		}
		pids = append(pids, m.PID)
	}
	for i := 1; i <= 3; i++ {
		if _, err := os.Stat(fmt.Sprintf("%s/node-%d.log", dir, i)); err != nil {
			t.Errorf("member %d's log file: %v", i, err)
		}
	}

	// Append through member 1, read through member 2.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	via := func(i int) *logclient.Client {
		return logclient.New([]string{ready.Members[i-1].HTTP}, logclient.WithHTTPClient(hc))
	}
	for i, entry := range []string{"first", "second", "third"} {
		pos, err := via(1).Append(ctx, []byte(entry))
		if err != nil || pos != uint64(i) {
			t.Fatalf("append %q through member 1: position %d, %v; want %d", entry, pos, err, i)
		}
	}
	for i, want := range []string{"first", "second", "third"} {
		got, err := via(2).Read(ctx, uint64(i))
		if err != nil || string(got) != want {
			t.Errorf("read %d through member 2: %q, %v; want %q", i, got, err, want)
		}
	}

	// Status: the view in etcd, every member's own status.
	r := clusterStatus(t, ready.Etcd)
	if r.Epoch < 1 || len(r.Members) != 3 {
		t.Fatalf("status %+v: want a view of 3", r)
	}
	for i, m := range r.Members {
		if !m.InView || m.Addr == "" || m.Incarnation == 0 || m.App != appLog || m.HTTP != ready.Members[m.ID-1].HTTP || m.PID != ready.Members[m.ID-1].PID {
			t.Errorf("status of member %d: %+v", i+1, m)
		}
		if s := m.Status; s == nil || !s.Serving || s.Epoch != r.Epoch || s.Tail == nil || *s.Tail != 3 || s.Applied < 3 {
			t.Errorf("member %d's own status %+v (error %q): want serving in view %d with tail 3", m.ID, s, m.Error, r.Epoch)
		} else if g := s.Group; g == nil || g.Self != convoy.NodeID(m.ID) || g.Phase != "active" || g.Lease != "held" || g.Durable < 3 {
			t.Errorf("member %d's group status %+v: want active, holding its lease, durable up to 3", m.ID, g)
		}
	}
	code, table, _ := runCommand(t, &cli{}, "status", "-etcd", strings.Join(ready.Etcd, ","))
	if code != 0 || !strings.Contains(table, fmt.Sprintf("view %d, 3 members", r.Epoch)) || !strings.Contains(table, ready.Members[2].HTTP) ||
		!strings.Contains(table, "PHASE") || strings.Count(table, " held") != 3 {
		t.Errorf("status table (exit %d):\n%s", code, table)
	}

	// Kill member 3: the cluster reports it, the others go on.
	if err := syscall.Kill(ready.Members[2].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit clusterExit
	p.next(t, &exit, 10*time.Second)
	if !exit.Exited || exit.Restart || exit.ID != 3 || exit.PID != ready.Members[2].PID || !strings.Contains(exit.Exit, "killed") {
		t.Errorf("exit line %+v, want member 3 exited, killed", exit)
	}
	for i, entry := range []string{"fourth", "fifth"} {
		pos, err := via(1+i).Append(ctx, []byte(entry))
		if err != nil || pos != uint64(3+i) {
			t.Fatalf("append %q through member %d with member 3 dead: position %d, %v; want %d", entry, 1+i, pos, err, 3+i)
		}
	}
	if got, err := via(1).Read(ctx, 4); err != nil || string(got) != "fifth" {
		t.Errorf("read 4 through member 1: %q, %v", got, err)
	}
	r = clusterStatus(t, ready.Etcd)
	if in := r.inView(); in != 2 || r.Members[0].ID != 1 || r.Members[1].ID != 2 {
		t.Errorf("status after the kill: %+v; want members 1 and 2 in the view", r)
	}

	// SIGTERM: every member stops, then the cluster.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var stopped struct {
		Stopped bool `json:"stopped"`
	}
	p.next(t, &stopped, 30*time.Second)
	if !stopped.Stopped {
		t.Errorf("last line %+v, want stopped", stopped)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("the cluster exited with %v, want status 0", err)
	}
	checkGone(t, pids)
}

// TestClusterTLS runs "convoy cluster -tls -app log": etcd serves over
// TLS with client certificates, the members' APIs over TLS behind the
// token, and they talk to each other over mutual TLS. Appends and reads
// work with the token and the CA; without the token they are refused;
// "convoy status" reads the group with the files the cluster names.
func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	base := freeBase(t, 2)
	p := startCluster(t, "-app", "log", "-nodes", "2", "-data", dir, "-http", hostPort("127.0.0.1", base), "-tls")
	var ready clusterReady
	p.next(t, &ready, time.Minute)
	certs := filepath.Join(dir, "certs")
	if !ready.Ready || len(ready.Members) != 2 || ready.Certs != certs || len(ready.Etcd) != 1 || ready.Etcd[0] != "https://"+hostPort("127.0.0.1", base) {
		t.Fatalf("ready line %+v", ready)
	}
	for i, m := range ready.Members {
		if want := fmt.Sprintf("https://127.0.0.1:%d", base+i+1); m.HTTP != want {
			t.Errorf("member %d serves at %s, want %s", m.ID, m.HTTP, want)
		}
	}
	tokenFile := filepath.Join(certs, tokenFileName)
	token, err := readSecretFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := loadCertPool(filepath.Join(certs, devcerts.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	api := apiClient{hc: hc, token: token}
	if pos, err := api.log([]string{ready.Members[0].HTTP}).Append(ctx, []byte("secured")); err != nil || pos != 0 {
		t.Fatalf("append through member 1: %d, %v", pos, err)
	}
	if got, err := api.log([]string{ready.Members[1].HTTP}).Read(ctx, 0); err != nil || string(got) != "secured" {
		t.Errorf("read through member 2: %q, %v", got, err)
	}
	if _, err := (apiClient{hc: hc}).log([]string{ready.Members[1].HTTP}).Read(ctx, 0); !errors.Is(err, logclient.ErrUnauthorized) {
		t.Errorf("read without the token: %v, want ErrUnauthorized", err)
	}
	// net/http answers plain HTTP on a TLS port with 400.
	if resp, err := http.Get("http://" + hostPort("127.0.0.1", base+1) + "/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP: %s, want 400", resp.Status)
		}
	}

	code, out, errOut := runCommand(t, &cli{}, "status", "-etcd", ready.Etcd[0],
		"-etcd-ca", filepath.Join(certs, devcerts.CACertFile),
		"-etcd-cert", filepath.Join(certs, devcerts.ClientCertFile), "-etcd-key", filepath.Join(certs, devcerts.ClientKeyFile),
		"-http-ca", filepath.Join(certs, devcerts.CACertFile), "-http-token-file", tokenFile, "-json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.inView() != 2 {
		t.Errorf("status %+v: want two members in the view", r)
	}
	for _, m := range r.Members {
		if m.Status == nil || !m.Status.Serving || m.Status.Tail == nil || *m.Status.Tail != 1 {
			t.Errorf("member %d's own status %+v (%s): want serving with tail 1", m.ID, m.Status, m.Error)
		}
	}
	// etcd wants a client certificate.
	code, _, errOut = runCommand(t, &cli{}, "status", "-etcd", ready.Etcd[0], "-etcd-ca", filepath.Join(certs, devcerts.CACertFile), "-timeout", "1s")
	if code != 1 {
		t.Errorf("status without etcd's client certificate: exit %d, %s; want 1", code, errOut)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var stopped struct {
		Stopped bool `json:"stopped"`
	}
	p.next(t, &stopped, 30*time.Second)
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("the cluster exited with %v, want status 0", err)
	}
}

// TestClusterUsage checks the command line's errors.
func TestClusterUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-data", "d"}, "-app must be kv, log or pubsub"},
		{[]string{"-app", "log"}, "-data is required"},
		{[]string{"-app", "log", "-data", "d", "-nodes", "0"}, "-nodes must be positive"},
		{[]string{"-app", "log", "-data", "d", "-http", "7100"}, "-http"},
		{[]string{"-app", "log", "-data", "d", "-http", "127.0.0.1:65534"}, "must be a port"},
		{[]string{"-app", "log", "-data", "d", "-prefix", "/p"}, "-prefix must end in /"},
	} {
		args := append([]string{"cluster"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", args, code, errOut, tc.want)
		}
	}
}

// TestStatusUsage checks the command line's errors and a status read from
// an etcd that cannot be reached.
func TestStatusUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "-etcd is required"},
		{[]string{"-etcd", "http://127.0.0.1:1", "-prefix", "p"}, 2, "-prefix must end in /"},
		{[]string{"-etcd", "http://127.0.0.1:1", "-timeout", "300ms"}, 1, "reading etcd at http://127.0.0.1:1"},
	} {
		args := append([]string{"status"}, tc.args...)
		code, _, errOut := runCommand(t, &cli{}, args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: status %d, stderr %q; want %d and %q", args, code, errOut, tc.code, tc.want)
		}
	}
}

// TestClusterRestart runs "convoy cluster -app kv -restart": a member
// killed with SIGKILL is started again on its data directory, serves again
// and holds what was written before and while it was down.
func TestClusterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and member processes")
	}
	dir := t.TempDir()
	base := freeBase(t, 3)
	p := startCluster(t, "-app", "kv", "-nodes", "3", "-data", dir, "-http", hostPort("127.0.0.1", base), "-restart")
	var ready clusterReady
	p.next(t, &ready, time.Minute)
	if !ready.Ready || len(ready.Members) != 3 {
		t.Fatalf("ready line %+v", ready)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	// The clients use streams, which the members' HTTP servers upgrade
	// connections to.
	var clients []*kvclient.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	via := func(i int) *kvclient.Client {
		c := kvclient.New([]string{ready.Members[i-1].HTTP}, kvclient.WithHTTPClient(hc), kvclient.WithStreams())
		clients = append(clients, c)
		return c
	}
	if _, err := via(1).Put(ctx, "before", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(ready.Members[1].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var restart clusterExit
	p.next(t, &restart, 30*time.Second)
	if !restart.Restart || restart.ID != 2 || restart.OldPID != ready.Members[1].PID || restart.PID == 0 || restart.PID == restart.OldPID {
		t.Fatalf("restart line %+v, want member 2 restarted with a new pid", restart)
	}
	if _, err := via(1).Put(ctx, "while", []byte("2")); err != nil {
		t.Fatal(err)
	}
	// Member 2 serves again, with both writes.
	for _, kv := range [][2]string{{"before", "1"}, {"while", "2"}} {
		for {
			v, _, err := via(2).Get(ctx, kv[0])
			if err == nil && string(v) == kv[1] {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("read %q through the restarted member 2: %q, %v", kv[0], v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var stopped struct {
		Stopped bool `json:"stopped"`
	}
	p.next(t, &stopped, 30*time.Second)
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("the cluster exited with %v, want status 0", err)
	}
	checkGone(t, []int{ready.Members[0].PID, restart.PID, ready.Members[2].PID})
}
