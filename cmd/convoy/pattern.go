package main

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// castagnoli is the CRC-32C table; it is computed once and only read.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// patternWord returns the i-th 8-byte word of the pattern for seed: a
// splitmix64 output, so that every offset of every trial differs.
func patternWord(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillPattern fills b with the pattern for seed.
func fillPattern(b []byte, seed uint64) {
	full := len(b) &^ 7
	for off := 0; off < full; off += 8 {
		binary.LittleEndian.PutUint64(b[off:], patternWord(seed, uint64(off/8)))
	}
	if full < len(b) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], patternWord(seed, uint64(full/8)))
		copy(b[full:], w[:])
	}
}

// checkPattern reports the first byte of b that differs from the pattern
// for seed.
func checkPattern(b []byte, seed uint64) error {
	full := len(b) &^ 7
	for off := 0; off < full; off += 8 {
		if binary.LittleEndian.Uint64(b[off:]) != patternWord(seed, uint64(off/8)) {
			return patternMismatch(b, seed, off)
		}
	}
	if full < len(b) {
		return patternMismatch(b, seed, full)
	}
	return nil
}

// patternMismatch compares the word of b at off byte by byte and describes
// the first difference, or returns nil if there is none.
func patternMismatch(b []byte, seed uint64, off int) error {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], patternWord(seed, uint64(off/8)))
	for j, got := range b[off:min(off+8, len(b))] {
		if got != w[j] {
			return fmt.Errorf("content differs from the message sent at byte %d of %d (got %#02x, want %#02x)", off+j, len(b), got, w[j])
		}
	}
	return nil
}

// checksum is the CRC-32C of b.
func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
