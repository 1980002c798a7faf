package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

// startTracing exports the group's spans (view changes, state transfers,
// snapshots) to the OTLP/HTTP collector at endpoint: its base URL, such
// as http://collector:4318, to which the standard path /v1/traces is
// added, or the full URL of its traces endpoint. It returns the tracer
// provider to give the group, whose Shutdown sends what is left.
func startTracing(ctx context.Context, endpoint string, id uint64) (*sdktrace.TracerProvider, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want a URL such as http://collector:4318", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "convoy"),
		attribute.String("service.instance.id", strconv.FormatUint(id, 10)),
	))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
