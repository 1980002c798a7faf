package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// convoyOpenTimeout bounds opening the group: every member waits for the
// others' connections.
const convoyOpenTimeout = 30 * time.Second

// runConvoyReplica runs one member of a three-member Convoy group with
// fixed membership (the raw library, no etcd) in atomic mode, durable
// when a.Durable. Its state is an in-memory map that every member updates
// from the deliveries. It serves the bench protocol (package replica): a write
// is multicast to the group and acknowledged once this member delivered
// it — with durable delivery, once every member has it on disk.
func runConvoyReplica(ctx context.Context, a replica.Args, ready func() error, log *slog.Logger) error {
	l, err := net.Listen("tcp", a.Client)
	if err != nil {
		return err
	}
	defer l.Close()

	var members []convoy.Member
	for i, addr := range a.Peers {
		members = append(members, convoy.Member{ID: convoy.NodeID(i + 1), Addr: addr})
	}
	cfg := convoy.Config{
		Self:    convoy.NodeID(a.ID),
		Members: members,
		Mode:    convoy.Atomic,
		Logger:  log,
	}
	if a.Durable {
		cfg.Durable = &convoy.DurableConfig{Dir: a.Dir}
	}
	// Written only by the handler, which the group calls on one
	// goroutine.
	state := make(map[string][]byte)
	openCtx, cancelOpen := context.WithTimeout(ctx, convoyOpenTimeout)
	defer cancelOpen()
	g, err := convoy.Open(openCtx, cfg, func(d convoy.Delivery) {
		key, value, err := replica.DecodeWrite(d.Payload)
		if err != nil {
			log.Error("undecodable delivery", "index", d.Index, "err", err)
			return
		}
		state[string(key)] = value
	})
	if err != nil {
		return fmt.Errorf("open member %d: %w", a.ID, err)
	}
	defer g.Close()
	if err := ready(); err != nil {
		return err
	}
	return replica.Serve(ctx, l, func(ctx context.Context, key, value []byte) error {
		_, err := g.Send(ctx, replica.EncodeWrite(key, value), convoy.WaitDelivered())
		return err
	}, log)
}

// kvClients is a client of the bench protocol: conns connections spread
// over the replicas in turn, each shared by many callers.
type kvClients struct {
	conns []*replica.Conn
}

func dialKVClients(ctx context.Context, addrs []string, conns int) (*kvClients, error) {
	k := &kvClients{}
	for i := range conns {
		c, err := replica.Dial(ctx, addrs[i%len(addrs)])
		if err != nil {
			return nil, errors.Join(err, k.Close())
		}
		k.conns = append(k.conns, c)
	}
	return k, nil
}

// Put writes through the connection of caller (any number: callers with
// the same number share a connection).
func (k *kvClients) Put(ctx context.Context, caller int, key, value []byte) error {
	return k.conns[caller%len(k.conns)].Put(ctx, key, value)
}

func (k *kvClients) Close() error {
	var errs []error
	for _, c := range k.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
