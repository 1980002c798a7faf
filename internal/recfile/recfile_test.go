package recfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFile: Write puts what was added before it and its own record in
// the file before it returns; the writer writes out what Add buffered;
// Close writes out the rest.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	f, err := Open(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	f.Add(map[string]int{"a": 1})
	if got := read(); got != "" {
		t.Fatalf("after Add: %q, want nothing yet", got)
	}
	f.Write(map[string]int{"b": 2})
	if got, want := read(), "{\"a\":1}\n{\"b\":2}\n"; got != want {
		t.Fatalf("after Write: %q, want %q", got, want)
	}
	f.Add("c")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.HasSuffix(got, "\"c\"\n") {
		t.Fatalf("after Close: %q, want it to end with the last record", got)
	}

	// The writer writes out within its interval.
	f, err = Open(path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Add("d")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(read(), "\"d\"\n") {
		if time.Now().After(deadline) {
			t.Fatal("a record added was not written out")
		}
		time.Sleep(time.Millisecond)
	}
}
