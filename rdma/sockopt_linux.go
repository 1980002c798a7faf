package rdma

import (
	"net"

	"golang.org/x/sys/unix"
)

// setUnsentLimit sets TCP_NOTSENT_LOWAT on tc (best effort).
func setUnsentLimit(tc *net.TCPConn, n int) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}
