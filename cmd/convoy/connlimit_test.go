package main

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestLimitConns: beyond its limit, the listener closes the connections
// it accepts at once, and counts them; a connection closed gives its
// place back, once however often it is closed.
func TestLimitConns(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	refused, err := mp.Meter("test").Int64Counter("refused")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitConns(raw, 1, refused)
	defer ln.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedByPeer reports whether the listener closed c (a read ends
	// with EOF, or a reset) rather than leaving it open (the read times
	// out).
	closedByPeer := func(c net.Conn) bool {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return errors.Is(err, io.EOF) || err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}

	first := dial()
	held := <-accepted
	second := dial()
	if !closedByPeer(second) {
		t.Fatal("a connection beyond the limit stays open")
	}
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if got := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[int64]).DataPoints[0].Value; got != 1 {
		t.Errorf("%d refused, want 1", got)
	}
	held.Close()
	held.Close()
	third := dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no place after the first connection closed")
	}
	first.Close()
	third.Close()
}
