//go:build !linux

package rdma

import "net"

// setUnsentLimit is a no-op where TCP_NOTSENT_LOWAT is not available.
func setUnsentLimit(*net.TCPConn, int) {}
