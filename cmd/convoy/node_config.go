package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convoy-gcs/convoy/internal/skewclock"
)

// nodeSettings configures one "convoy node" member. Each setting comes,
// in increasing precedence, from its default, the JSON file named by
// -config (or CONVOY_CONFIG), an environment variable CONVOY_<NAME>, and
// a command-line flag -<name>; nodeOptions lists them.
type nodeSettings struct {
	ID  uint64 `json:"id"`
	App string `json:"app"`
	// Listen is the transport's listen address; Addr is the address other
	// members reach it at ("": Listen, or what the transport listens on).
	Listen string `json:"listen"`
	Addr   string `json:"addr"`
	// HTTP is the API's listen address; HTTPURL its base URL as clients
	// reach it ("": made from the address listened on).
	HTTP    string `json:"http"`
	HTTPURL string `json:"http_url"`
	// Etcd lists the endpoints of the etcd that holds the views; Prefix
	// namespaces the group's keys there.
	Etcd   stringList `json:"etcd"`
	Prefix string     `json:"prefix"`
	// Data is the directory of the durable log.
	Data string `json:"data"`
	// Initial is how many members found the group.
	Initial int `json:"initial"`
	// Heartbeat, SuspectTimeout and StallTimeout tune the failure
	// detector, LeaseTTL the etcd leases (0: the library's defaults).
	Heartbeat      duration `json:"heartbeat"`
	SuspectTimeout duration `json:"suspect_timeout"`
	StallTimeout   duration `json:"stall_timeout"`
	LeaseTTL       duration `json:"lease_ttl"`
	// EtcdCA, EtcdCert and EtcdKey are PEM files securing the connection
	// to etcd (a CA to verify it by; a client certificate and its key).
	EtcdCA   string `json:"etcd_ca"`
	EtcdCert string `json:"etcd_cert"`
	EtcdKey  string `json:"etcd_key"`
	// TLSCA, TLSCert and TLSKey are PEM files for mutual TLS between
	// members: every member presents its certificate and accepts peers
	// whose certificates the CA signed.
	TLSCA   string `json:"tls_ca"`
	TLSCert string `json:"tls_cert"`
	TLSKey  string `json:"tls_key"`
	// ClockOffset and ClockDriftPPM set this member's clock
	// (convoy.Config.Clock) off the machine's, to test a group under
	// clock skew: the clock reads the machine's time plus ClockOffset
	// when the member starts, and from then on gains ClockDriftPPM
	// microseconds a second (loses them, if negative). Skew between
	// members costs latency, never correctness. See internal/skewclock
	// for the bounds.
	ClockOffset   duration `json:"clock_offset"`
	ClockDriftPPM int      `json:"clock_drift_ppm"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level"`
}

// defaultNodeSettings returns the settings before any file, variable or
// flag: a member on loopback, with the library's failure detector
// defaults.
func defaultNodeSettings() nodeSettings {
	return nodeSettings{
		Listen:   "127.0.0.1:0",
		HTTP:     "127.0.0.1:0",
		Prefix:   "/convoy/",
		Initial:  1,
		LogLevel: "info",
	}
}

// nodeOption is one setting: its flag name (the variable is CONVOY_ and
// the name in upper case with "-" as "_"; the JSON field has "_" too),
// usage, and how to set it from a string.
type nodeOption struct {
	name  string
	usage string
	set   func(s *nodeSettings, v string) error
}

// envName returns the environment variable of the option.
func (o nodeOption) envName() string {
	return "CONVOY_" + strings.ToUpper(strings.ReplaceAll(o.name, "-", "_"))
}

// nodeConfigEnv names the settings file when -config is absent.
const nodeConfigEnv = "CONVOY_CONFIG"

func strOpt(name, usage string, field func(*nodeSettings) *string) nodeOption {
	return nodeOption{name: name, usage: usage, set: func(s *nodeSettings, v string) error {
		*field(s) = v
		return nil
	}}
}

func durOpt(name, usage string, field func(*nodeSettings) *duration) nodeOption {
	return nodeOption{name: name, usage: usage, set: func(s *nodeSettings, v string) error {
		return field(s).set(v)
	}}
}

