package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/logger"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/lni/vfs"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

func TestMain(m *testing.M) {
	logger.SetLoggerFactory(slogFactory(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))))
	os.Exit(m.Run())
}

// TestShard runs a shard of three replicas in this process, without
// fsync, and writes through each of them.
func TestShard(t *testing.T) {
	const n = 3
	ports := freePorts(t, 2*n)
	var peers, clients []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[i]))
		clients = append(clients, fmt.Sprintf("127.0.0.1:%d", ports[n+i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir := t.TempDir()
	ready := make(chan int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		a := replica.Args{
			Kind: "dragonboat", ID: i + 1, Dir: filepath.Join(dir, fmt.Sprint(i+1)),
			Peers: peers, Clients: clients, Client: clients[i],
		}
		wg.Go(func() {
			errs[i] = runReplica(runCtx, a, func() error { ready <- a.ID; return nil }, log)
		})
	}
	for range n {
		select {
		case <-ready:
		case <-ctx.Done():
			t.Fatal("the replicas did not all get ready")
		}
	}

	for i, addr := range clients {
		c, err := replica.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		var puts sync.WaitGroup
		for j := range 20 {
			puts.Go(func() {
				callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := c.Put(callCtx, fmt.Appendf(nil, "k%d", j), []byte("v")); err != nil {
					t.Errorf("write %d through replica %d: %v", j, i+1, err)
				}
			})
		}
		puts.Wait()
		c.Close()
	}

	stop()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i+1, err)
		}
	}
}

func TestNoSyncFS(t *testing.T) {
	f, err := noSyncFS{vfs.Default}.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.(noSyncFile); !ok {
		t.Errorf("Create returned a %T, want a noSyncFile", f)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("Sync: %v", err)
	}
}

func TestMapSM(t *testing.T) {
	m := &mapSM{state: make(map[string][]byte)}
	cmd := replica.EncodeWrite([]byte("k"), []byte("v1"))
	if res, err := m.Update(smEntry(cmd)); err != nil || res.Value != 0 {
		t.Fatalf("Update: %+v, %v", res, err)
	}
	cmd[len(cmd)-1] = '2' // the state machine must not keep the command
	if v, err := m.Lookup("k"); err != nil || string(v.([]byte)) != "v1" {
		t.Errorf("Lookup(k) = %q, %v; want v1", v, err)
	}
	if res, _ := m.Update(smEntry([]byte{0})); res.Value != 1 {
		t.Errorf("a malformed write: %+v, want Value 1", res)
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func smEntry(cmd []byte) sm.Entry { return sm.Entry{Index: 1, Cmd: cmd} }
