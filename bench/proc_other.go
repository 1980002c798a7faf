//go:build unix && !linux

package main

import (
	"syscall"
	"time"
)

// childAttr puts a replica process in a process group of its own, so that
// Ctrl-C reaches only this process, which stops its replicas in order.
// (Only Linux can also have the kernel kill replicas left behind when this
// process dies.)
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// procCPU returns 0: only Linux reports another process's CPU time here.
func procCPU(int) time.Duration { return 0 }
