package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// raftLeaderTimeout bounds how long a replica waits for the cluster to
// elect a leader.
const raftLeaderTimeout = 30 * time.Second

// runRaftReplica runs one member of a three-member hashicorp/raft cluster
// (TCP transport, raft-boltdb for the log, without fsync unless
// a.Durable) whose state machine is an in-memory map. It serves the bench
// protocol (package replica): the leader applies a write and answers once it
// is committed and applied; a follower forwards the write to the leader's
// client address and relays the answer.
func runRaftReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	if err := os.MkdirAll(a.Dir, 0o700); err != nil {
		return err
	}
	l, err := net.Listen("tcp", a.Client)
	if err != nil {
		return err
	}
	defer l.Close()

	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(a.Dir, "raft.db"), NoSync: !a.Durable})
	if err != nil {
		return err
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStore(a.Dir, 1, io.Discard)
	if err != nil {
		return err
	}
	self := a.Peers[a.ID-1]
	addr, err := net.ResolveTCPAddr("tcp", self)
	if err != nil {
		return err
	}
	trans, err := raft.NewTCPTransport(self, addr, 3, 10*time.Second, io.Discard)
	if err != nil {
		return err
	}
	defer trans.Close()

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(strconv.Itoa(a.ID))
	conf.LogOutput = os.Stderr
	conf.LogLevel = "ERROR"
	var servers []raft.Server
	for i, p := range a.Peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(strconv.Itoa(i + 1)), Address: raft.ServerAddress(p)})
	}
	// Every member bootstraps with the same configuration, which raft
	// allows.
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	r, err := raft.NewRaft(conf, &mapFSM{state: make(map[string][]byte)}, store, store, snaps, trans)
	if err != nil {
		return err
	}
	// Shutdown only starts the shutdown: wait for raft's goroutines to
	// end before the deferred closes above take the log store (an mmap)
	// and the transport from under them.
	defer func() { _ = r.Shutdown().Error() }()

	deadline := time.Now().Add(raftLeaderTimeout)
	for {
		if _, id := r.LeaderWithID(); id != "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no leader after %v", raftLeaderTimeout)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := ready(); err != nil {
		return err
	}
	fwd := &forwarder{clients: a.Clients, conns: make(map[int]*replica.Conn)}
	defer fwd.close()
	return replica.Serve(ctx, l, func(ctx context.Context, key, value []byte) error {
		if r.State() == raft.Leader {
			f := r.Apply(replica.EncodeWrite(key, value), 0)
			return f.Error()
		}
		_, id := r.LeaderWithID()
		leader, err := strconv.Atoi(string(id))
		if err != nil || leader < 1 || leader > len(a.Clients) || leader == a.ID {
			return errors.New("no leader known")
		}
		return fwd.put(ctx, leader, key, value)
	}, log)
}

// forwarder holds connections to the other replicas' client addresses.
type forwarder struct {
	clients []string // by replica id - 1

	mu    sync.Mutex
	conns map[int]*replica.Conn // by replica id
}

func (f *forwarder) put(ctx context.Context, id int, key, value []byte) error {
	f.mu.Lock()
	c := f.conns[id]
	if c == nil {
		var err error
		if c, err = replica.Dial(ctx, f.clients[id-1]); err != nil {
			f.mu.Unlock()
			return err
		}
		f.conns[id] = c
	}
	f.mu.Unlock()
	err := c.Put(ctx, key, value)
	if errors.Is(err, replica.ErrConnClosed) {
		f.mu.Lock()
		if f.conns[id] == c {
			delete(f.conns, id)
		}
		f.mu.Unlock()
	}
	return err
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// mapFSM is the in-memory map as a raft state machine. Raft calls Apply,
// Snapshot and Restore one at a time; a snapshot's Persist may run
// concurrently with Apply, so Snapshot copies the map.
type mapFSM struct {
	state map[string][]byte
}

func (m *mapFSM) Apply(l *raft.Log) any {
	key, value, err := replica.DecodeWrite(l.Data)
	if err != nil {
		return err
	}
	m.state[string(key)] = value
	return nil
}

func (m *mapFSM) Snapshot() (raft.FSMSnapshot, error) {
	copied := make(map[string][]byte, len(m.state))
	for k, v := range m.state {
		copied[k] = v
	}
	return mapSnapshot(copied), nil
}

func (m *mapFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	state := make(map[string][]byte)
	if err := json.NewDecoder(rc).Decode(&state); err != nil {
		return err
	}
	m.state = state
	return nil
}

type mapSnapshot map[string][]byte

func (s mapSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(map[string][]byte(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (mapSnapshot) Release() {}
