package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes parseSize accepts, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// parseSize parses a byte count such as "64MiB", "300KiB", "1GiB" or
// "4096" (bytes). The number must be a positive integer.
func parseSize(s string) (int, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q: want a positive integer with an optional KiB, MiB or GiB suffix", s)
	}
	if n > math.MaxInt/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return int(n * mult), nil
}

// formatSize prints n bytes in the largest binary unit not above it: as a
// whole number if the unit divides it, else with one decimal.
func formatSize(n int) string {
	for _, u := range sizeUnits[:3] {
		switch {
		case int64(n)%u.mult == 0:
			return strconv.FormatInt(int64(n)/u.mult, 10) + u.suffix
		case int64(n) >= u.mult:
			return strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.Itoa(n) + "B"
}

// parseList splits a comma-separated flag value and parses each element.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list %q", s)
	}
	return out, nil
}
