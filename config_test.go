package convoy

import (
	"crypto/tls"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/internal/engine"
	"github.com/convoy-gcs/convoy/rdma"
)

// Config.engine copies every field: a field added to Config and not to
// the conversion fails here, as does a field of EtcdConfig or
// DurableConfig that the engine's lacks.
func TestConfigEngineCopiesEveryField(t *testing.T) {
	var c Config
	cv := reflect.ValueOf(&c).Elem()
	for i := range cv.NumField() {
		fillNonZero(t, cv.Type().Field(i).Name, cv.Field(i))
	}
	var shown []View
	c.OnView = func(v View) { shown = append(shown, v) }
	ec := c.engine()
	ev := reflect.ValueOf(ec)
	for i := range cv.NumField() {
		f := cv.Type().Field(i)
		got := ev.FieldByName(f.Name)
		if !got.IsValid() {
			t.Errorf("engine.Config has no field %s", f.Name)
			continue
		}
		switch f.Name {
		case "Members":
			if len(ec.Members) != len(c.Members) || ec.Members[0].ID != c.Members[0].ID || ec.Members[0].Addr != c.Members[0].Addr {
				t.Errorf("Members: got %v, want %v", ec.Members, c.Members)
			}
		case "Etcd":
			if !reflect.DeepEqual(*ec.Etcd, engine.EtcdConfig(*c.Etcd)) {
				t.Errorf("Etcd: got %+v, want %+v", *ec.Etcd, *c.Etcd)
			}
		case "Durable":
			if !reflect.DeepEqual(*ec.Durable, engine.DurableConfig(*c.Durable)) {
				t.Errorf("Durable: got %+v, want %+v", *ec.Durable, *c.Durable)
			}
		case "OnView":
			ec.OnView(engine.View{Epoch: 7, Members: []engine.Member{{ID: 3, Addr: "a:1"}}, Joined: []NodeID{3}})
			if len(shown) != 1 || shown[0].Epoch != 7 || shown[0].Members[0] != (Member{ID: 3, Addr: "a:1"}) || shown[0].Joined[0] != 3 {
				t.Errorf("OnView: the application saw %+v", shown)
			}
		case "Clock":
			if ec.Clock() != c.Clock() {
				t.Errorf("Clock not copied")
			}
		case "Topics":
			if len(ec.Topics) != 1 || !reflect.DeepEqual(ec.Topics[0], engine.Topic(c.Topics[0])) {
				t.Errorf("Topics: got %+v, want %+v", ec.Topics, c.Topics)
			}
		default:
			if f.Type.Kind() == reflect.Interface {
				if got.Interface() != cv.Field(i).Interface() {
					t.Errorf("%s not copied", f.Name)
				}
				continue
			}
			if !reflect.DeepEqual(got.Interface(), cv.Field(i).Interface()) {
				t.Errorf("%s: got %v, want %v", f.Name, got.Interface(), cv.Field(i).Interface())
			}
		}
	}
	if n, m := reflect.TypeFor[EtcdConfig]().NumField(), reflect.TypeFor[engine.EtcdConfig]().NumField(); n != m {
		t.Errorf("EtcdConfig has %d fields, engine.EtcdConfig %d", n, m)
	}
}

// fakes are distinct values of Config's interface fields.
var fakes = map[string]any{
	"State":          struct{ StateMachine }{},
	"Endpoint":       struct{ rdma.Endpoint }{},
	"MeterProvider":  struct{ metric.MeterProvider }{},
	"TracerProvider": struct{ trace.TracerProvider }{},
}

