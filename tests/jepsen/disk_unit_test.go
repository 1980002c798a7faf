package jepsen

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mounted says whether dir is a mount point of this process's view.
func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

// free returns the bytes free on dir's file system.
func free(t *testing.T, dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// TestDiskFill: a filled tmpfs refuses the next write with ENOSPC and
// takes writes again once freed; a campaign unmounts the disks that
// one whose process died left behind.
func TestDiskFill(t *testing.T) {
	if err := checkDisks(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	dir := t.TempDir()
	c := &cluster{tl: newTimeline(), members: []*member{{id: 1, disk: filepath.Join(dir, "disk-1")}}}
	m := c.members[0]
	m.dir = filepath.Join(m.disk, "data")
	if err := c.mountDisks(); err != nil {
		t.Fatal(err)
	}
	defer c.unmountDisks()
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(m.dir, "wal")
	f, err := os.Create(data)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("writing to the disk before it is full: %v", err)
	}
	if err := c.fillDisk(m); err != nil {
		t.Fatal(err)
	}
	if m.filler.size < diskSize/2 {
		t.Errorf("the filler took %d bytes of %d", m.filler.size, diskSize)
	}
	if _, err := f.Write(make([]byte, 8<<10)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write to the full disk: %v, want ENOSPC", err)
	}
	// Space the member frees is taken again: all of it, once a refill
	// ended (the filler writes in halving chunks, so while it runs some
	// space is still free).
	f.Close()
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for free(t, m.disk) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes free 10s after the member freed 1 MiB", free(t, m.disk))
		}
		time.Sleep(refill / 2)
	}
	f2, err := os.Create(data + "2")
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if _, err := f2.Write(make([]byte, 8<<10)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write once the filler took back what the member freed: %v, want ENOSPC", err)
	}
	if err := c.freeDisk(m); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("writing to the freed disk: %v", err)
	}
	c.unmountDisks()
	if mounted(t, m.disk) {
		t.Fatalf("%s still mounted", m.disk)
	}

	// A tmpfs named as by a campaign whose process is gone.
	left := filepath.Join(dir, "left")
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(namespacePrefix+"2147483647xabcdef-disk1", left, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	removeLeftoverDisks()
	if mounted(t, left) {
		syscall.Unmount(left, syscall.MNT_DETACH)
		t.Fatal("the leftover tmpfs is still mounted")
	}
}
