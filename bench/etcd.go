package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// etcdStartTimeout bounds how long a member waits for the cluster to
// serve: it needs a quorum of the three.
const etcdStartTimeout = time.Minute

// etcdQuota is the backend's space quota: well above the default 2 GiB,
// as the benchmark's writes are never compacted away while it runs.
const etcdQuota = 8 << 30

// runEtcdReplica runs one member of a three-member etcd cluster, embedded
// in this process, until ctx ends. Its client URL is a.Client; with
// a.Durable false it runs with etcd's --unsafe-no-fsync.
func runEtcdReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	cfg := embed.NewConfig()
	cfg.Name = fmt.Sprintf("m%d", a.ID)
	cfg.Dir = a.Dir
	clientURL := url.URL{Scheme: "http", Host: a.Client}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	var cluster []string
	for i, p := range a.Peers {
		u := url.URL{Scheme: "http", Host: p}
		if i+1 == a.ID {
			cfg.ListenPeerUrls = []url.URL{u}
			cfg.AdvertisePeerUrls = []url.URL{u}
		}
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, u.String()))
	}
	cfg.InitialCluster = strings.Join(cluster, ",")
	cfg.InitialClusterToken = "bench"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.UnsafeNoFsync = !a.Durable
	cfg.QuotaBackendBytes = etcdQuota
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd member %d: %w", a.ID, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd member %d: %w", a.ID, err)
	case <-time.After(etcdStartTimeout):
		return fmt.Errorf("etcd member %d: not serving after %v", a.ID, etcdStartTimeout)
	case <-ctx.Done():
		return nil
	}
	if err := ready(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %d: %w", a.ID, err)
	}
}

// etcdClients is conns clientv3 clients, each with every member as an
// endpoint, shared by many callers.
type etcdClients struct {
	clients []*clientv3.Client
}

func dialEtcdClients(ctx context.Context, addrs []string, conns int) (*etcdClients, error) {
	var endpoints []string
	for _, a := range addrs {
		endpoints = append(endpoints, "http://"+a)
	}
	k := &etcdClients{}
	for range conns {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   endpoints,
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
			Context:     ctx,
		})
		if err != nil {
			return nil, errors.Join(err, k.Close())
		}
		k.clients = append(k.clients, c)
	}
	return k, nil
}

// Put writes through the client of caller (any number: callers with the
// same number share a client).
func (k *etcdClients) Put(ctx context.Context, caller int, key, value []byte) error {
	_, err := k.clients[caller%len(k.clients)].Put(ctx, string(key), string(value))
	return err
}

func (k *etcdClients) Close() error {
	var errs []error
	for _, c := range k.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