// fillNonZero sets v, a field of Config named name, to a value other
// than its zero.
func fillNonZero(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	switch name {
	case "Members":
		v.Set(reflect.ValueOf([]Member{{ID: 1, Addr: "127.0.0.1:1"}}))
		return
	case "Etcd":
		v.Set(reflect.ValueOf(&EtcdConfig{Endpoints: []string{"e"}, Prefix: "/p/", TLS: &tls.Config{ServerName: "etcd"}, DialTimeout: time.Second,
			Username: "u", Password: "p", Client: new(clientv3.Client), LeaseTTL: 2 * time.Second}))
		return
	case "Durable":
		v.Set(reflect.ValueOf(&DurableConfig{Dir: "d", MaxLag: 5, RestartWait: time.Second, TopicRetain: 7}))
		return
	case "OnView":
		return // set by the caller
	case "Topics":
		v.Set(reflect.ValueOf([]Topic{{Name: "t", Mode: TotalOrder, Subscribers: []NodeID{1}}}))
		return
	case "Clock":
		v.Set(reflect.ValueOf(func() int64 { return 42 }))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(3)
	case reflect.String:
		v.SetString("x:1")
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Interface:
		v.Set(reflect.ValueOf(fakes[name]))
	default:
		t.Fatalf("field %s of kind %v: teach fillNonZero", name, v.Kind())
	}
}

// Validate and Open refuse a mistaken Config with the engine's errors,
// which wrap this package's ErrInvalidConfig and name the field.
func TestValidateThroughRoot(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // a field named in the error; "" for none
	}{
		{"fixed group", Config{Self: 1, Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}, ""},
		{"self missing", Config{Self: 2, Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}, "Config.Self"},
		{"etcd and members", Config{Self: 1, Members: []Member{{ID: 1}}, Etcd: &EtcdConfig{}}, "Config.Members"},
		{"durable without dir", Config{Self: 1, Members: []Member{{ID: 1}}, Durable: &DurableConfig{}}, "Config.Durable.Dir"},
		{"negative lease", Config{Self: 1, Etcd: &EtcdConfig{LeaseTTL: -time.Second}}, "Config.Etcd.LeaseTTL"},
		{"etcd client", Config{Self: 1, Etcd: &EtcdConfig{Client: new(clientv3.Client)}}, ""},
		{"etcd client and endpoints", Config{Self: 1, Etcd: &EtcdConfig{Client: new(clientv3.Client), Endpoints: []string{"e"}}}, "Config.Etcd.Endpoints"},
		{"etcd user without password", Config{Self: 1, Etcd: &EtcdConfig{Endpoints: []string{"e"}, Username: "u"}}, "Config.Etcd.Password"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an ErrInvalidConfig naming %s", err, tc.want)
			}
			if _, err := Open(t.Context(), tc.cfg, nil); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Open = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// DefaultConfig holds the documented defaults, and a config made from it
// is valid for either kind of membership.
func TestDefaultConfig(t *testing.T) {
	d := DefaultConfig()
	want := Config{
		InitialMembers: 1, HeartbeatInterval: DefaultHeartbeatInterval, SuspectTimeout: DefaultSuspectTimeout,
		StallTimeout: DefaultStallTimeout, MaxDonors: DefaultMaxDonors, TransferStall: DefaultTransferStall,
		Mode: Atomic, Epoch: 1, BeaconInterval: DefaultBeaconInterval, BeaconGap: DefaultBeaconGap, WindowMessages: DefaultWindowMessages,
		WindowBytes: DefaultWindowBytes, MaxMessageBytes: DefaultMaxMessageBytes,
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("DefaultConfig() = %+v, want %+v", d, want)
	}
	fixed := d
	fixed.Self, fixed.Members = 1, []Member{{ID: 1, Addr: "127.0.0.1:1"}}
	if err := fixed.Validate(); err != nil {
		t.Errorf("a fixed group from DefaultConfig: %v", err)
	}
	views := d
	views.Self, views.Etcd = 1, &EtcdConfig{Endpoints: []string{"127.0.0.1:2379"}}
	if err := views.Validate(); err != nil {
		t.Errorf("a view-managed group from DefaultConfig: %v", err)
	}
}
