package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// FuzzTLSFiles reads arbitrary bytes as a node's certificate, key and CA
// files, first as they are at start, then as they change: the node must
// refuse files that cannot be used with an error (at start) or keep
// those in use (on a change), never panic; and files it took up must
// give the certificate and CA bundle they hold.
func FuzzTLSFiles(f *testing.F) {
	dir := f.TempDir()
	cert, key, ca := filepath.Join(dir, "member.crt"), filepath.Join(dir, "member.key"), filepath.Join(dir, "ca.crt")
	write := func(t *testing.T, c, k, a []byte) {
		for path, data := range map[string][]byte{cert: c, key: k, ca: a} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Fuzz(func(t *testing.T, c, k, a, c2 []byte) {
		write(t, c, k, a)
		files, err := openTLSFiles("member TLS", cert, key, ca, slog.New(slog.DiscardHandler))
		if err != nil {
			return
		}
		check := func() {
			t.Helper()
			got, err := files.certificate()
			if err != nil || got == nil || len(got.Certificate) == 0 || files.roots() == nil {
				t.Fatalf("files taken up hold certificate %v (%v), roots %v", got, err, files.roots())
			}
		}
		check()
		if files.reload() {
			t.Fatal("files read again though they did not change")
		}
		before := files.cur.Load()
		write(t, c2, k, a)
		if !files.reload() && files.cur.Load() != before {
			t.Fatal("files that cannot be used replaced those in use")
		}
		check()
	})
}
