package main

import (
	"context"
	"net"
	"sync"

	"go.opentelemetry.io/otel/metric"
)

// limitListener accepts at most cap(slots) connections open at once, and
// closes the connections it accepts beyond that at once: a client then
// sees its connection closed and tries again later, elsewhere. Leaving
// them to wait in the kernel's queue instead would have the node read
// their requests seconds later, after their clients gave up and sent
// them again to another member: a write could then be applied twice, the
// second time after the later writes of the same key.
type limitListener struct {
	net.Listener
	slots   chan struct{}
	refused metric.Int64Counter
}

// limitConns returns ln accepting at most max connections open at once;
// refused counts those it closes.
func limitConns(ln net.Listener, max int, refused metric.Int64Counter) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), refused: refused}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, slots: l.slots}, nil
		default:
			// Counted before the close, which the refused client sees.
			l.refused.Add(context.Background(), 1)
			c.Close()
		}
	}
}

// limitConn holds a place of its listener's until it is closed (hijacked
// connections too: the stream that takes one over closes it).
type limitConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
