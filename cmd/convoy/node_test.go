package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// loadTestSettings loads the settings of "convoy node" from args and the
// variables in env. Every other variable of a setting is set empty, which
// the loader takes as unset, so that the environment the test runs in
// does not leak in.
func loadTestSettings(t *testing.T, args []string, env map[string]string) (nodeSettings, error) {
	t.Helper()
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	defineNodeFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { t.Setenv(settingEnv(settingKey(f.Name)), "") })
	t.Setenv(settingEnv(httpTokenKey), "")
	t.Setenv(nodeConfigEnv, "")
	for k, v := range env {
		t.Setenv(k, v)
	}
	return loadNodeSettings(args, &cli{stderr: &strings.Builder{}})
}

// writeTestFile writes content to a new file and returns its path.
func writeTestFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// defaultTestSettings returns the settings of "convoy node" given
// nothing.
func defaultTestSettings() nodeSettings {
	return nodeSettings{
		Listen:   "127.0.0.1:0",
		HTTP:     "127.0.0.1:0",
		Prefix:   "/convoy/",
		Initial:  1,
		LogLevel: "info",
		// TLSReloadInterval is 10s.
		TLSReloadInterval: 10 * time.Second,
	}
}

// TestNodeSettingsDefaults checks the settings given nothing.
func TestNodeSettingsDefaults(t *testing.T) {
	got, err := loadTestSettings(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := defaultTestSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("settings\n got %+v\nwant %+v", got, want)
	}
}

// TestNodeSettingsPrecedence checks, for a setting of each type, that the
// file overrides the default, a variable the file, and a flag the
// variable.
func TestNodeSettingsPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string // the JSON key; the flag and the variable are named after it
		file string // the value in the file, in JSON
		env  string // the value of the variable
		flag string // the value of the flag
		get  func(nodeSettings) any
		// want holds the setting from the default alone, then with the
		// file, the variable and the flag added in turn.
		want [4]any
	}{
		{
			name: "duration", key: "suspect_timeout", file: `"300ms"`, env: "1s", flag: "1m30s",
			get:  func(s nodeSettings) any { return s.SuspectTimeout },
			want: [4]any{time.Duration(0), 300 * time.Millisecond, time.Second, 90 * time.Second},
		},
		{
			name: "negative duration", key: "clock_offset", file: `"-1.5s"`, env: "-2s", flag: "250ms",
			get:  func(s nodeSettings) any { return s.ClockOffset },
			want: [4]any{time.Duration(0), -1500 * time.Millisecond, -2 * time.Second, 250 * time.Millisecond},
		},
		{
			name: "list", key: "etcd", file: `["http://f1:2379", "http://f2:2379"]`, env: "http://e1:2379, http://e2:2379", flag: "http://g:2379",
			get: func(s nodeSettings) any { return s.Etcd },
			want: [4]any{
				[]string(nil),
				[]string{"http://f1:2379", "http://f2:2379"},
				[]string{"http://e1:2379", "http://e2:2379"},
				[]string{"http://g:2379"},
			},
		},
		{
			// The flag gives the default: given, it still counts.
			name: "int", key: "initial", file: `3`, env: "4", flag: "1",
			get:  func(s nodeSettings) any { return s.Initial },
			want: [4]any{1, 3, 4, 1},
		},
		{
			name: "negative int", key: "clock_drift_ppm", file: `-20`, env: "300", flag: "-400",
			get:  func(s nodeSettings) any { return s.ClockDriftPPM },
			want: [4]any{0, -20, 300, -400},
		},
		{
			name: "id", key: "id", file: `7`, env: "8", flag: "9",
			get:  func(s nodeSettings) any { return s.ID },
			want: [4]any{uint64(0), uint64(7), uint64(8), uint64(9)},
		},
		{
			name: "string", key: "prefix", file: `"/file/"`, env: "/env/", flag: "/flag/",
			get:  func(s nodeSettings) any { return s.Prefix },
			want: [4]any{"/convoy/", "/file/", "/env/", "/flag/"},
		},
		{
			name: "string named by two words", key: "http_url", file: `"http://file"`, env: "http://env", flag: "http://flag",
			get:  func(s nodeSettings) any { return s.HTTPURL },
			want: [4]any{"", "http://file", "http://env", "http://flag"},
		},
	} {
		for n, source := range []string{"default", "file", "environment", "flag"} {
			t.Run(tc.name+"/"+source, func(t *testing.T) {
				var args []string
				env := make(map[string]string)
				if n >= 1 {
					args = append(args, "-config", writeTestFile(t, fmt.Sprintf(`{%q: %s}`, tc.key, tc.file)))
				}
				if n >= 2 {
					env[settingEnv(tc.key)] = tc.env
				}
				if n >= 3 {
					args = append(args, "-"+strings.ReplaceAll(tc.key, "_", "-"), tc.flag)
				}
				s, err := loadTestSettings(t, args, env)
				if err != nil {
					t.Fatal(err)
				}
				if got := tc.get(s); !reflect.DeepEqual(got, tc.want[n]) {
					t.Errorf("%s %q, env %v: got %#v, want %#v", tc.key, args, env, got, tc.want[n])
				}
			})
		}
	}
}

