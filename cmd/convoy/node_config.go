package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/json"
	"github.com/knadh/koanf/providers/basicflag"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"

	"github.com/convoy-gcs/convoy/internal/httpauth"
	"github.com/convoy-gcs/convoy/internal/skewclock"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// nodeSettings configures one "convoy node" member. Each setting comes,
// in increasing precedence, from its default, the JSON file named by
// -config (or CONVOY_CONFIG), an environment variable CONVOY_<NAME>, and
// a command-line flag -<name>: a field's JSON name is its flag's name
// with "_" for "-", and NAME is the JSON name in upper case. The flags,
// and with them the defaults, are defined in defineNodeFlags.
type nodeSettings struct {
	ID  uint64 `json:"id"`
	App string `json:"app"`
	// Listen is the transport's listen address; Addr is the address other
	// members reach it at ("": Listen, or what the transport listens on).
	Listen string `json:"listen"`
	Addr   string `json:"addr"`
	// HTTP is the API's listen address; HTTPURL its base URL as clients
	// reach it ("": made from the address listened on, https:// with
	// HTTPCert).
	HTTP    string `json:"http"`
	HTTPURL string `json:"http_url"`
	// HTTPCert and HTTPKey are PEM files of the certificate and key the
	// API serves TLS with (none: plain HTTP).
	HTTPCert string `json:"http_cert"`
	HTTPKey  string `json:"http_key"`
	// HTTPCA is a PEM file of the CAs that sign the members' API
	// certificates, which this node trusts when it reads the other
	// members' status for GET /group ("": TLSCA's, else the system's).
	HTTPCA string `json:"http_ca"`
	// HTTPToken, or the first line of the file HTTPTokenFile names, is
	// the bearer token every API request must carry ("": none). The
	// token has no flag, so that it never shows in the process list:
	// CONVOY_HTTP_TOKEN or the settings file set it.
	HTTPToken     string `json:"http_token"`
	HTTPTokenFile string `json:"http_token_file"`
	// MetricsAddr is the listen address of the operator endpoints,
	// /metrics and /debug/pprof/ ("": none).
	MetricsAddr string `json:"metrics_addr"`
	// OTLPEndpoint is the URL of an OTLP/HTTP collector that receives the
	// group's traces ("": none).
	OTLPEndpoint string `json:"otlp_endpoint"`
	// Etcd lists the endpoints of the etcd that holds the views; Prefix
	// namespaces the group's keys there.
	Etcd   []string `json:"etcd"`
	Prefix string   `json:"prefix"`
	// Data is the directory of the durable log.
	Data string `json:"data"`
	// Initial is how many members found the group.
	Initial int `json:"initial"`
	// MaxConns bounds the HTTP API's connections open at once (streams
	// included): beyond it the node closes new connections as soon as it
	// accepts them, and their clients try again (0: defaultMaxConns).
	MaxConns int `json:"max_conns"`
	// WindowMessages and WindowBytes bound this member's messages sent
	// and not yet delivered (convoy.Config; 0: the library's defaults).
	WindowMessages int `json:"window_messages"`
	WindowBytes    int `json:"window_bytes"`
	// MaxValueBytes, MaxRequests and MaxRequestBytes bound the service's
	// values (pub/sub: messages) and the requests it serves at once,
	// MaxStreams the key-value store's streams or the pub/sub service's
	// event streams (paxos.Options, sharedlog.Options, pubsub.Options; 0:
	// their defaults). MaxStreams not with App log.
	MaxValueBytes   int `json:"max_value_bytes"`
	MaxRequests     int `json:"max_requests"`
	MaxRequestBytes int `json:"max_request_bytes"`
	MaxStreams      int `json:"max_streams"`
	// Heartbeat, SuspectTimeout and StallTimeout tune the failure
	// detector, LeaseTTL the etcd leases (0: the library's defaults).
	Heartbeat      time.Duration `json:"heartbeat"`
	SuspectTimeout time.Duration `json:"suspect_timeout"`
	StallTimeout   time.Duration `json:"stall_timeout"`
	LeaseTTL       time.Duration `json:"lease_ttl"`
	// EtcdCA, EtcdCert and EtcdKey are PEM files securing the connection
	// to etcd (a CA to verify it by; a client certificate and its key).
	EtcdCA   string `json:"etcd_ca"`
	EtcdCert string `json:"etcd_cert"`
	EtcdKey  string `json:"etcd_key"`
	// EtcdUsername logs in to an etcd with authentication enabled, with
	// EtcdPassword or the password in the file EtcdPasswordFile names (its
	// first line): a password given as a flag shows in the process list,
	// one in CONVOY_ETCD_PASSWORD or in a file does not.
	EtcdUsername     string `json:"etcd_username"`
	EtcdPassword     string `json:"etcd_password"`
	EtcdPasswordFile string `json:"etcd_password_file"`
	// TLSCA, TLSCert and TLSKey are PEM files for mutual TLS between
	// members: every member presents its certificate and accepts peers
	// whose certificates the CA signed.
	TLSCA   string `json:"tls_ca"`
	TLSCert string `json:"tls_cert"`
	TLSKey  string `json:"tls_key"`
	// TLSReloadInterval is how often the node looks for changes in its
	// certificate, key and CA files (TLSCert, TLSKey, TLSCA, HTTPCert,
	// HTTPKey and HTTPCA) and, if they changed, reads them again, for the
	// connections made from then on; 0: only on SIGHUP, which always
	// makes it look.
	TLSReloadInterval time.Duration `json:"tls_reload_interval"`
	// ClockOffset and ClockDriftPPM set this member's clock
	// (convoy.Config.Clock) off the machine's, to test a group under
	// clock skew: the clock reads the machine's time plus ClockOffset
	// when the member starts, and from then on gains ClockDriftPPM
	// microseconds a second (loses them, if negative). Skew between
	// members costs latency, never correctness. See internal/skewclock
	// for the bounds.
	ClockOffset   time.Duration `json:"clock_offset"`
	ClockDriftPPM int           `json:"clock_drift_ppm"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level"`
}

