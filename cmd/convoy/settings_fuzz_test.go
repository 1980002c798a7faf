package main

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzSettingsFile loads arbitrary bytes as the settings file of "convoy
// node" (-config). A file the loader refuses must give a usage error
// naming the file; settings it accepts must pass through check without a
// panic, and written back as a file (every setting, durations as text)
// must load as the same settings.
func FuzzSettingsFile(f *testing.F) {
	// No variable of a setting may leak in from the environment.
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	defineNodeFlags(fs)
	fs.VisitAll(func(fl *flag.Flag) { f.Setenv(settingEnv(settingKey(fl.Name)), "") })
	f.Setenv(settingEnv(httpTokenKey), "")
	f.Setenv(nodeConfigEnv, "")
	path := filepath.Join(f.TempDir(), "node.json")
	load := func(t *testing.T, content []byte) (nodeSettings, error) {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return loadNodeSettings([]string{"-config", path}, &cli{stderr: &strings.Builder{}})
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		s, err := load(t, content)
		if err != nil {
			if ue := (*usageError)(nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), path) {
				t.Fatalf("refused with %v, want a usage error naming the file", err)
			}
			return
		}
		_ = s.check()
		again, err := load(t, settingsFile(t, s))
		if err != nil {
			t.Fatalf("settings %+v, written back as a file, do not load: %v", s, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("settings %+v, written back as a file, load as %+v", s, again)
		}
	})
}

// settingsFile returns s as a settings file: every setting, durations
// as text.
func settingsFile(t *testing.T, s nodeSettings) []byte {
	m := make(map[string]any)
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		switch x := v.Field(i).Interface().(type) {
		case time.Duration:
			m[key] = x.String()
		default:
			m[key] = x
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
