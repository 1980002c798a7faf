// Package kvtest is the tiny replicated map that the tests run as a
// group's state machine: messages "set key value", applied in delivery
// order; snapshots cut by a hash of the key, one "key value" line per
// entry. It implements convoy.StateMachine, and Checkpointing
// convoy.Checkpointer too.
package kvtest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/convoy-gcs/convoy/membership"
)

// Map is the replicated map. Its methods are safe for concurrent use.
type Map struct {
	// OnRestore, if set, receives a copy of every state Restore installs.
	OnRestore func(map[string]string)

	mu sync.Mutex
	m  map[string]string
}

// New returns an empty map.
func New() *Map { return &Map{m: make(map[string]string)} }

// ParseSet splits a payload "set key value".
func ParseSet(p string) (key, value string, ok bool) {
	f := strings.Fields(p)
	if len(f) != 3 || f[0] != "set" {
		return "", "", false
	}
	return f[1], f[2], true
}

// Apply applies one delivered payload; anything but "set key value" is
// ignored.
func (s *Map) Apply(p []byte) {
	if k, v, ok := ParseSet(string(p)); ok {
		s.mu.Lock()
		s.m[k] = v
		s.mu.Unlock()
	}
}

// Get returns the value of key.
func (s *Map) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

// Contents returns a copy of the map.
func (s *Map) Contents() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m)
}

// Checksum returns a hash of the sorted entries and their number.
func (s *Map) Checksum() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(s.m)) {
		fmt.Fprintf(h, "%s=%s\n", k, s.m[k])
	}
	return hex.EncodeToString(h.Sum(nil)), len(s.m)
}

// Snapshot writes the entries of part `part` of `of` as lines.
func (s *Map) Snapshot(w io.Writer, part, of int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return writePart(w, s.m, part, of)
}

// writePart writes the entries of m in part `part` of `of` as lines.
func writePart(w io.Writer, m map[string]string, part, of int) error {
	bw := bufio.NewWriter(w)
	for k, v := range m {
		if int(crc32.ChecksumIEEE([]byte(k))%uint32(of)) == part {
			if _, err := fmt.Fprintf(bw, "%s %s\n", k, v); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// Checkpointing is a Map that is also a convoy.Checkpointer: its
// checkpoints are copies of the map, which its snapshots write while the
// map changes.
type Checkpointing struct{ *Map }

// Checkpoint returns a copy of the map.
func (c Checkpointing) Checkpoint() (membership.StateSnapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return frozen(maps.Clone(c.m)), nil
}

// frozen is a checkpoint of a Map.
type frozen map[string]string

func (f frozen) Snapshot(w io.Writer, part, of int) error { return writePart(w, f, part, of) }
func (f frozen) Release()                                 {}

// Restore replaces the map with the parts' entries.
func (s *Map) Restore(parts []io.Reader) error {
	m := make(map[string]string)
	for _, r := range parts {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				return fmt.Errorf("kvtest: bad snapshot line %q", sc.Text())
			}
			m[k] = v
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	if s.OnRestore != nil {
		s.OnRestore(maps.Clone(m))
	}
	return nil
}