// defineNodeFlags defines on fs a flag for every setting of "convoy
// node", with the setting's default: a member on loopback, with the
// library's failure detector defaults. Each flag's usage ends with the
// name of its environment variable.
func defineNodeFlags(fs *flag.FlagSet) {
	fs.Uint64("id", 0, "this member's `id`, unique in the group (required)")
	fs.String("app", "", "the service: `kv|log|pubsub`, the replicated key-value store, the shared log or pub/sub (required)")
	fs.String("listen", "127.0.0.1:0", "transport listen `address`, host:port (port 0: a free one)")
	fs.String("addr", "", "transport `address` other members reach this one at (default: the address listened on)")
	fs.String("http", "127.0.0.1:0", "HTTP API listen `address`, host:port (port 0: a free one)")
	fs.String("http-url", "", "base `URL` clients reach the API at (default: http:// and the address listened on; https:// with -http-cert)")
	fs.String("http-cert", "", "PEM `file` of the certificate to serve the HTTP API with, over TLS (HTTP/1.1)")
	fs.String("http-key", "", "PEM `file` of -http-cert's private key")
	fs.String("http-ca", "", "PEM `file` of the CA that signs the members' HTTP API certificates, trusted when reading their status for GET /group (default: -tls-ca, else the system's CAs)")
	fs.String("http-token-file", "", "`file` whose first line is the bearer token every HTTP API request must carry (or set "+settingEnv(httpTokenKey)+"; default: none)")
	fs.String("metrics-addr", "", "listen `address` of the operator endpoints, /metrics (Prometheus) and /debug/pprof/ (default: none)")
	fs.String("otlp-endpoint", "", "`URL` of an OTLP/HTTP collector to send traces to, e.g. http://localhost:4318 (default: none)")
	fs.String("etcd", "", "etcd `endpoints`, comma-separated URLs (required)")
	fs.String("prefix", "/convoy/", "etcd key `prefix` of the group, ending in /")
	fs.String("data", "", "`directory` of the durable log (required)")
	fs.Int("initial", 1, "how many members found the group")
	fs.Int("max-conns", 0, "most HTTP API `connections` open at once, streams included: beyond it, new ones are closed at once (0: 1024)")
	fs.Int("window-messages", 0, "most of this member's messages sent and not yet delivered (0: the library's default, 65536)")
	fs.Int("window-bytes", 0, "most `bytes` of this member's messages sent and not yet delivered (0: the library's default, 64MiB)")
	fs.Int("max-value-bytes", 0, "the largest value (kv), entry (log) or message (pubsub), in `bytes` (0: the service's default, 1MiB)")
	fs.Int("max-requests", 0, "most requests served at once; beyond it, 503 with Retry-After (0: the service's default, 256, or -window-messages if fewer)")
	fs.Int("max-request-bytes", 0, "most `bytes` the requests (kv), appends (log) or publishes (pubsub) served at once hold; beyond it, 503 with Retry-After (0: the service's default, -window-bytes, or what the largest request counts if more)")
	fs.Int("max-streams", 0, "kv, pubsub: most streams (pubsub: event streams) served at once; beyond it, 503 with Retry-After (0: the service's default, 128)")
	fs.Duration("heartbeat", 0, "failure detector heartbeat `interval` (0: the library's default, 50ms)")
	fs.Duration("suspect-timeout", 0, "`silence` after which a neighbour is suspected (0: the library's default, 250ms)")
	fs.Duration("stall-timeout", 0, "how `long` a neighbour's frontier may stay behind (0: the library's default, 2s)")
	fs.Duration("lease-ttl", 0, "etcd lease `TTL` of this member's registrations (0: the library's default, 5s)")
	fs.String("etcd-ca", "", "PEM `file` of the CA that signed etcd's certificate")
	fs.String("etcd-cert", "", "PEM `file` of the client certificate presented to etcd")
	fs.String("etcd-key", "", "PEM `file` of -etcd-cert's private key")
	fs.String("etcd-username", "", "`user` to log in to etcd as, when etcd has authentication enabled")
	fs.String("etcd-password", "", "`password` of -etcd-username (visible in the process list: prefer the variable or -etcd-password-file)")
	fs.String("etcd-password-file", "", "`file` whose first line is the password of -etcd-username")
	fs.String("tls-ca", "", "PEM `file` of the CA that signs members' certificates (mutual TLS between members)")
	fs.String("tls-cert", "", "PEM `file` of this member's certificate, which names its id as the URI convoy://member/<id>")
	fs.String("tls-key", "", "PEM `file` of -tls-cert's private key")
	fs.Duration("tls-reload-interval", 10*time.Second, "`interval` between looks at the certificate, key and CA files, read again if they changed (0: only on SIGHUP, which always looks)")
	fs.Duration("clock-offset", 0, "set this member's clock off by this `offset`, ahead or (negative) behind, for fault testing")
	fs.Int("clock-drift-ppm", 0, "make this member's clock gain `ppm` microseconds a second (lose, if negative), for fault testing")
	fs.String("log-level", "info", "debug, info, warn or error")
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += " [" + settingEnv(settingKey(f.Name)) + "]"
	})
}

