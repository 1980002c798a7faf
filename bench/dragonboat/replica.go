package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// shardID is the one Raft group the replicas form.
const shardID = 1

// Timing of the shard. A tick is rttMillisecond; heartbeats every
// heartbeatRTT ticks and an election timeout of electionRTT ticks are
// etcd's defaults (100 ms and 1 s), which the etcd replicas run with.
const (
	rttMillisecond = 10
	heartbeatRTT   = 10
	electionRTT    = 100
)

// leaderTimeout bounds how long a replica waits for the shard to elect a
// leader.
const leaderTimeout = 30 * time.Second

// proposeTimeout bounds one write. dragonboat needs a bound (a proposal
// that a follower forwards may be dropped, and is then never answered);
// this one is well above the clients' (the bench's -timeout, 10 s by
// default), so that such a write counts as a timeout on the client's side
// rather than as a failure.
const proposeTimeout = 2 * time.Minute

// runReplica runs one member of the shard until ctx ends: a NodeHost with
// its default LogDB (sharded Pebble, which syncs every write before Raft
// acknowledges it) on a.Dir, without fsync unless a.Durable (newNoSyncFS),
// and the bench protocol on a.Client. Any replica proposes a write
// (dragonboat forwards a follower's proposals to the leader) and answers
// once the write is committed and applied to its own state machine.
func runReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	l, err := net.Listen("tcp", a.Client)
	if err != nil {
		return err
	}
	defer l.Close()

	nhc := config.NodeHostConfig{
		NodeHostDir:    filepath.Join(a.Dir, "nodehost"),
		WALDir:         filepath.Join(a.Dir, "wal"),
		RTTMillisecond: rttMillisecond,
		RaftAddress:    a.Peers[a.ID-1],
	}
	// The default LogDB may take up to 8 GB a NodeHost; three of them on
	// one machine would make the run about memory. The small one (up to
	// 1 GB) keeps up to four write buffers of 16 MiB each (Convoy's log
	// keeps memtables of 64 MiB).
	nhc.Expert.LogDB = config.GetSmallMemLogDBConfig()
	if !a.Durable {
		nhc.Expert.FS = newNoSyncFS()
	}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return fmt.Errorf("node host %d: %w", a.ID, err)
	}
	if nh == nil {
		// NewNodeHost returns neither when it recovers from a panic
		// whose value is not an error.
		return fmt.Errorf("node host %d: not created (see the log above)", a.ID)
	}
	defer nh.Close()
	members := make(map[uint64]dragonboat.Target)
	for i, p := range a.Peers {
		members[uint64(i+1)] = p
	}
	rc := config.Config{
		ReplicaID:    uint64(a.ID),
		ShardID:      shardID,
		ElectionRTT:  electionRTT,
		HeartbeatRTT: heartbeatRTT,
		CheckQuorum:  true,
	}
	newSM := func(uint64, uint64) sm.IStateMachine { return &mapSM{state: make(map[string][]byte)} }
	if err := nh.StartReplica(members, false, newSM, rc); err != nil {
		return fmt.Errorf("start replica %d: %w", a.ID, err)
	}
	if err := waitLeader(ctx, nh); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := ready(); err != nil {
		return err
	}
	// A no-op session is never updated, so the calls can share it.
	session := nh.GetNoOPSession(shardID)
	return replica.Serve(ctx, l, func(ctx context.Context, key, value []byte) error {
		ctx, cancel := context.WithTimeout(ctx, proposeTimeout)
		defer cancel()
		res, err := nh.SyncPropose(ctx, session, replica.EncodeWrite(key, value))
		if err == nil && res.Value != 0 {
			err = errors.New(string(res.Data))
		}
		return err
	}, log)
}

// waitLeader returns once the shard has a leader, ctx ended (nil), or
// leaderTimeout passed.
func waitLeader(ctx context.Context, nh *dragonboat.NodeHost) error {
	deadline := time.Now().Add(leaderTimeout)
	for {
		if _, _, ok, err := nh.GetLeaderID(shardID); err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no leader after %v", leaderTimeout)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// mapSM is the in-memory map as a dragonboat state machine. dragonboat
// guards it with a read-write lock: Update, RecoverFromSnapshot and Close
// hold it for writing, Lookup and SaveSnapshot for reading.
type mapSM struct {
	state map[string][]byte
}

// Update applies a write. A malformed one changes nothing, on every
// replica alike, and its Result says why (Value 1): an error here would
// halt the replica.
func (m *mapSM) Update(e sm.Entry) (sm.Result, error) {
	key, value, err := replica.DecodeWrite(e.Cmd)
	if err != nil {
		return sm.Result{Value: 1, Data: []byte(err.Error())}, nil
	}
	m.state[string(key)] = append([]byte(nil), value...)
	return sm.Result{}, nil
}

// Lookup returns the value of a key, given as a string.
func (m *mapSM) Lookup(q any) (any, error) {
	key, ok := q.(string)
	if !ok {
		return nil, fmt.Errorf("lookup: a %T, want a string key", q)
	}
	return m.state[key], nil
}

// SaveSnapshot writes the map as JSON. The shard takes no snapshots of
// its own (its config.Config leaves SnapshotEntries 0).
func (m *mapSM) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return json.NewEncoder(w).Encode(m.state)
}

func (m *mapSM) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	state := make(map[string][]byte)
	if err := json.NewDecoder(r).Decode(&state); err != nil {
		return err
	}
	m.state = state
	return nil
}

func (m *mapSM) Close() error { return nil }