// nodeOptions lists every setting of "convoy node".
func nodeOptions() []nodeOption {
	return []nodeOption{
		{name: "id", usage: "this member's `id`, unique in the group (required)", set: func(s *nodeSettings, v string) error {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("not an id: %q", v)
			}
			s.ID = id
			return nil
		}},
		strOpt("app", "the service: `kv|log`, the replicated key-value store or the shared log (required)", func(s *nodeSettings) *string { return &s.App }),
		strOpt("listen", "transport listen `address`, host:port (default 127.0.0.1:0: a free port on loopback)", func(s *nodeSettings) *string { return &s.Listen }),
		strOpt("addr", "transport `address` other members reach this one at (default: the address listened on)", func(s *nodeSettings) *string { return &s.Addr }),
		strOpt("http", "HTTP API listen `address`, host:port (default 127.0.0.1:0: a free port on loopback)", func(s *nodeSettings) *string { return &s.HTTP }),
		strOpt("http-url", "base `URL` clients reach the API at (default: http:// and the address listened on)", func(s *nodeSettings) *string { return &s.HTTPURL }),
		{name: "etcd", usage: "etcd `endpoints`, comma-separated URLs (required)", set: func(s *nodeSettings, v string) error {
			s.Etcd = splitList(v)
			return nil
		}},
		strOpt("prefix", "etcd key `prefix` of the group, ending in / (default /convoy/)", func(s *nodeSettings) *string { return &s.Prefix }),
		strOpt("data", "`directory` of the durable log (required)", func(s *nodeSettings) *string { return &s.Data }),
		{name: "initial", usage: "how many members found the group (default 1)", set: func(s *nodeSettings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("not a count: %q", v)
			}
			s.Initial = n
			return nil
		}},
		durOpt("heartbeat", "failure detector heartbeat `interval` (0: the library's default, 50ms)", func(s *nodeSettings) *duration { return &s.Heartbeat }),
		durOpt("suspect-timeout", "`silence` after which a neighbour is suspected (0: the library's default, 250ms)", func(s *nodeSettings) *duration { return &s.SuspectTimeout }),
		durOpt("stall-timeout", "how `long` a neighbour's frontier may stay behind (0: the library's default, 2s)", func(s *nodeSettings) *duration { return &s.StallTimeout }),
		durOpt("lease-ttl", "etcd lease `TTL` of this member's registrations (0: the library's default, 5s)", func(s *nodeSettings) *duration { return &s.LeaseTTL }),
		strOpt("etcd-ca", "PEM `file` of the CA that signed etcd's certificate", func(s *nodeSettings) *string { return &s.EtcdCA }),
		strOpt("etcd-cert", "PEM `file` of the client certificate presented to etcd", func(s *nodeSettings) *string { return &s.EtcdCert }),
		strOpt("etcd-key", "PEM `file` of -etcd-cert's private key", func(s *nodeSettings) *string { return &s.EtcdKey }),
		strOpt("tls-ca", "PEM `file` of the CA that signs members' certificates (mutual TLS between members)", func(s *nodeSettings) *string { return &s.TLSCA }),
		strOpt("tls-cert", "PEM `file` of this member's certificate", func(s *nodeSettings) *string { return &s.TLSCert }),
		strOpt("tls-key", "PEM `file` of -tls-cert's private key", func(s *nodeSettings) *string { return &s.TLSKey }),
		durOpt("clock-offset", "set this member's clock off by this `offset`, ahead or (negative) behind, for fault testing (default 0)", func(s *nodeSettings) *duration { return &s.ClockOffset }),
		{name: "clock-drift-ppm", usage: "make this member's clock gain `ppm` microseconds a second (lose, if negative), for fault testing (default 0)", set: func(s *nodeSettings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("not a whole number of parts per million: %q", v)
			}
			s.ClockDriftPPM = n
			return nil
		}},
		strOpt("log-level", "debug, info, warn or error (default info)", func(s *nodeSettings) *string { return &s.LogLevel }),
	}
}

// loadNodeSettings reads the settings of "convoy node" from args (flags),
// the environment (getenv) and the JSON file that -config or
// CONVOY_CONFIG names: a flag overrides the environment, which overrides
// the file, which overrides the defaults. It does not validate them: see
// check.
func loadNodeSettings(args []string, getenv func(string) string, c *cli) (nodeSettings, error) {
	fs := newFlagSet("node", nodeCmdUsage, c)
	configFile := fs.String("config", "", "JSON `file` of settings (fields named like the flags, with _ for -) [CONVOY_CONFIG]")
	type flagValue struct {
		opt nodeOption
		v   string
	}
	var flags []flagValue
	opts := nodeOptions()
	for _, o := range opts {
		fs.Func(o.name, o.usage+" ["+o.envName()+"]", func(v string) error {
			flags = append(flags, flagValue{o, v})
			return nil
		})
	}
	if err := parseFlags(fs, args); err != nil {
		return nodeSettings{}, err
	}

	s := defaultNodeSettings()
	path := *configFile
	if path == "" {
		path = getenv(nodeConfigEnv)
	}
	if path != "" {
		if err := s.readFile(path); err != nil {
			return nodeSettings{}, usagef("node: %v", err)
		}
	}
	for _, o := range opts {
		if v := getenv(o.envName()); v != "" {
			if err := o.set(&s, v); err != nil {
				return nodeSettings{}, usagef("node: %s: %v", o.envName(), err)
			}
		}
	}
	for _, f := range flags {
		// Flag values were taken as given; convert them now, in order.
		if err := f.opt.set(&s, f.v); err != nil {
			return nodeSettings{}, usagef("node: -%s: %v", f.opt.name, err)
		}
	}
	return s, nil
}

