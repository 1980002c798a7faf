package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// benchmark is one "convoy bench" subcommand.
type benchmark struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, c *cli) error
	// hidden benchmarks are helpers the others start; usage omits them.
	hidden bool
}

// benchmarks lists the "convoy bench" subcommands; add new ones here.
func benchmarks() []benchmark {
	return []benchmark{
		{name: "multicast", summary: "multicast one large message to a group and compare with unicast", run: runBenchMulticast},
		{name: "order", summary: "throughput and latency of a delivery mode against unordered delivery", run: runBenchOrder},
		{name: "pubsub", summary: "bytes per published byte, throughput and latency of topics against the whole group", run: runBenchPubSub},
		{name: "viewchange", summary: "time for a loaded group to go on without a member killed with SIGKILL", run: runBenchViewChange},
		{name: "psnode", summary: "a member process of the pubsub benchmark with -netns", run: runBenchPSNode, hidden: true},
		{name: "vcnode", summary: "a member process of the viewchange benchmark", run: runBenchVCNode, hidden: true},
		{name: "join", summary: "state transfer into a joiner from several donors in parallel against one", run: runBenchJoin},
		{name: "joinnode", summary: "a member process of the join benchmark", run: runBenchJoinNode, hidden: true},
		{name: "joinetcd", summary: "the etcd process of the join benchmark", run: runBenchJoinEtcd, hidden: true},
		{name: "snapshot", summary: "memory of snapshots, a state transfer and a restart against the state's size", run: runBenchSnapshot},
		{name: "snapnode", summary: "a member process of the snapshot benchmark", run: runBenchSnapNode, hidden: true},
		{name: "node", summary: "a benchmark node driven over stdin and stdout", run: runBenchNode, hidden: true},
	}
}

func benchUsage() string {
	var b strings.Builder
	b.WriteString("Usage:\n  convoy bench <benchmark> [flags]\n\nBenchmarks:\n")
	for _, bm := range benchmarks() {
		if !bm.hidden {
			fmt.Fprintf(&b, "  %-10s  %s\n", bm.name, bm.summary)
		}
	}
	b.WriteString("\nRun \"convoy bench <benchmark> -h\" for its flags.\n")
	return b.String()
}

// runBench dispatches "convoy bench <benchmark> ...".
func runBench(ctx context.Context, args []string, c *cli) error {
	if len(args) == 0 || slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]) {
		fmt.Fprint(c.stderr, benchUsage())
		if len(args) == 0 {
			return usagef("bench: no benchmark given")
		}
		return nil
	}
	for _, bm := range benchmarks() {
		if bm.name == args[0] {
			return bm.run(ctx, args[1:], c)
		}
	}
	fmt.Fprint(c.stderr, benchUsage())
	return usagef("bench: unknown benchmark %q", args[0])
}
