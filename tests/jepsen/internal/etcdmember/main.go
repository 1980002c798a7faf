// Command etcdmember runs one member of an etcd cluster (the embedded
// etcd server of etcddev) as its own process, for the fault
// campaign of package jepsen:
//
//	etcdmember -name e1 -data DIR -client 127.0.0.1:23791 -peer 127.0.0.1:23801 \
//		-cluster e1=http://127.0.0.1:23801,e2=http://127.0.0.1:23802,e3=http://127.0.0.1:23803
//
// Start every member of a new cluster at once: a member serves clients
// only once a quorum of the cluster is up. Started again on its data
// directory, a member rejoins its cluster. It prints {"ready":true} on
// stdout once it serves clients, logs etcd's warnings and errors to
// stderr, and runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/convoy-gcs/convoy/etcddev"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "etcdmember: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	name := flag.String("name", "", "this member's name")
	data := flag.String("data", "", "data `directory`")
	client := flag.String("client", "", "client `address` (host:port)")
	peer := flag.String("peer", "", "peer `address` (host:port)")
	cluster := flag.String("cluster", "", "every member's peer URL: `name=URL,...`")
	flag.Parse()
	if *name == "" || *data == "" || *client == "" || *peer == "" || *cluster == "" {
		flag.Usage()
		return fmt.Errorf("-name, -data, -client, -peer and -cluster are required")
	}
	members := make(map[string]string)
	for _, m := range strings.Split(*cluster, ",") {
		n, u, ok := strings.Cut(m, "=")
		if !ok {
			return fmt.Errorf("-cluster: %q is not name=URL", m)
		}
		members[n] = u
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := etcddev.Start(ctx, etcddev.Config{
		Name: *name, Dir: *data, ClientAddr: *client, PeerAddr: *peer, Cluster: members,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	fmt.Printf("{\"ready\":true,\"pid\":%d}\n", os.Getpid())
	<-ctx.Done()
	return srv.Close()
}
