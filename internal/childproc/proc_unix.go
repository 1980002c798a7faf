//go:build unix && !linux

package childproc

import (
	"syscall"
	"time"
)

// SysProcAttr returns the attributes Start gives a child: a process group
// of its own, so that Ctrl-C reaches only the parent, which stops its
// children in order. (Only Linux can also have the kernel kill children
// left behind when the parent dies.)
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// processCPU returns 0: only Linux reports another process's CPU time
// here.
func processCPU(int) time.Duration { return 0 }
