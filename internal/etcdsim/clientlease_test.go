package etcdsim

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestClientLease(t *testing.T) {
	closed := func(l *ClientLease) bool {
		select {
		case <-l.Done():
			return true
		default:
			return false
		}
	}
	for _, tc := range []struct {
		name string
		run  func(s *Server, l *ClientLease) error // the last call's error
		want error                                 // the lease's Err after, wrapping it
		err  error                                 // of the last call
	}{
		{"renewed", func(s *Server, l *ClientLease) error {
			s.Advance(4 * sec)
			if err := l.KeepAlive(); err != nil {
				return err
			}
			s.Advance(8 * sec)
			return l.KeepAlive()
		}, nil, nil},
		{"expired on the server", func(s *Server, l *ClientLease) error {
			s.Advance(5 * sec)
			return l.KeepAlive()
		}, rpctypes.ErrLeaseNotFound, rpctypes.ErrLeaseNotFound},
		{"revoked by another", func(s *Server, l *ClientLease) error {
			if err := s.Revoke(l.ID()); err != nil {
				return err
			}
			return l.KeepAlive()
		}, rpctypes.ErrLeaseNotFound, rpctypes.ErrLeaseNotFound},
		{"server down for less than a TTL", func(s *Server, l *ClientLease) error {
			s.Down()
			s.Advance(5*sec - 1)
			return l.KeepAlive()
		}, nil, ErrUnavailable},
		{"server down for a TTL", func(s *Server, l *ClientLease) error {
			s.Down()
			s.Advance(5 * sec)
			return l.KeepAlive()
		}, ErrUnavailable, ErrUnavailable},
		{"given up by the simulation", func(s *Server, l *ClientLease) error {
			l.Lose(context.DeadlineExceeded)
			return nil
		}, context.DeadlineExceeded, nil},
		{"revoked", func(s *Server, l *ClientLease) error {
			return l.Revoke(context.Background())
		}, ErrLeaseRevoked, nil},
		{"revoked while down", func(s *Server, l *ClientLease) error {
			s.Down()
			return l.Revoke(context.Background())
		}, ErrLeaseRevoked, ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{})
			l, err := s.GrantClientLease(5)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.run(s, l); !errors.Is(err, tc.err) {
				t.Errorf("last call: %v, want %v", err, tc.err)
			}
			if got := l.Err(); !errors.Is(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("Err = %v, want %v", got, tc.want)
			}
			if closed(l) != (tc.want != nil) {
				t.Errorf("Done closed = %v, want %v", closed(l), tc.want != nil)
			}
			if tc.want != nil {
				if err := l.KeepAlive(); !errors.Is(err, tc.want) {
					t.Errorf("KeepAlive after losing the lease: %v", err)
				}
			}
		})
	}
	// A lease given up by its client may live on in etcd: after an outage,
	// etcd extends it.
	s := New(Config{})
	kv := clientv3.NewKVFromKVClient(s, nil)
	l, _ := s.GrantClientLease(5)
	mustPut(t, kv, "k", "v", clientv3.WithLease(l.ID()))
	s.Down()
	s.Advance(10 * sec)
	l.KeepAlive()
	s.Up()
	if !closed(l) || all(t, kv) != "k=v@2/2/1+1" {
		t.Fatalf("after the outage: lease given up %v, store %q", closed(l), all(t, kv))
	}
	s.Advance(16 * sec) // 5 s TTL + 1 s election timeout from 10 s
	if got := all(t, kv); got != "" {
		t.Errorf("after the extended deadline: %q", got)
	}
}
