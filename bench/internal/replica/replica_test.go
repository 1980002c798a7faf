package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestArgsRoundTrip(t *testing.T) {
	for _, a := range []Args{
		{Kind: "raft", ID: 2, Dir: "/d/2", Peers: []string{"a:1", "b:1", "c:1"}, Clients: []string{"a:2", "b:2", "c:2"}, Durable: true},
		{Kind: "kv", ID: 1, Dir: "/d/1", Peers: []string{"a:1"}, Clients: []string{"a:2"}, Etcd: "http://e:3", CPUProfile: "/p/kv-1.pprof"},
	} {
		argv := a.Argv()
		if argv[0] != Command {
			t.Fatalf("argv %q does not start with %q", argv, Command)
		}
		got, err := ParseArgs(argv[1:])
		if err != nil {
			t.Fatalf("ParseArgs(%q): %v", argv[1:], err)
		}
		a.Client = a.Clients[a.ID-1]
		if !reflect.DeepEqual(got, a) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, a)
		}
	}
	if _, err := ParseArgs([]string{"-id", "4", "-dir", "d", "-peers", "a,b,c", "-clients", "x,y,z"}); err == nil {
		t.Error("an id beyond the peers parsed")
	}
}

// TestRunCPUProfile checks that Run writes the CPU profile -cpuprofile
// names, once the replica stops.
func TestRunCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.pprof")
	a := Args{Kind: "kv", ID: 1, Dir: t.TempDir(), Peers: []string{"a:1"}, Clients: []string{"a:2"}, CPUProfile: path}
	err := Run(context.Background(), a.Argv()[1:], func(context.Context, Args, func() error) error {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("while the replica runs: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A profile is gzipped protocol buffers.
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("the profile is not gzipped: % x", b[:min(len(b), 8)])
	}
}

func TestIsReady(t *testing.T) {
	for line, want := range map[string]bool{
		`{"ready":true}`:        true,
		`{"ready":true}` + "\n": true,
		`{"ready":false}`:       false,
		`starting`:              false,
	} {
		if got := IsReady([]byte(line)); got != want {
			t.Errorf("IsReady(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestWriteMessage(t *testing.T) {
	key, value, err := DecodeWrite(EncodeWrite([]byte("k1"), []byte("value")))
	if err != nil || string(key) != "k1" || string(value) != "value" {
		t.Errorf("round trip: %q %q %v", key, value, err)
	}
	if _, _, err := DecodeWrite([]byte{0, 9, 'x'}); err == nil {
		t.Error("a key longer than the message decoded")
	}
}

// TestProtocol serves a map over the protocol and writes to it from many
// callers sharing one connection; a write whose key is "fail" fails, one
// whose key is "hold" is never answered.
func TestProtocol(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	state := make(map[string]string)
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, l, func(ctx context.Context, key, value []byte) error {
			switch string(key) {
			case "fail":
				return errors.New("refused")
			case "hold":
				<-ctx.Done()
				return ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			state[string(key)] = string(value)
			return nil
		}, slog.New(slog.DiscardHandler))
	}()

	c, err := Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if err := c.Put(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Errorf("put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	if len(state) != 100 || state["k42"] != "v42" {
		t.Errorf("state after 100 writes: %d keys, k42=%q", len(state), state["k42"])
	}
	mu.Unlock()
	if err := c.Put(ctx, []byte("fail"), nil); err == nil || err.Error() != "refused" {
		t.Errorf("failed write: %v, want refused", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := c.Put(short, []byte("hold"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("held write: %v, want the caller's deadline", err)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := c.Put(context.Background(), []byte("k"), nil); err == nil {
		t.Error("a write after the server stopped succeeded")
	}
	c.Close()
}
