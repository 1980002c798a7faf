package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/convoy-gcs/convoy"
)

// convoyOpenTimeout bounds opening the group: every member waits for the
// others' connections.
const convoyOpenTimeout = 30 * time.Second

// runConvoyReplica runs one member of a three-member Convoy group with
// fixed membership (the raw library, no etcd) in atomic mode, durable
// when a.durable. Its state is an in-memory map that every member updates
// from the deliveries. It serves the bench protocol (kvproto.go): a write
// is multicast to the group and acknowledged once this member delivered
// it — with durable delivery, once every member has it on disk.
func runConvoyReplica(ctx context.Context, a replicaArgs, ready func() error, log *slog.Logger) error {
	l, err := net.Listen("tcp", a.client)
	if err != nil {
		return err
	}
	defer l.Close()

	var members []convoy.Member
	for i, addr := range a.peers {
		members = append(members, convoy.Member{ID: convoy.NodeID(i + 1), Addr: addr})
	}
	cfg := convoy.Config{
		Self:    convoy.NodeID(a.id),
		Members: members,
		Mode:    convoy.Atomic,
		Logger:  log,
	}
	if a.durable {
		cfg.Durable = &convoy.DurableConfig{Dir: a.dir}
	}
	// Written only by the handler, which the group calls on one
	// goroutine.
	state := make(map[string][]byte)
	openCtx, cancelOpen := context.WithTimeout(ctx, convoyOpenTimeout)
	defer cancelOpen()
	g, err := convoy.Open(openCtx, cfg, func(d convoy.Delivery) {
		key, value, err := decodeWrite(d.Payload)
		if err != nil {
			log.Error("undecodable delivery", "index", d.Index, "err", err)
			return
		}
		state[string(key)] = value
	})
	if err != nil {
		return fmt.Errorf("open member %d: %w", a.id, err)
	}
	defer g.Close()
	if err := ready(); err != nil {
		return err
	}
	return serveKV(ctx, l, func(ctx context.Context, key, value []byte) error {
		_, err := g.Send(ctx, encodeWrite(key, value), convoy.WaitDelivered())
		return err
	}, log)
}

// encodeWrite makes a write's message: u16 key length | key | value.
func encodeWrite(key, value []byte) []byte {
	b := make([]byte, 2+len(key)+len(value))
	binary.BigEndian.PutUint16(b, uint16(len(key)))
	copy(b[2:], key)
	copy(b[2+len(key):], value)
	return b
}

func decodeWrite(b []byte) (key, value []byte, err error) {
	if len(b) < 2 {
		return nil, nil, errors.New("short write message")
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, errors.New("short write message")
	}
	return b[2 : 2+n], b[2+n:], nil
}

// kvClients is a client of the bench protocol: conns connections spread
// over the replicas in turn, each shared by many callers.
type kvClients struct {
	conns []*kvConn
}

func dialKVClients(ctx context.Context, addrs []string, conns int) (*kvClients, error) {
	k := &kvClients{}
	for i := range conns {
		c, err := dialKV(ctx, addrs[i%len(addrs)])
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