// settingKey returns the JSON name of the setting of flag -name.
func settingKey(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// settingEnv returns the environment variable of the setting named key.
func settingEnv(key string) string {
	return "CONVOY_" + strings.ToUpper(key)
}

// nodeConfigEnv names the settings file when -config is absent.
const nodeConfigEnv = "CONVOY_CONFIG"

// httpTokenKey is the setting with no flag (see nodeSettings.HTTPToken).
const httpTokenKey = "http_token"

// loadNodeSettings reads the settings of "convoy node" from args (flags),
// the environment and the JSON file that -config or CONVOY_CONFIG names:
// a flag overrides the environment, which overrides the file, which
// overrides the defaults. An empty variable counts as unset. It does not
// validate the settings: see check.
func loadNodeSettings(args []string, c *cli) (nodeSettings, error) {
	fs := newFlagSet("node", nodeCmdUsage, c)
	defineNodeFlags(fs)
	// The settings' keys, and the setting of each variable.
	keys := make(map[string]bool)
	envKeys := make(map[string]string)
	fs.VisitAll(func(f *flag.Flag) {
		key := settingKey(f.Name)
		keys[key] = true
		envKeys[settingEnv(key)] = key
	})
	keys[httpTokenKey] = true
	envKeys[settingEnv(httpTokenKey)] = httpTokenKey
	configFile := fs.String("config", "", "JSON `file` of settings (fields named like the flags, with _ for -) ["+nodeConfigEnv+"]")
	if err := parseFlags(fs, args); err != nil {
		return nodeSettings{}, err
	}

	k := koanf.New(".")
	path := *configFile
	if path == "" {
		path = os.Getenv(nodeConfigEnv)
	}
	if path != "" {
		fromFile, err := readSettingsFile(path, keys)
		if err != nil {
			return nodeSettings{}, usagef("node: settings file %s: %v", path, err)
		}
		if err := k.Merge(fromFile); err != nil {
			return nodeSettings{}, fmt.Errorf("node: settings file %s: %w", path, err)
		}
	}

	fromEnv := koanf.New(".")
	err := fromEnv.Load(env.Provider("", env.Opt{
		Prefix: "CONVOY_",
		TransformFunc: func(name, v string) (string, any) {
			key, ok := envKeys[name]
			if !ok || v == "" {
				return "", nil
			}
			return key, v
		},
	}), nil)
	if err != nil {
		return nodeSettings{}, fmt.Errorf("node: environment: %w", err)
	}
	if err := decodeSettings(fromEnv, &nodeSettings{}, true, settingEnv); err != nil {
		return nodeSettings{}, usagef("node: %v", err)
	}
	if err := k.Merge(fromEnv); err != nil {
		return nodeSettings{}, fmt.Errorf("node: environment: %w", err)
	}

	// The flags given override the file and the environment; the defaults
	// of the others fill in only what neither set. The flag package has
	// parsed their values already.
	flags := basicflag.ProviderWithValue(fs, ".", func(name, v string) (string, any) {
		if name == "config" {
			return "", nil
		}
		return settingKey(name), v
	}, k)
	if err := k.Load(flags, nil); err != nil {
		return nodeSettings{}, fmt.Errorf("node: flags: %w", err)
	}
	var s nodeSettings
	if err := decodeSettings(k, &s, true, settingKey); err != nil {
		return nodeSettings{}, usagef("node: %v", err)
	}
	return s, nil
}

// readSettingsFile reads the JSON file of settings at path, checking that
// each of its keys is one of keys and that its values decode.
func readSettingsFile(path string, keys map[string]bool) (*koanf.Koanf, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), json.Parser()); err != nil {
		return nil, err
	}
	for _, key := range k.Keys() {
		if !keys[key] {
			return nil, fmt.Errorf("unknown key %q", key)
		}
	}
	// Only in a file does a value have a type of its own (a number, a
	// string, an array), and it must be the setting's.
	if err := decodeSettings(k, &nodeSettings{}, false, func(key string) string { return key }); err != nil {
		return nil, err
	}
	return k, nil
}

