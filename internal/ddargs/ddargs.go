// Package ddargs reads the arguments of datadriven test commands: numbers,
// lists of numbers, durations, and members written ID or ID.incarnation.
// Each function fails the test on an argument it cannot read.
package ddargs

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Member reads ID or ID.incarnation (incarnation 1 by default).
func Member(t testing.TB, s string) (id, incarnation uint64) {
	t.Helper()
	ids, incs, ok := strings.Cut(s, ".")
	if !ok {
		incs = "1"
	}
	id, err1 := strconv.ParseUint(ids, 10, 64)
	incarnation, err2 := strconv.ParseUint(incs, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("member %q: %v", s, err)
	}
	return id, incarnation
}

// Members reads every value of the arguments named key (members=(1,2.2))
// as members, made by mk.
func Members[M any](t testing.TB, td *datadriven.TestData, key string, mk func(id, incarnation uint64) M) []M {
	t.Helper()
	var out []M
	for _, a := range td.CmdArgs {
		if a.Key == key {
			for _, v := range a.Vals {
				out = append(out, mk(Member(t, v)))
			}
		}
	}
	return out
}

// Uints reads every value of the arguments named key (sent=(5,6,7)).
func Uints(t testing.TB, td *datadriven.TestData, key string) []uint64 {
	t.Helper()
	var out []uint64
	for _, a := range td.CmdArgs {
		if a.Key == key {
			for _, v := range a.Vals {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %s: %v", td.Pos, key, err)
				}
				out = append(out, n)
			}
		}
	}
	return out
}

// Uint reads the first value of the argument named key, or def without
// one.
func Uint(t testing.TB, td *datadriven.TestData, key string, def uint64) uint64 {
	t.Helper()
	if vs := Uints(t, td, key); len(vs) > 0 {
		return vs[0]
	}
	return def
}

// Duration reads the argument named key as a Go duration, or def without
// one; key "" takes the first bare argument (advance 30ms).
func Duration(t testing.TB, td *datadriven.TestData, key string, def time.Duration) time.Duration {
	t.Helper()
	for _, a := range td.CmdArgs {
		s := ""
		switch {
		case key == "" && len(a.Vals) == 0:
			s = a.Key
		case key != "" && a.Key == key && len(a.Vals) > 0:
			s = a.Vals[0]
		default:
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", td.Pos, err)
		}
		return d
	}
	return def
}
