// Package freeport picks free TCP ports for processes about to be
// started, below the range of ports the system hands out on its own, so
// that a process can stop and start again on the port it had.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Pick returns n distinct ports free on host, held all at once while
// they are picked, for processes started next to bind. Where the system
// says which ports it hands out on its own (Linux), they are drawn below
// that range: a port from it may be given, before the process binds it,
// to any outgoing connection or listener on port 0 of the machine, which
// under a busy test run happens. Only a process that picks ports as
// explicitly can still take one first.
func Pick(host string, n int) ([]int, error) {
	return NewPicker(host).Pick(n)
}

// Picker picks ports as Pick does, and never one it handed out before:
// for a run whose processes stop and start again on the ports they had,
// where a port handed out earlier may belong to a process that is down
// for now. It is safe for concurrent use.
type Picker struct {
	host string
	mu   sync.Mutex
	used map[int]bool
}

// NewPicker returns a Picker of ports free on host.
func NewPicker(host string) *Picker {
	return &Picker{host: host, used: make(map[int]bool)}
}

// Pick returns n distinct ports free on host, as the package's Pick
// does, none of them handed out by p before. Once p has handed out so
// many that fewer than one port in 64 below the system's range would be
// left to draw from, it takes ports the system picks, as Pick does where
// the system does not say its range.
func (p *Picker) Pick(n int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	if hi, ok := EphemeralLow(); ok && hi-MinPicked >= 64*(n+len(p.used)) {
		for tries := 0; len(ports) < n && tries < 16*n; tries++ {
			port := MinPicked + rand.IntN(hi-MinPicked)
			if p.used[port] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort(p.host, strconv.Itoa(port)))
			if err != nil {
				continue // taken
			}
			lns = append(lns, l)
			ports = append(ports, port)
			p.used[port] = true
		}
	}
	// Ports the system picks: the ones picked so far stay held, so none
	// comes twice in this call.
	for repeats := 0; len(ports) < n; {
		if repeats == 16*n {
			return nil, fmt.Errorf("finding a free port: the system picked %d ports handed out before", repeats)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(p.host, "0"))
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, l)
		if port := l.Addr().(*net.TCPAddr).Port; !p.used[port] {
			ports = append(ports, port)
			p.used[port] = true
		} else {
			repeats++
		}
	}
	return ports, nil
}

// Addr returns host:port for one port picked as Pick(1) picks it, for
// a process started next to listen on.
func (p *Picker) Addr() (string, error) {
	ports, err := p.Pick(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(p.host, strconv.Itoa(ports[0])), nil
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