// decodeSettings decodes the settings in k onto s. A duration is written
// as in Go ("250ms") or as a whole number of nanoseconds; a list is an
// array or one comma-separated string. With fromText, a value may be a
// string to parse as its setting's type, as variables and flags are;
// without, it must have that type. An error names the setting at fault
// as name(key) spells it.
func decodeSettings(k *koanf.Koanf, s *nodeSettings, fromText bool, name func(key string) string) error {
	err := k.UnmarshalWithConf("", s, koanf.UnmarshalConf{
		Tag: "json",
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				splitListHook,
				mapstructure.StringToTimeDurationHookFunc(),
				wholeNumberHook,
			),
			WeaklyTypedInput: fromText,
		},
	})
	de, ok := errors.AsType[*mapstructure.DecodeError](err)
	if !ok || de.Name() == "" {
		return err
	}
	// The name is the key, or an item of it: "etcd[1]".
	key, item, _ := strings.Cut(de.Name(), "[")
	if item != "" {
		item = "[" + item
	}
	if v, ok := k.Get(key).(string); ok {
		return fmt.Errorf("%s%s %q: %w", name(key), item, v, de.Unwrap())
	}
	return fmt.Errorf("%s%s: %w", name(key), item, de.Unwrap())
}

// splitListHook decodes a string into a list of its comma-separated
// items (see splitList).
func splitListHook(_, to reflect.Type, data any) (any, error) {
	if s, ok := data.(string); ok && to == reflect.TypeFor[[]string]() {
		return splitList(s), nil
	}
	return data, nil
}

