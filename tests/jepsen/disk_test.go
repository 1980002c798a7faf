package jepsen

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// The disks of the members a schedule fills (schedule.DiskFull) are
// tmpfs mounts of diskSize, one per member, each holding the member's
// data directory and, while the disk is full, a filler file that takes
// every free byte. diskSize is below Pebble's WAL preallocation (110% of
// the durable log's 64 MiB memtable), which therefore fails and leaves
// the WAL to take its pages as it grows: once the filler holds them all,
// the member's next write to its log fails.
const (
	diskSize = 32 << 20
	// fillerName is the filler's name in the disk's root.
	fillerName = "filler"
	// refill is how often a full disk is filled again, in case the
	// member freed some of it (Pebble deleting an obsolete file).
	refill = 100 * time.Millisecond
)

// filledMembers lists the members whose disk schedule s fills.
func filledMembers(s schedule.Schedule) []int {
	var out []int
	for _, st := range s.Steps {
		if st.Kind != schedule.DiskFull {
			continue
		}
		for _, m := range st.Members {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// checkDisks says why this process cannot give members disks that a
// schedule fills, or nil if it can: it mounts a tmpfs and unmounts it.
// It first unmounts the disks that campaigns whose process died left
// behind.
func checkDisks() error {
	if os.Geteuid() != 0 {
		return errors.New("not root: mounting a tmpfs needs root")
	}
	removeLeftoverDisks()
	dir, err := os.MkdirTemp("", "convoy-jepsen-disk-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	source, err := diskSource(0)
	if err != nil {
		return err
	}
	if err := syscall.Mount(source, dir, "tmpfs", 0, "size=1m"); err != nil {
		return fmt.Errorf("mount -t tmpfs: %w", err)
	}
	return syscall.Unmount(dir, 0)
}

// diskSource returns the source name of member id's tmpfs: the
// campaign's prefix, this process's id and a random run id (see
// leftover), so that a later campaign finds it if this one dies.
func diskSource(id int) (string, error) {
	run := make([]byte, 3)
	if _, err := rand.Read(run); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s%dx%s-disk%d", namespacePrefix, os.Getpid(), hex.EncodeToString(run), id), nil
}

// removeLeftoverDisks unmounts the tmpfs disks of campaigns whose
// process has died without unmounting them (killed by a test timeout,
// say).
func removeLeftoverDisks() {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != "tmpfs" {
			continue
		}
		m := leftover.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		if pid, err := strconv.Atoi(m[1]); err != nil || pid == os.Getpid() || processExists(pid) {
			continue
		}
		// /proc/self/mounts writes a space in a path as \040.
		target := strings.ReplaceAll(fields[1], `\040`, " ")
		_ = syscall.Unmount(target, syscall.MNT_DETACH)
	}
}

// mountDisks mounts the disk of every member that has one.
func (c *cluster) mountDisks() error {
	for _, m := range c.members {
		if m.disk == "" {
			continue
		}
		source, err := diskSource(m.id)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(m.disk, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(source, m.disk, "tmpfs", 0, fmt.Sprintf("size=%d", diskSize)); err != nil {
			return fmt.Errorf("member %d: mount -t tmpfs %s: %w", m.id, m.disk, err)
		}
		c.mounted = append(c.mounted, m.disk)
		c.tl.add("member %d: data directory on a tmpfs of %d MiB (%s)", m.id, diskSize>>20, source)
	}
	return nil
}

// unmountDisks stops every filler and unmounts every disk mounted; the
// members' processes must be gone. A disk still busy is detached, to go
// once it is not.
func (c *cluster) unmountDisks() {
	for _, m := range c.members {
		if m.filler != nil {
			m.filler.stop()
			m.filler = nil
		}
	}
	for _, dir := range c.mounted {
		if err := syscall.Unmount(dir, 0); err != nil {
			c.tl.add("unmounting %s: %v; detaching it", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	}
	c.mounted = nil
}

// fillDisk fills member m's disk and keeps it full until freeDisk.
func (c *cluster) fillDisk(m *member) error {
	if m.disk == "" {
		return fmt.Errorf("member %d has no disk of its own to fill", m.id)
	}
	f, err := startFiller(filepath.Join(m.disk, fillerName))
	if err != nil {
		return fmt.Errorf("member %d: filling its disk: %w", m.id, err)
	}
	m.filler, m.full = f, true
	c.tl.add("member %d: disk full (a filler of %d bytes)", m.id, f.size)
	return nil
}

// freeDisk removes the filler of member m's disk.
func (c *cluster) freeDisk(m *member) error {
	if m.filler == nil {
		return nil
	}
	m.filler.stop()
	m.filler, m.full = nil, false
	if err := os.Remove(filepath.Join(m.disk, fillerName)); err != nil {
		return fmt.Errorf("member %d: freeing its disk: %w", m.id, err)
	}
	c.tl.add("member %d: disk freed", m.id)
	return nil
}

// filler keeps a disk full: it writes to a file until the disk has no
// byte left, and again every refill.
type filler struct {
	f    *os.File
	size int64 // written by the first fill
	quit chan struct{}
	done chan struct{}
}

func startFiller(path string) (*filler, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fl := &filler{f: f, quit: make(chan struct{}), done: make(chan struct{})}
	if fl.size, err = fill(f); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		defer close(fl.done)
		t := time.NewTicker(refill)
		defer t.Stop()
		for {
			select {
			case <-fl.quit:
				return
			case <-t.C:
				_, _ = fill(f)
			}
		}
	}()
	return fl, nil
}

// stop ends the refills and closes the file.
func (fl *filler) stop() {
	close(fl.quit)
	<-fl.done
	fl.f.Close()
}

// fill writes to f until its file system has no room for another byte,
// and returns how many bytes it wrote.
func fill(f *os.File) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for size := len(buf); size > 0; {
		k, err := f.Write(buf[:size])
		n += int64(k)
		switch {
		case errors.Is(err, syscall.ENOSPC):
			size /= 2
		case err != nil:
			return n, err
		}
	}
	return n, nil
}
