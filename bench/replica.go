package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// runReplica runs one replica process of a system this program holds (all
// but those with a replica program of their own, system.binary) until its
// standard input closes or ctx ends. args follow replica.Command.
func runReplica(ctx context.Context, args []string, log *slog.Logger) error {
	return replica.Run(ctx, args, func(ctx context.Context, a replica.Args, ready func() error) error {
		switch a.Kind {
		case "convoy":
			return runConvoyReplica(ctx, a, ready, log)
		case "etcd":
			return runEtcdReplica(ctx, a, ready, log)
		case "raft":
			return runRaftReplica(ctx, a, ready, log)
		case "kv":
			return runKVReplica(ctx, a, ready, log)
		case "kv-local":
			return runKVLocalReplica(ctx, a, ready, log)
		case "log":
			return runLogReplica(ctx, a, ready, log)
		default:
			return fmt.Errorf("-kind %q: want convoy, etcd, raft, kv, kv-local or log", a.Kind)
		}
	})
}
