package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/rdma"
)

// TestConfigDefaults: every default the documentation of Config,
// EtcdConfig and DurableConfig states is applied to a field left zero,
// and a field that is set is kept.
func TestConfigDefaults(t *testing.T) {
	views := func() Config {
		return Config{Self: 1, Addr: "10.0.0.1:7000", Etcd: &EtcdConfig{Endpoints: []string{"127.0.0.1:2379"}}, Durable: &DurableConfig{Dir: "log"}}
	}
	fixed := func() Config {
		return Config{Self: 2, Members: []Member{{ID: 1, Addr: "10.0.0.1:7000"}, {ID: 2, Addr: "10.0.0.2:7000"}}}
	}
	for _, tc := range []struct {
		name string
		base func() Config
		get  func(Config) any
		// def is the documented default; set sets the field to another
		// value, which must be kept.
		def any
		set func(*Config)
	}{
		{"Epoch", fixed, func(c Config) any { return c.Epoch }, uint64(1),
			func(c *Config) { c.Epoch = 9 }},
		{"ListenAddr/Addr", views, func(c Config) any { return c.ListenAddr }, "10.0.0.1:7000",
			func(c *Config) { c.ListenAddr = ":7001" }},
		{"ListenAddr/Members", fixed, func(c Config) any { return c.ListenAddr }, "10.0.0.2:7000",
			func(c *Config) { c.ListenAddr = ":7001" }},
		{"InitialMembers", views, func(c Config) any { return c.InitialMembers }, 1,
			func(c *Config) { c.InitialMembers = 3 }},
		{"HeartbeatInterval", views, func(c Config) any { return c.HeartbeatInterval }, 50 * time.Millisecond,
			func(c *Config) { c.HeartbeatInterval = 10 * time.Millisecond }},
		{"SuspectTimeout", views, func(c Config) any { return c.SuspectTimeout }, 250 * time.Millisecond,
			func(c *Config) { c.SuspectTimeout = time.Second }},
		{"StallTimeout", views, func(c Config) any { return c.StallTimeout }, 2 * time.Second,
			func(c *Config) { c.StallTimeout = time.Second }},
		{"MaxDonors", views, func(c Config) any { return c.MaxDonors }, 4,
			func(c *Config) { c.MaxDonors = 2 }},
		{"TransferStall", views, func(c Config) any { return c.TransferStall }, 10 * time.Second,
			func(c *Config) { c.TransferStall = time.Second }},
		{"BeaconInterval", fixed, func(c Config) any { return c.BeaconInterval }, 20 * time.Millisecond,
			func(c *Config) { c.BeaconInterval = time.Millisecond }},
		{"BeaconGap", fixed, func(c Config) any { return c.BeaconGap }, 20 * time.Microsecond,
			func(c *Config) { c.BeaconGap = time.Millisecond }},
		{"WindowMessages", fixed, func(c Config) any { return c.WindowMessages }, 64 << 10,
			func(c *Config) { c.WindowMessages = 10 }},
		{"WindowBytes", fixed, func(c Config) any { return c.WindowBytes }, 64 << 20,
			func(c *Config) { c.WindowBytes = 1000 }},
		{"MaxMessageBytes", fixed, func(c Config) any { return c.MaxMessageBytes }, 64 << 20,
			func(c *Config) { c.MaxMessageBytes = 1000 }},
		{"Etcd.Prefix", views, func(c Config) any { return c.Etcd.Prefix }, "/convoy/",
			func(c *Config) { c.Etcd.Prefix = "/other/" }},
		{"Etcd.DialTimeout", views, func(c Config) any { return c.Etcd.DialTimeout }, 5 * time.Second,
			func(c *Config) { c.Etcd.DialTimeout = time.Second }},
		{"Etcd.LeaseTTL", views, func(c Config) any { return c.Etcd.LeaseTTL }, 5 * time.Second,
			func(c *Config) { c.Etcd.LeaseTTL = time.Second }},
		{"Durable.MaxLag", views, func(c Config) any { return c.Durable.MaxLag }, uint64(1 << 18),
			func(c *Config) { c.Durable.MaxLag = 64 }},
		{"Durable.RestartWait", views, func(c Config) any { return c.Durable.RestartWait }, 3 * time.Second,
			func(c *Config) { c.Durable.RestartWait = time.Second }},
		{"Durable.TopicRetain", views, func(c Config) any { return c.Durable.TopicRetain }, 1 << 16,
			func(c *Config) { c.Durable.TopicRetain = 10 }},
		{"MeterProvider", fixed, func(c Config) any { return reflect.TypeOf(c.MeterProvider) }, reflect.TypeOf(noop.NewMeterProvider()),
			func(c *Config) { c.MeterProvider = meterProvider{} }},
		{"TracerProvider", fixed, func(c Config) any { return reflect.TypeOf(c.TracerProvider) }, reflect.TypeOf(tracenoop.NewTracerProvider()),
			func(c *Config) { c.TracerProvider = tracerProvider{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.base().withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.def {
				t.Errorf("left zero: %v, documented default %v", got, tc.def)
			}
			in := tc.base()
			tc.set(&in)
			want := tc.get(in)
			if c, err = in.withDefaults(); err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != want {
				t.Errorf("set to %v: became %v", want, got)
			}
		})
	}
}

// A config that names an etcd client takes no dial timeout, not even
// the default: completed, it stays valid.
func TestConfigDefaultsEtcdClient(t *testing.T) {
	c, err := Config{Self: 1, Etcd: &EtcdConfig{Client: new(clientv3.Client)}}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Etcd.DialTimeout != 0 {
		t.Errorf("DialTimeout %v beside a client", c.Etcd.DialTimeout)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the completed config: %v", err)
	}
}

type meterProvider struct{ noop.MeterProvider }

type tracerProvider struct{ tracenoop.TracerProvider }

// TestConfigDefaultFuncs: the defaults that are functions. The clock
// reads wall-clock nanoseconds since the Unix epoch; the logger discards
// everything.
func TestConfigDefaultFuncs(t *testing.T) {
	c, err := Config{Self: 1, Members: []Member{{ID: 1}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	if d := c.Clock() - now; d < -int64(time.Second) || d > int64(time.Second) {
		t.Errorf("default clock is %v off the wall clock", time.Duration(d))
	}
	if a, b := c.Clock(), c.Clock(); b < a {
		t.Errorf("default clock went back from %d to %d", a, b)
	}
	if c.Logger.Enabled(context.Background(), slog.LevelError) {
		t.Error("default logger does not discard")
	}

	clock := func() int64 { return 42 }
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err = Config{Self: 1, Members: []Member{{ID: 1}}, Clock: clock, Logger: logger}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Clock() != 42 || c.Logger != logger {
		t.Error("a set Clock or Logger was replaced")
	}
}

// TestConfigDefaultsShareNothing: the defaults of nested configs are
// applied to copies, never to the caller's structs.
func TestConfigDefaultsShareNothing(t *testing.T) {
	e, d := &EtcdConfig{Endpoints: []string{"127.0.0.1:2379"}}, &DurableConfig{Dir: "log"}
	if _, err := (Config{Self: 1, Etcd: e, Durable: d}).withDefaults(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*e, EtcdConfig{Endpoints: []string{"127.0.0.1:2379"}}) || !reflect.DeepEqual(*d, DurableConfig{Dir: "log"}) {
		t.Errorf("the caller's configs were changed: %+v, %+v", *e, *d)
	}
}

// TestConfigValidate: each mistake is reported on its own, naming its
// field and wrapping ErrInvalidConfig, and Open refuses the config with
// the same errors.
func TestConfigValidate(t *testing.T) {
	views := func(f func(*Config)) Config {
		c := Config{Self: 1, Etcd: &EtcdConfig{Endpoints: []string{"127.0.0.1:2379"}}}
		if f != nil {
			f(&c)
		}
		return c
	}
	fixed := func(f func(*Config)) Config {
		c := Config{Self: 2, Members: []Member{{ID: 1}, {ID: 2}}}
		if f != nil {
			f(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		// fields names every field the errors must name (none: valid).
		fields []string
	}{
		{"fixed", fixed(nil), nil},
		{"views", views(nil), nil},
		{"durable views", views(func(c *Config) { c.Durable = &DurableConfig{Dir: "log"} }), nil},
		{"views with Members", views(func(c *Config) { c.Members = []Member{{ID: 1}} }), []string{"Members"}},
		{"views not atomic", views(func(c *Config) { c.Mode = TotalOrder }), []string{"Mode"}},
		{"views without Self", views(func(c *Config) { c.Self = 0 }), []string{"Self"}},
		{"views without etcd", views(func(c *Config) { c.Etcd.Endpoints = nil }), []string{"Etcd.Endpoints"}},
		{"member twice", fixed(func(c *Config) { c.Members = append(c.Members, Member{ID: 1}) }), []string{"Members"}},
		{"self not a member", fixed(func(c *Config) { c.Self = 3 }), []string{"Self"}},
		{"epoch", fixed(func(c *Config) { c.Epoch = 1 << 40 }), []string{"Epoch"}},
		{"durable not atomic", fixed(func(c *Config) { c.Mode, c.Durable = TotalOrder, &DurableConfig{Dir: "log"} }), []string{"Durable"}},
		{"durable without a directory", views(func(c *Config) { c.Durable = &DurableConfig{} }), []string{"Durable.Dir"}},
		{"negative windows", fixed(func(c *Config) { c.WindowMessages, c.WindowBytes, c.MaxMessageBytes = -1, -1, -1 }),
			[]string{"WindowMessages", "WindowBytes", "MaxMessageBytes"}},
		{"negative fan-out", fixed(func(c *Config) { c.FanOut = -1 }), []string{"FanOut"}},
		{"fan-out of one", fixed(func(c *Config) { c.FanOut = 1 }), []string{"FanOut"}},
		{"unknown mode", fixed(func(c *Config) { c.Mode = Unordered + 1 }), []string{"Mode"}},
		{"unknown algorithm", fixed(func(c *Config) { c.Algorithm = multicast.BinomialTree + 1 }), []string{"Algorithm"}},
		{"negative block", fixed(func(c *Config) { c.BlockBytes = -1 }), []string{"BlockBytes"}},
		{"negative beacons", fixed(func(c *Config) { c.BeaconInterval, c.BeaconGap = -1, -1 }), []string{"BeaconInterval", "BeaconGap"}},
		{"donors and initial members", views(func(c *Config) { c.MaxDonors, c.InitialMembers = -1, -2 }), []string{"InitialMembers", "MaxDonors"}},
		{"suspect before heartbeat", views(func(c *Config) { c.HeartbeatInterval, c.SuspectTimeout = time.Second, time.Second }), []string{"SuspectTimeout"}},
		{"negative view timings", views(func(c *Config) {
			c.HeartbeatInterval, c.StallTimeout, c.TransferStall = -1, -1, -1
			c.Etcd.DialTimeout, c.Etcd.LeaseTTL = -1, -1
		}), []string{"HeartbeatInterval", "StallTimeout", "TransferStall", "Etcd.DialTimeout", "Etcd.LeaseTTL"}},
		{"etcd login", views(func(c *Config) { c.Etcd.Username, c.Etcd.Password = "convoy", "secret" }), nil},
		{"etcd user without password", views(func(c *Config) { c.Etcd.Username = "convoy" }), []string{"Etcd.Password"}},
		{"etcd password without user", views(func(c *Config) { c.Etcd.Password = "secret" }), []string{"Etcd.Username"}},
		{"etcd client", views(func(c *Config) { c.Etcd.Endpoints, c.Etcd.Client = nil, new(clientv3.Client) }), nil},
		{"etcd client and its settings", views(func(c *Config) {
			c.Etcd.Client, c.Etcd.TLS, c.Etcd.DialTimeout, c.Etcd.Username, c.Etcd.Password = new(clientv3.Client), &tls.Config{}, -1, "convoy", "secret"
		}), []string{"Etcd.Endpoints", "Etcd.TLS", "Etcd.DialTimeout", "Etcd.Username", "Etcd.Password"}},
		{"negative restart wait", views(func(c *Config) { c.Durable = &DurableConfig{Dir: "log", RestartWait: -1} }), []string{"Durable.RestartWait"}},
		{"negative topic retention", views(func(c *Config) { c.Durable = &DurableConfig{Dir: "log", TopicRetain: -1} }), []string{"Durable.TopicRetain"}},
		{"two mistakes", views(func(c *Config) { c.Self, c.Mode = 0, Unordered }), []string{"Mode", "Self"}},
		{"view fields in a fixed group", fixed(func(c *Config) {
			c.InitialMembers, c.HeartbeatInterval, c.SuspectTimeout, c.StallTimeout, c.MaxDonors, c.TransferStall = 3, time.Second, 2*time.Second, time.Second, 2, time.Second
		}), []string{"InitialMembers", "HeartbeatInterval", "SuspectTimeout", "StallTimeout", "MaxDonors", "TransferStall"}},
		{"view defaults in a fixed group", fixed(func(c *Config) {
			c.InitialMembers, c.HeartbeatInterval, c.MaxDonors = 1, DefaultHeartbeatInterval, DefaultMaxDonors
		}), nil},
		{"state in a fixed group", fixed(func(c *Config) { c.State = struct{ StateMachine }{} }), []string{"State"}},
		{"state in a durable fixed group", fixed(func(c *Config) { c.State, c.Durable = struct{ StateMachine }{}, &DurableConfig{Dir: "log"} }), nil},
		{"epoch in a view-managed group", views(func(c *Config) { c.Epoch = 5 }), []string{"Epoch"}},
		// A view-managed member proves its join requests with its
		// certificate.
		{"TLS without a certificate in a view-managed group", views(func(c *Config) { c.TLS = &tls.Config{} }), []string{"TLS"}},
		{"TLS without a certificate in a fixed group", fixed(func(c *Config) { c.TLS = &tls.Config{} }), nil},
		{"listening with an endpoint", fixed(func(c *Config) {
			c.Endpoint, c.ListenAddr, c.TLS = struct{ rdma.Endpoint }{}, "127.0.0.1:1", &tls.Config{}
		}),
			[]string{"ListenAddr", "TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.fields) == 0 {
				if err != nil {
					t.Fatalf("a valid config: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) || len(joined.Unwrap()) != len(tc.fields) {
				t.Fatalf("got %v, want one error for each of %v", err, tc.fields)
			}
			for i, e := range joined.Unwrap() {
				if want := "Config." + tc.fields[i] + ":"; !errors.Is(e, ErrInvalidConfig) || !strings.Contains(e.Error(), want) {
					t.Errorf("error %d: %q, want one on %s wrapping ErrInvalidConfig", i, e, want)
				}
			}
			if _, err := Open(context.Background(), tc.cfg, func(Delivery) {}); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Open: %v, want ErrInvalidConfig", err)
			}
		})
	}
}
