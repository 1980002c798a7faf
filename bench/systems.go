package main

import (
	"context"
	"fmt"
	"strings"
)

// system is one system under test in one configuration: three replica
// processes of kind (unless replicas says otherwise), with or without
// fsync before the acknowledgement.
type system struct {
	name string // as in -systems and in the tables
	kind string // the replica process's -kind
	// replicas is the number of replica processes, if not 3.
	replicas int
	// views says the replicas keep their group's views in an etcd of the
	// cluster's own, which startCluster runs as one more process.
	views bool
	// engine and service say which workloads measure the system:
	// engine, those of the replication engines (a to d: the bench's
	// writes, through the bench protocol or the system's own client);
	// service, workload e (a key-value service as users run it, through
	// its own client). etcd is both.
	engine, service bool
	// binary names the replica program: "" for this program, or the
	// module in the bench module's directory that replicaPrograms builds
	// it from.
	binary  string
	durable bool
	// reference names the Convoy configuration the system's results are
	// compared with, unless the workload names one (workload.reference):
	// the one with the same durability.
	reference string
	dial      func(ctx context.Context, addrs []string, conns int) (client, error)
}

// client writes to a running cluster. Callers are numbered: those with
// the same number share a connection.
type client interface {
	Put(ctx context.Context, caller int, key, value []byte) error
	Close() error
}

func dialConvoy(ctx context.Context, addrs []string, conns int) (client, error) {
	return dialKVClients(ctx, addrs, conns)
}

func dialEtcd(ctx context.Context, addrs []string, conns int) (client, error) {
	return dialEtcdClients(ctx, addrs, conns)
}

// allSystems lists every system, in the order they alternate in.
func allSystems() []system {
	return []system{
		{name: "convoy", kind: "convoy", engine: true, durable: true, reference: "convoy", dial: dialConvoy},
		{name: "convoy-kv", kind: "kv", views: true, service: true, durable: true, reference: "convoy-kv", dial: dialKVStreams},
		{name: "convoy-kv-http", kind: "kv", views: true, service: true, durable: true, reference: "convoy-kv", dial: dialKVHTTP},
		{name: "etcd", kind: "etcd", engine: true, service: true, durable: true, reference: "convoy", dial: dialEtcd},
		{name: "raft", kind: "raft", engine: true, durable: true, reference: "convoy", dial: dialConvoy},
		{name: "dragonboat", kind: "dragonboat", binary: "dragonboat", engine: true, durable: true, reference: "convoy", dial: dialConvoy},
		{name: "kv-local", kind: "kv-local", replicas: 1, service: true, durable: false, reference: "convoy-kv", dial: dialKVStreams},
		{name: "kv-local-http", kind: "kv-local", replicas: 1, service: true, durable: false, reference: "convoy-kv", dial: dialKVHTTP},
		{name: "convoy-log", kind: "log", views: true, service: true, durable: true, reference: "convoy-kv", dial: dialLogHTTP},
		{name: "convoy-nosync", kind: "convoy", engine: true, durable: false, reference: "convoy-nosync", dial: dialConvoy},
		{name: "etcd-nosync", kind: "etcd", engine: true, durable: false, reference: "convoy-nosync", dial: dialEtcd},
		{name: "raft-nosync", kind: "raft", engine: true, durable: false, reference: "convoy-nosync", dial: dialConvoy},
		{name: "dragonboat-nosync", kind: "dragonboat", binary: "dragonboat", engine: true, durable: false, reference: "convoy-nosync", dial: dialConvoy},
	}
}

// replicaCount returns the number of replica processes of s.
func (s system) replicaCount() int {
	if s.replicas == 0 {
		return 3
	}
	return s.replicas
}

// systemNames returns the names of systems, comma-separated.
func systemNames(systems []system) string {
	var names []string
	for _, s := range systems {
		names = append(names, s.name)
	}
	return strings.Join(names, ",")
}

// parseSystems returns the systems a comma-separated list names, in the
// order of allSystems.
func parseSystems(list string) ([]system, error) {
	want := make(map[string]bool)
	for _, name := range strings.Split(list, ",") {
		want[strings.TrimSpace(name)] = true
	}
	var out []system
	for _, s := range allSystems() {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for name := range want {
		return nil, fmt.Errorf("-systems: unknown system %q", name)
	}
	return out, nil
}