// readFile overlays the settings in the JSON file at path: a field the
// file leaves out keeps its value, an unknown field is an error.
func (s *nodeSettings) readFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("settings file: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return fmt.Errorf("settings file %s: %w", path, err)
	}
	// One field at a time, so that an error names its field.
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		one, err := json.Marshal(map[string]json.RawMessage{name: fields[name]})
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(one))
		dec.DisallowUnknownFields()
		if err := dec.Decode(s); err != nil {
			return fmt.Errorf("settings file %s: %s: %w", path, name, err)
		}
	}
	return nil
}

// check validates the settings.
func (s nodeSettings) check() error {
	switch {
	case s.ID == 0:
		return usagef("node: -id is required (a positive id, unique in the group)")
	case s.App != appKV && s.App != appLog:
		return usagef("node: -app must be %s or %s, not %q", appKV, appLog, s.App)
	case len(s.Etcd) == 0:
		return usagef("node: -etcd is required: a node keeps its group's views in etcd (run one, or use \"convoy cluster\" for a local cluster)")
	case s.Data == "":
		return usagef("node: -data is required: both services keep a durable log")
	case !strings.HasSuffix(s.Prefix, "/"):
		return usagef("node: -prefix %q must end in /", s.Prefix)
	case s.Initial < 1:
		return usagef("node: -initial must be positive")
	case s.Listen == "" || s.HTTP == "":
		return usagef("node: -listen and -http must not be empty")
	case s.Heartbeat < 0 || s.SuspectTimeout < 0 || s.StallTimeout < 0 || s.LeaseTTL < 0:
		return usagef("node: durations must not be negative")
	case time.Duration(s.ClockOffset).Abs() > skewclock.MaxOffset:
		return usagef("node: -clock-offset %v is beyond ±%v", time.Duration(s.ClockOffset), skewclock.MaxOffset)
	case s.ClockDriftPPM < -skewclock.MaxDriftPPM || s.ClockDriftPPM > skewclock.MaxDriftPPM:
		return usagef("node: -clock-drift-ppm %d is beyond ±%d", s.ClockDriftPPM, skewclock.MaxDriftPPM)
	case (s.EtcdCert == "") != (s.EtcdKey == ""):
		return usagef("node: -etcd-cert and -etcd-key go together")
	case (s.TLSCA != "" || s.TLSCert != "" || s.TLSKey != "") && (s.TLSCA == "" || s.TLSCert == "" || s.TLSKey == ""):
		return usagef("node: mutual TLS between members needs -tls-ca, -tls-cert and -tls-key")
	}
	if _, err := parseLogLevel(s.LogLevel); err != nil {
		return usagef("node: -log-level: %v", err)
	}
	return nil
}

// Services a node runs.
const (
	appKV  = "kv"
	appLog = "log"
)

// parseLogLevel parses debug, info, warn or error.
func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error, not %q", s)
	}
	return l, nil
}

// etcdTLS returns the TLS configuration for etcd, or nil without one.
func (s nodeSettings) etcdTLS() (*tls.Config, error) {
	if s.EtcdCA == "" && s.EtcdCert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.EtcdCA != "" {
		pool, err := loadCertPool(s.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("etcd CA: %w", err)
		}
		cfg.RootCAs = pool
	}
	if s.EtcdCert != "" {
		cert, err := tls.LoadX509KeyPair(s.EtcdCert, s.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// memberTLS returns the mutual TLS configuration between members, or nil
// without one: this member's certificate, presented as client and as
// server, and the CA that must have signed its peers'.
func (s nodeSettings) memberTLS() (*tls.Config, error) {
	if s.TLSCA == "" {
		return nil, nil
	}
	pool, err := loadCertPool(s.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("member CA: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("member certificate: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// loadCertPool reads the PEM certificates in path.
func loadCertPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// stringList is a list of strings: in JSON an array, or one
// comma-separated string.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = splitList(one)
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*l = many
	return nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// duration is a time.Duration written as in Go ("250ms") in JSON, or as
// a number of nanoseconds.
type duration time.Duration

func (d *duration) set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration: %q", s)
	}
	*d = duration(v)
	return nil
}

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return d.set(s)
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("want a duration such as \"250ms\"")
	}
	*d = duration(n)
	return nil
}

func (d duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}
