package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/freeport"
)

// TestNodeEtcdLogin runs "convoy node" against an etcd with
// authentication on: logged in with the password from
// CONVOY_ETCD_PASSWORD it serves, and "convoy status" logged in with
// -etcd-password-file finds it; with a wrong password in
// -etcd-password-file it exits with status 1 and etcd's reason.
func TestNodeEtcdLogin(t *testing.T) {
	dir := t.TempDir()
	srv, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.EnableAuth(t.Context(), "secret"); err != nil {
		t.Fatal(err)
	}
	passwordFile := func(name, password string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + hostPort("127.0.0.1", ports[0])
	etcd := strings.Join(srv.Endpoints(), ",")
	node := func(id string, extra ...string) []string {
		return append([]string{"node", "-id", id, "-app", "kv", "-etcd", etcd, "-prefix", "/login/",
			"-data", filepath.Join(dir, "data"+id), "-etcd-username", etcddev.RootUser}, extra...)
	}

	t.Setenv("CONVOY_ETCD_PASSWORD", "secret")
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stdout, stderr safeBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, node("1", "-http", hostPort("127.0.0.1", ports[0])), &cli{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr})
	}()
	defer func() {
		if t.Failed() {
			t.Logf("node stderr:\n%s", stderr.String())
		}
	}()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := waitStatus(wctx, apiClient{hc: hc}, nil, url, func(s memberStatus) bool { return s.Serving }); err != nil {
		t.Fatalf("%s: %v", url, err)
	}

	code, out, errOut := runCommand(t, &cli{}, "status", "-etcd", etcd, "-prefix", "/login/", "-json",
		"-etcd-username", etcddev.RootUser, "-etcd-password-file", passwordFile("right", "secret"))
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 1 || r.Members[0].HTTP != url {
		t.Errorf("status %+v: want member 1 at %s", r, url)
	}
	code, _, errOut = runCommand(t, &cli{}, "status", "-etcd", etcd, "-prefix", "/login/")
	if code != 1 || !strings.Contains(errOut, "user name is empty") {
		t.Errorf("status without a login: %d %q, want 1 and etcd's refusal", code, errOut)
	}

	t.Setenv("CONVOY_ETCD_PASSWORD", "")
	code, _, errOut = runCommand(t, &cli{}, node("2", "-etcd-password-file", passwordFile("wrong", "wrong"))...)
	if code != 1 || !strings.Contains(errOut, "authentication failed") {
		t.Errorf("node with a wrong password: %d %q, want 1 and etcd's refusal", code, errOut)
	}

	stop()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("node exited with %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("node did not close")
	}
}

// TestNodeEtcdPasswordFile checks that the password is the file's first
// line, without its line ending, and that a file without one is refused.
func TestNodeEtcdPasswordFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content, want string
	}{
		{"secret", "secret"},
		{"secret\n", "secret"},
		{"secret\r\nignored\n", "secret"},
		{"with spaces \n", "with spaces "},
		{"", ""},
		{"\nsecret\n", ""},
	} {
		path := filepath.Join(dir, "password")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		user, got, err := nodeSettings{EtcdUsername: "u", EtcdPasswordFile: path}.etcdLogin()
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: password %q, want an error", tc.content, got)
		case tc.want != "" && (err != nil || got != tc.want || user != "u"):
			t.Errorf("%q: %q, %q, %v; want u, %q", tc.content, user, got, err, tc.want)
		}
	}
	if _, _, err := (nodeSettings{EtcdUsername: "u", EtcdPasswordFile: filepath.Join(dir, "missing")}).etcdLogin(); err == nil {
		t.Error("a missing file accepted")
	}
	if user, password, err := (nodeSettings{EtcdUsername: "u", EtcdPassword: "p"}).etcdLogin(); user != "u" || password != "p" || err != nil {
		t.Errorf("password setting: %q, %q, %v", user, password, err)
	}
}