// wholeNumberHook refuses a JSON number (a float64) that an integer
// setting would not hold exactly: a fraction, or a number of 2^53 or
// more, which float64 may have rounded.
func wholeNumberHook(_, to reflect.Type, data any) (any, error) {
	f, ok := data.(float64)
	if !ok {
		return data, nil
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return nil, fmt.Errorf("want a whole number below 2^53, not %s", strconv.FormatFloat(f, 'f', -1, 64))
		}
	}
	return data, nil
}

// check validates the settings.
func (s nodeSettings) check() error {
	switch {
	case s.ID == 0:
		return usagef("node: -id is required (a positive id, unique in the group)")
	case s.App != appKV && s.App != appLog && s.App != appPubSub:
		return usagef("node: -app must be %s, %s or %s, not %q", appKV, appLog, appPubSub, s.App)
	case len(s.Etcd) == 0:
		return usagef("node: -etcd is required: a node keeps its group's views in etcd (run one, or use \"convoy cluster\" for a local cluster)")
	case s.Data == "":
		return usagef("node: -data is required: every service keeps a durable log")
	case !strings.HasSuffix(s.Prefix, "/"):
		return usagef("node: -prefix %q must end in /", s.Prefix)
	case s.Initial < 1:
		return usagef("node: -initial must be positive")
	case s.Listen == "" || s.HTTP == "":
		return usagef("node: -listen and -http must not be empty")
	case s.Heartbeat < 0 || s.SuspectTimeout < 0 || s.StallTimeout < 0 || s.LeaseTTL < 0:
		return usagef("node: durations must not be negative")
	case s.MaxConns < 0 || s.WindowMessages < 0 || s.WindowBytes < 0 || s.MaxValueBytes < 0 || s.MaxRequests < 0 || s.MaxRequestBytes < 0 || s.MaxStreams < 0:
		return usagef("node: -max-conns, -window-messages, -window-bytes, -max-value-bytes, -max-requests, -max-request-bytes and -max-streams must not be negative")
	case s.App == appLog && s.MaxStreams != 0:
		return usagef("node: -max-streams is the key-value store's and the pub/sub service's: the shared log serves no streams")
	case s.ClockOffset.Abs() > skewclock.MaxOffset:
		return usagef("node: -clock-offset %v is beyond ±%v", s.ClockOffset, skewclock.MaxOffset)
	case s.ClockDriftPPM < -skewclock.MaxDriftPPM || s.ClockDriftPPM > skewclock.MaxDriftPPM:
		return usagef("node: -clock-drift-ppm %d is beyond ±%d", s.ClockDriftPPM, skewclock.MaxDriftPPM)
	case (s.TLSCA != "" || s.TLSCert != "" || s.TLSKey != "") && (s.TLSCA == "" || s.TLSCert == "" || s.TLSKey == ""):
		return usagef("node: mutual TLS between members needs -tls-ca, -tls-cert and -tls-key")
	case (s.HTTPCert == "") != (s.HTTPKey == ""):
		return usagef("node: -http-cert and -http-key go together")
	case s.HTTPToken != "" && s.HTTPTokenFile != "":
		return usagef("node: the HTTP token (%s or %s) and -http-token-file: give one", settingEnv(httpTokenKey), httpTokenKey)
	case s.TLSReloadInterval < 0:
		return usagef("node: durations must not be negative")
	}
	if s.HTTPToken != "" {
		if err := httpauth.CheckToken(s.HTTPToken); err != nil {
			return usagef("node: the HTTP token (%s or %s): %v", settingEnv(httpTokenKey), httpTokenKey, err)
		}
	}
	if _, err := parseLogLevel(s.LogLevel); err != nil {
		return usagef("node: -log-level: %v", err)
	}
	return s.checkEtcdAccess("node")
}

