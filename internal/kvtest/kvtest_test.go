package kvtest

import (
	"bytes"
	"io"
	"testing"
)

func TestSnapshotRestore(t *testing.T) {
	a := New()
	for _, p := range []string{"set a 1", "set b 2", "junk", "set a 3", "set c"} {
		a.Apply([]byte(p))
	}
	if v, ok := a.Get("a"); !ok || v != "3" {
		t.Fatalf("a = %q, %v", v, ok)
	}
	if _, ok := a.Get("c"); ok {
		t.Fatal("a malformed payload was applied")
	}
	for of := 1; of <= 4; of++ {
		var parts []io.Reader
		for part := range of {
			var buf bytes.Buffer
			if err := a.Snapshot(&buf, part, of); err != nil {
				t.Fatal(err)
			}
			parts = append(parts, &buf)
		}
		var restored map[string]string
		b := New()
		b.OnRestore = func(m map[string]string) { restored = m }
		b.Apply([]byte("set stale x"))
		if err := b.Restore(parts); err != nil {
			t.Fatal(err)
		}
		sa, na := a.Checksum()
		sb, nb := b.Checksum()
		if sa != sb || na != nb || na != 2 || len(restored) != 2 {
			t.Fatalf("%d parts: %s/%d restored as %s/%d (%v)", of, sa, na, sb, nb, restored)
		}
	}
	if err := New().Restore([]io.Reader{bytes.NewReader([]byte("nospace\n"))}); err == nil {
		t.Fatal("a bad line restored")
	}
}