// TestNodeSettingsSources checks settings from several sources at once,
// and the other ways of naming the file and of writing values.
func TestNodeSettingsSources(t *testing.T) {
	file := writeTestFile(t, `{
		"id": 1, "app": "kv", "etcd": ["http://file:2379", "http://file2:2379"],
		"http": "127.0.0.1:7001", "prefix": "/file/", "data": "/data/file",
		"heartbeat": "20ms", "suspect_timeout": "300ms", "initial": 3,
		"clock_offset": "-1.5s", "clock_drift_ppm": 2000
	}`)
	fromFile := defaultTestSettings()
	fromFile.ID, fromFile.App, fromFile.Etcd = 1, "kv", []string{"http://file:2379", "http://file2:2379"}
	fromFile.HTTP, fromFile.Prefix, fromFile.Data = "127.0.0.1:7001", "/file/", "/data/file"
	fromFile.Heartbeat, fromFile.SuspectTimeout, fromFile.Initial = 20*time.Millisecond, 300*time.Millisecond, 3
	fromFile.ClockOffset, fromFile.ClockDriftPPM = -1500*time.Millisecond, 2000

	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		check func(s *nodeSettings) // turns the file's settings into the expected ones
	}{
		{
			name:  "file only",
			args:  []string{"-config", file},
			check: func(s *nodeSettings) {},
		},
		{
			name:  "the file named by CONVOY_CONFIG",
			env:   map[string]string{"CONVOY_CONFIG": file},
			check: func(s *nodeSettings) {},
		},
		{
			name:  "-config over CONVOY_CONFIG",
			args:  []string{"-config", file},
			env:   map[string]string{"CONVOY_CONFIG": filepath.Join(t.TempDir(), "missing.json")},
			check: func(s *nodeSettings) {},
		},
		{
			name: "environment over file",
			args: []string{"-config", file},
			env:  map[string]string{"CONVOY_HTTP": "127.0.0.1:7002", "CONVOY_SUSPECT_TIMEOUT": "1s", "CONVOY_ETCD": "http://env:2379"},
			check: func(s *nodeSettings) {
				s.HTTP, s.SuspectTimeout, s.Etcd = "127.0.0.1:7002", time.Second, []string{"http://env:2379"}
			},
		},
		{
			name: "an etcd login, the password from the environment",
			args: []string{"-config", file, "-etcd-username", "convoy"},
			env:  map[string]string{"CONVOY_ETCD_PASSWORD": "secret"},
			check: func(s *nodeSettings) {
				s.EtcdUsername, s.EtcdPassword = "convoy", "secret"
			},
		},
		{
			name: "the HTTP token, from the environment: it has no flag",
			args: []string{"-config", file, "-http-cert", "api.crt", "-http-key", "api.key"},
			env:  map[string]string{"CONVOY_HTTP_TOKEN": "s3cret", "CONVOY_TLS_RELOAD_INTERVAL": "1s"},
			check: func(s *nodeSettings) {
				s.HTTPToken, s.HTTPCert, s.HTTPKey, s.TLSReloadInterval = "s3cret", "api.crt", "api.key", time.Second
			},
		},
		{
			name:  "an empty variable is unset; others are not settings",
			args:  []string{"-config", file},
			env:   map[string]string{"CONVOY_HTTP": "", "CONVOY_ETCD": "", "CONVOY_TEST_LOG": "debug", "CONVOY_app": "log"},
			check: func(s *nodeSettings) {},
		},
		{
			name: "flags over environment over file",
			args: []string{"-config", file, "-http", "127.0.0.1:7003", "-id", "9", "-log-level", "debug", "-clock-offset", "2s"},
			env:  map[string]string{"CONVOY_HTTP": "127.0.0.1:7002", "CONVOY_ID": "5", "CONVOY_PREFIX": "/env/", "CONVOY_CLOCK_DRIFT_PPM": "-300"},
			check: func(s *nodeSettings) {
				s.HTTP, s.ID, s.Prefix, s.LogLevel = "127.0.0.1:7003", 9, "/env/", "debug"
				s.ClockOffset, s.ClockDriftPPM = 2*time.Second, -300
			},
		},
		{
			name: "a flag given twice: the last counts",
			args: []string{"-config", file, "-app", "kv", "-app", "log"},
			check: func(s *nodeSettings) {
				s.App = "log"
			},
		},
		{
			name: "no file: defaults, environment, flags",
			args: []string{"-etcd", "http://a:2379,http://b:2379", "-data", "/d"},
			env:  map[string]string{"CONVOY_ID": "2", "CONVOY_APP": "log", "CONVOY_DATA": "/env"},
			check: func(s *nodeSettings) {
				*s = defaultTestSettings()
				s.ID, s.App, s.Data, s.Etcd = 2, "log", "/d", []string{"http://a:2379", "http://b:2379"}
			},
		},
		{
			name: "a list as one string and a duration in nanoseconds in the file",
			args: []string{"-config", writeTestFile(t, `{"etcd": "http://a:2379, http://b:2379", "lease_ttl": 2000000000}`)},
			check: func(s *nodeSettings) {
				*s = defaultTestSettings()
				s.Etcd, s.LeaseTTL = []string{"http://a:2379", "http://b:2379"}, 2*time.Second
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := fromFile
			tc.check(&want)
			got, err := loadTestSettings(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("settings\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestNodeSettingsErrors checks that bad settings are refused with a
// usage error naming the setting and where it came from.
func TestNodeSettingsErrors(t *testing.T) {
	ok := []string{"-id", "1", "-app", "kv", "-etcd", "http://e:2379", "-data", "/d"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		file string // the settings file, if any: the error must name it
		want string
	}{
		// The file.
		{file: `{"id": 1, "colour": "blue"}`, want: `unknown key "colour"`},
		{file: `{"tls": {"ca": "ca.pem"}}`, want: `unknown key "tls.ca"`},
		{file: `{"config": "other.json"}`, want: `unknown key "config"`},
		{file: `{"heartbeat": "soon"}`, want: `heartbeat "soon": time: invalid duration`},
		{file: `{"initial": "3"}`, want: `initial "3": expected type 'int'`},
		{file: `{"initial": 1.5}`, want: "initial: want a whole number below 2^53, not 1.5"},
		{file: `{"id": 9007199254740993}`, want: "id: want a whole number below 2^53"},
		{file: `{"id": -1}`, want: "id: cannot parse"},
		{file: `{"etcd": ["http://e:2379", 5]}`, want: "etcd[1]: expected type 'string'"},
		{file: `{"data": ["/a", "/b"]}`, want: "data: expected type 'string'"},
		{file: `{"id": 1,}`, want: "invalid character"},
		{args: slices.Concat(ok, []string{"-config", filepath.Join(t.TempDir(), "missing.json")}), want: "no such file"},
		// The environment.
		{args: ok, env: map[string]string{"CONVOY_HEARTBEAT": "often"}, want: `CONVOY_HEARTBEAT "often": time: invalid duration`},
		{args: ok, env: map[string]string{"CONVOY_CLOCK_DRIFT_PPM": "fast"}, want: `CONVOY_CLOCK_DRIFT_PPM "fast": cannot parse`},
		{args: ok, env: map[string]string{"CONVOY_ID": "-1"}, want: `CONVOY_ID "-1": cannot parse`},
		// Flags.
		{args: slices.Concat(ok, []string{"-id", "x"}), want: `invalid value "x" for flag -id`},
		{args: slices.Concat(ok, []string{"-lease-ttl", "5"}), want: `invalid value "5" for flag -lease-ttl`},
		{args: slices.Concat(ok, []string{"-colour", "blue"}), want: "flag provided but not defined: -colour"},
		{args: slices.Concat(ok, []string{"extra"}), want: "unexpected arguments"},
		// Validation.
		{args: []string{"-id", "1", "-app", "kv", "-data", "/d"}, want: "-etcd is required"},
		{args: []string{"-id", "1", "-app", "queue", "-etcd", "http://e:2379", "-data", "/d"}, want: `-app must be kv, log or pubsub, not "queue"`},
		{args: []string{"-app", "kv", "-etcd", "http://e:2379", "-data", "/d"}, want: "-id is required"},
		{args: []string{"-id", "1", "-app", "kv", "-etcd", "http://e:2379"}, want: "-data is required"},
		{args: slices.Concat(ok, []string{"-prefix", "/p"}), want: "must end in /"},
		{args: slices.Concat(ok, []string{"-tls-ca", "ca.pem"}), want: "-tls-ca, -tls-cert and -tls-key"},
		{args: slices.Concat(ok, []string{"-etcd-cert", "c.pem"}), want: "-etcd-cert and -etcd-key go together"},
		{args: slices.Concat(ok, []string{"-etcd-username", "u"}), want: "-etcd-username and its password"},
		{args: slices.Concat(ok, []string{"-etcd-password-file", "pw"}), want: "-etcd-username and its password"},
		{args: ok, env: map[string]string{"CONVOY_ETCD_PASSWORD": "pw"}, want: "-etcd-username and its password"},
		{args: slices.Concat(ok, []string{"-etcd-username", "u", "-etcd-password", "pw", "-etcd-password-file", "pw"}), want: "-etcd-password and -etcd-password-file: give one"},
		{args: slices.Concat(ok, []string{"-log-level", "loud"}), want: "-log-level"},
		{args: slices.Concat(ok, []string{"-clock-offset", "25h"}), want: "-clock-offset 25h0m0s is beyond"},
		{args: slices.Concat(ok, []string{"-clock-drift-ppm", "-600000"}), want: "-clock-drift-ppm -600000 is beyond"},
		{args: ok, env: map[string]string{"CONVOY_HEARTBEAT": "-1s"}, want: "durations must not be negative"},
		{args: slices.Concat(ok, []string{"-tls-reload-interval", "-1s"}), want: "durations must not be negative"},
		{args: slices.Concat(ok, []string{"-http-cert", "c.pem"}), want: "-http-cert and -http-key go together"},
		{args: slices.Concat(ok, []string{"-http-token-file", "t"}), env: map[string]string{"CONVOY_HTTP_TOKEN": "abc"}, want: "the HTTP token (CONVOY_HTTP_TOKEN or http_token) and -http-token-file: give one"},
		{args: ok, env: map[string]string{"CONVOY_HTTP_TOKEN": "a b"}, want: "the HTTP token (CONVOY_HTTP_TOKEN or http_token): httpauth: a token is"},
		{args: slices.Concat(ok, []string{"-config", writeTestFile(t, `{"http_token": "a b"}`)}), want: "http_token): httpauth: a token is"},
		{args: slices.Concat(ok, []string{"-http-token", "abc"}), want: "flag provided but not defined: -http-token"},
		{args: slices.Concat(ok, []string{"-max-conns", "-1"}), want: "must not be negative"},
		{args: slices.Concat(ok, []string{"-window-bytes", "-1"}), want: "must not be negative"},
		{args: []string{"-id", "1", "-app", "log", "-etcd", "http://e:2379", "-data", "/d", "-max-streams", "10"}, want: "-max-streams is the key-value store's and the pub/sub service's"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			args, want := tc.args, tc.want
			if tc.file != "" {
				path := writeTestFile(t, tc.file)
				args = slices.Concat(ok, []string{"-config", path})
				want = "settings file " + path + ": " + tc.want
			}
			s, err := loadTestSettings(t, args, tc.env)
			if err == nil {
				err = s.check()
			}
			var ue *usageError
			if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ue) {
				t.Errorf("%q %v: error %v, want a usage error with %q", args, tc.env, err, want)
			}
		})
	}
}

// TestNodeServiceLimits: the shared log and the pub/sub service take the
// admission limits their options have (-max-value-bytes, -max-requests,
// -max-request-bytes, and for pub/sub -max-streams), and they reach
// their options.
func TestNodeServiceLimits(t *testing.T) {
	args := []string{"-id", "1", "-app", "log", "-etcd", "http://e:2379", "-data", "/d",
		"-max-value-bytes", "1000", "-max-requests", "10", "-max-request-bytes", "4096"}
	s, err := loadTestSettings(t, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	o := s.logOptions(nil)
	if o.MaxValueBytes != 1000 || o.MaxRequests != 10 || o.MaxRequestBytes != 4096 {
		t.Errorf("the log's options %+v, want MaxValueBytes 1000, MaxRequests 10, MaxRequestBytes 4096", o)
	}

	args = []string{"-id", "1", "-app", "pubsub", "-etcd", "http://e:2379", "-data", "/d",
		"-max-value-bytes", "1000", "-max-requests", "10", "-max-request-bytes", "4096", "-max-streams", "3"}
	if s, err = loadTestSettings(t, args, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	po := s.pubsubOptions(nil)
	if po.MaxMessageBytes != 1000 || po.MaxRequests != 10 || po.MaxRequestBytes != 4096 || po.MaxStreams != 3 {
		t.Errorf("the pub/sub service's options %+v, want MaxMessageBytes 1000, MaxRequests 10, MaxRequestBytes 4096, MaxStreams 3", po)
	}
}

// TestNodeFlagsMatchSettings checks that every setting has a flag, and so
// a variable, named after its JSON key, and that every flag but -config
// is a setting.
func TestNodeFlagsMatchSettings(t *testing.T) {
	var fields []string
	for f := range reflect.TypeFor[nodeSettings]().Fields() {
		fields = append(fields, f.Tag.Get("json"))
	}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	defineNodeFlags(fs)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, settingKey(f.Name)) })
	// The token has no flag: it would show in the process list.
	flags = append(flags, httpTokenKey)
	slices.Sort(fields)
	slices.Sort(flags)
	if !slices.Equal(fields, flags) {
		t.Errorf("settings %q\n   flags %q", fields, flags)
	}
}

// TestNodeRefusesWithoutEtcd runs "convoy node" without -etcd: it exits
// with status 2 and says why.
func TestNodeRefusesWithoutEtcd(t *testing.T) {
	code, _, errOut := runCommand(t, &cli{}, "node", "-id", "1", "-app", "log", "-data", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "-etcd is required") {
		t.Errorf("status %d, stderr %q; want 2 and a word about -etcd", code, errOut)
	}
}