// checkEtcdAccess checks the settings that secure the connection to etcd
// (its TLS files and the login), which "convoy node" and "convoy status"
// share; cmd names the command in the usage errors.
func (s nodeSettings) checkEtcdAccess(cmd string) error {
	switch {
	case (s.EtcdCert == "") != (s.EtcdKey == ""):
		return usagef("%s: -etcd-cert and -etcd-key go together", cmd)
	case s.EtcdPassword != "" && s.EtcdPasswordFile != "":
		return usagef("%s: -etcd-password and -etcd-password-file: give one", cmd)
	case (s.EtcdUsername == "") != (s.EtcdPassword == "" && s.EtcdPasswordFile == ""):
		return usagef("%s: -etcd-username and its password (-etcd-password or -etcd-password-file) go together", cmd)
	}
	return nil
}

// Services a node runs.
const (
	appKV     = "kv"
	appLog    = "log"
	appPubSub = "pubsub"
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

// etcdLogin returns the user and password to log in to etcd with, both
// empty without a login: the password from EtcdPasswordFile if set.
func (s nodeSettings) etcdLogin() (user, password string, err error) {
	password = s.EtcdPassword
	if s.EtcdPasswordFile != "" {
		if password, err = readSecretFile(s.EtcdPasswordFile); err != nil {
			return "", "", fmt.Errorf("etcd password: %w", err)
		}
	}
	return s.EtcdUsername, password, nil
}

// httpToken returns the bearer token the API requires, "" for none: the
// one in HTTPTokenFile if set.
func (s nodeSettings) httpToken() (string, error) {
	token := s.HTTPToken
	if s.HTTPTokenFile != "" {
		var err error
		if token, err = readSecretFile(s.HTTPTokenFile); err != nil {
			return "", fmt.Errorf("HTTP token: %w", err)
		}
	}
	if token == "" {
		return "", nil
	}
	if err := httpauth.CheckToken(token); err != nil {
		return "", fmt.Errorf("HTTP token: %w", err)
	}
	return token, nil
}

// readSecretFile returns the first line of the file at path, without
// its line ending; it must not be empty.
func readSecretFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	if line = strings.TrimSuffix(line, "\r"); line == "" {
		return "", fmt.Errorf("%s: the first line is empty", path)
	}
	return line, nil
}

// tlsFiles opens the certificate files of mutual TLS between members
// (TLSCert, TLSKey, TLSCA) and of the HTTP API (HTTPCert, HTTPKey,
// HTTPCA); either is nil if none of its files is set.
func (s nodeSettings) tlsFiles(log *slog.Logger) (member, api *tlsFiles, err error) {
	if s.TLSCA != "" {
		if member, err = openTLSFiles("member TLS", s.TLSCert, s.TLSKey, s.TLSCA, log); err != nil {
			return nil, nil, err
		}
	}
	if s.HTTPCert != "" || s.HTTPCA != "" {
		if api, err = openTLSFiles("HTTP TLS", s.HTTPCert, s.HTTPKey, s.HTTPCA, log); err != nil {
			return nil, nil, err
		}
	}
	return member, api, nil
}

// peersTransport returns the transport of the node's requests to the
// other members' APIs: over TLS, it trusts the CAs of HTTPCA, else of
// TLSCA (as the files read now and later say), else the system's.
func (s nodeSettings) peersTransport(member, api *tlsFiles) *http.Transport {
	switch {
	case s.HTTPCA != "":
		return peersTransport(api.roots)
	case member != nil:
		return peersTransport(member.roots)
	}
	return &http.Transport{}
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

// dialEtcd returns a client of the etcd at endpoints, as the node and
// "convoy status" reach it: with tlsConfig, and logged in as user if set.
// It does not wait for etcd.
func dialEtcd(endpoints []string, tlsConfig *tls.Config, user, password string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsConfig,
		Username:    user,
		Password:    password,
		DialTimeout: etcdDialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}
