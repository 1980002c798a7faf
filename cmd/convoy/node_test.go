package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNodeSettingsPrecedence checks where each setting of "convoy node"
// comes from: a flag overrides the environment, which overrides the
// settings file, which overrides the defaults.
func TestNodeSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "node.json")
	if err := os.WriteFile(file, []byte(`{
		"id": 1, "app": "kv", "etcd": ["http://file:2379", "http://file2:2379"],
		"http": "127.0.0.1:7001", "prefix": "/file/", "data": "/data/file",
		"heartbeat": "20ms", "suspect_timeout": "300ms", "initial": 3,
		"clock_offset": "-1.5s", "clock_drift_ppm": 2000
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile := defaultNodeSettings()
	fromFile.ID, fromFile.App, fromFile.Etcd = 1, "kv", stringList{"http://file:2379", "http://file2:2379"}
	fromFile.HTTP, fromFile.Prefix, fromFile.Data = "127.0.0.1:7001", "/file/", "/data/file"
	fromFile.Heartbeat, fromFile.SuspectTimeout, fromFile.Initial = duration(20*time.Millisecond), duration(300*time.Millisecond), 3
	fromFile.ClockOffset, fromFile.ClockDriftPPM = duration(-1500*time.Millisecond), 2000

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
			name: "environment over file",
			args: []string{"-config", file},
			env:  map[string]string{"CONVOY_HTTP": "127.0.0.1:7002", "CONVOY_SUSPECT_TIMEOUT": "1s", "CONVOY_ETCD": "http://env:2379"},
			check: func(s *nodeSettings) {
				s.HTTP, s.SuspectTimeout, s.Etcd = "127.0.0.1:7002", duration(time.Second), stringList{"http://env:2379"}
			},
		},
		{
			name: "flags over environment over file",
			args: []string{"-config", file, "-http", "127.0.0.1:7003", "-id", "9", "-log-level", "debug", "-clock-offset", "2s"},
			env:  map[string]string{"CONVOY_HTTP": "127.0.0.1:7002", "CONVOY_ID": "5", "CONVOY_PREFIX": "/env/", "CONVOY_CLOCK_DRIFT_PPM": "-300"},
			check: func(s *nodeSettings) {
				s.HTTP, s.ID, s.Prefix, s.LogLevel = "127.0.0.1:7003", 9, "/env/", "debug"
				s.ClockOffset, s.ClockDriftPPM = duration(2*time.Second), -300
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
				*s = defaultNodeSettings()
				s.ID, s.App, s.Data, s.Etcd = 2, "log", "/d", stringList{"http://a:2379", "http://b:2379"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := fromFile
			tc.check(&want)
			got, err := loadNodeSettings(tc.args, func(k string) string { return tc.env[k] }, &cli{stderr: &strings.Builder{}})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("settings\n got %+v\nwant %+v", got, want)
			}
			if err := got.check(); err != nil {
				t.Errorf("check: %v", err)
			}
		})
	}
}

// TestNodeSettingsErrors checks that bad settings are refused with a
// usage error naming the problem, wherever they come from.
func TestNodeSettingsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	unknown := write("unknown.json", `{"id": 1, "colour": "blue"}`)
	badDuration := write("bad.json", `{"heartbeat": "soon"}`)
	ok := []string{"-id", "1", "-app", "kv", "-etcd", "http://e:2379", "-data", "/d"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"-id", "1", "-app", "kv", "-data", "/d"}, want: "-etcd is required"},
		{args: []string{"-id", "1", "-app", "queue", "-etcd", "http://e:2379", "-data", "/d"}, want: `-app must be kv or log, not "queue"`},
		{args: []string{"-app", "kv", "-etcd", "http://e:2379", "-data", "/d"}, want: "-id is required"},
		{args: []string{"-id", "1", "-app", "kv", "-etcd", "http://e:2379"}, want: "-data is required"},
		{args: slices.Concat(ok, []string{"-prefix", "/p"}), want: "must end in /"},
		{args: slices.Concat(ok, []string{"-tls-ca", "ca.pem"}), want: "-tls-ca, -tls-cert and -tls-key"},
		{args: slices.Concat(ok, []string{"-etcd-cert", "c.pem"}), want: "-etcd-cert and -etcd-key go together"},
		{args: slices.Concat(ok, []string{"-log-level", "loud"}), want: "-log-level"},
		{args: slices.Concat(ok, []string{"-id", "x"}), want: `-id: not an id: "x"`},
		{args: ok, env: map[string]string{"CONVOY_HEARTBEAT": "often"}, want: `CONVOY_HEARTBEAT: not a duration: "often"`},
		{args: slices.Concat(ok, []string{"-config", unknown}), want: `unknown field "colour"`},
		{args: slices.Concat(ok, []string{"-config", badDuration}), want: "heartbeat"},
		{args: slices.Concat(ok, []string{"-config", filepath.Join(dir, "missing.json")}), want: "no such file"},
		{args: slices.Concat(ok, []string{"extra"}), want: "unexpected arguments"},
		{args: slices.Concat(ok, []string{"-clock-offset", "25h"}), want: "-clock-offset 25h0m0s is beyond"},
		{args: slices.Concat(ok, []string{"-clock-drift-ppm", "-600000"}), want: "-clock-drift-ppm -600000 is beyond"},
		{args: ok, env: map[string]string{"CONVOY_CLOCK_DRIFT_PPM": "fast"}, want: `CONVOY_CLOCK_DRIFT_PPM: not a whole number`},
	} {
		s, err := loadNodeSettings(tc.args, func(k string) string { return tc.env[k] }, &cli{stderr: &strings.Builder{}})
		if err == nil {
			err = s.check()
		}
		var ue *usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
			t.Errorf("%q %v: error %v, want a usage error with %q", tc.args, tc.env, err, tc.want)
		}
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
