package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// DialFunc dials like net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dialer returns a function that dials from host i with d: the
// connections it makes are host i's, so a process outside the switch
// (this one) can talk to the programs on its hosts. The address must be
// an IP address and a port: a name would be looked up in host i's
// namespace, by goroutines of the resolver that run outside it.
func (s *Switch) Dialer(i int, d *net.Dialer) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if _, err := netip.ParseAddrPort(addr); err != nil {
			return nil, fmt.Errorf("netns: dial %s from host %d: not an IP address and port", addr, i)
		}
		var c net.Conn
		err := s.InHost(i, func() error {
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
