// Package freeport picks free TCP ports for processes about to be
// started, below the range of ports the system hands out on its own, so
// that a process can stop and start again on the port it had.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Pick returns n distinct ports free on host, held all at once while
// they are picked, for processes started next to bind. Where the system
// says which ports it hands out on its own (Linux), they are drawn below
// that range: a port from it may be given, before the process binds it,
// to any outgoing connection or listener on port 0 of the machine, which
// under a busy test run happens. Only a process that picks ports as
// explicitly can still take one first.
func Pick(host string, n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	if hi, ok := EphemeralLow(); ok && hi-MinPicked >= 64*n {
		for tries := 0; len(ports) < n && tries < 16*n; tries++ {
			port := MinPicked + rand.IntN(hi-MinPicked)
			if slices.Contains(ports, port) {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				continue // taken
			}
			lns = append(lns, l)
			ports = append(ports, port)
		}
	}
	for len(ports) < n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// MinPicked is the lowest port Pick draws: above the ports of
// well-known services.
const MinPicked = 10000

// EphemeralLow returns the lowest port of the range the system hands out
// for outgoing connections and listeners on port 0, if it says.
func EphemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil
}
