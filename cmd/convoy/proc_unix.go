//go:build unix && !linux

package main

import "syscall"

// childAttr keeps a member process out of the terminal's process group,
// so that Ctrl-C reaches only this process, which stops its members in
// order. (Only Linux can also have the kernel kill members left behind
// when this process dies.)
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
