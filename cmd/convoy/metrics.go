package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// opsServer is a member's operator endpoints: the group's metrics in the
// Prometheus text format on /metrics (the library's otel instruments,
// through the otel Prometheus exporter) and the Go profiler on
// /debug/pprof/.
type opsServer struct {
	mp   *sdkmetric.MeterProvider
	srv  *http.Server
	addr net.Addr
	done chan error
}

// startOps listens on addr and serves the operator endpoints.
func startOps(addr string, log *slog.Logger) (*opsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		mp.Shutdown(context.Background())
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	o := &opsServer{
		mp:   mp,
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)},
		addr: ln.Addr(),
		done: make(chan error, 1),
	}
	go func() { o.done <- o.srv.Serve(ln) }()
	log.Info("serving metrics and profiles", "addr", o.addr.String())
	return o, nil
}

// close stops the server and the meter provider.
func (o *opsServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), nodeShutdownTimeout)
	defer cancel()
	err := o.srv.Shutdown(ctx)
	if serr := <-o.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, o.mp.Shutdown(ctx))
}
