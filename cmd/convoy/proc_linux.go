package main

import "syscall"

// childAttr keeps a member process out of the terminal's process group,
// so that Ctrl-C reaches only this process, which stops its members in
// order; and has the kernel kill the member if this process dies first
// (Pdeathsig: a safety net for the paths where it cannot stop them, such
// as SIGKILL). The kernel sends it when the thread that started the
// member exits; Go keeps its threads for the life of the process, unless
// a goroutine locked to one exits, which nothing in this program does.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
