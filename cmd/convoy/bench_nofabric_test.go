//go:build !fabric

package main

import (
	"strings"
	"testing"
)

// Without the fabric build tag, -transport fabric is refused with the way
// to get it.
func TestBenchMulticastFabricUnavailable(t *testing.T) {
	code, _, errOut := runCommand(t, &cli{}, "bench", "multicast", "-transport", "fabric")
	if code != 2 || !strings.Contains(errOut, "-tags fabric") {
		t.Fatalf("exit status %d, stderr:\n%s\nwant a usage error naming -tags fabric", code, errOut)
	}
}
