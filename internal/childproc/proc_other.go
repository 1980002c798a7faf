//go:build !unix

package childproc

import (
	"os"
	"syscall"
	"time"
)

// SysProcAttr returns no special attributes: children share the parent's
// console, and the parent stops them on its way out.
func SysProcAttr() *syscall.SysProcAttr { return nil }

// kill kills p.
func kill(p *os.Process) error { return p.Kill() }

// processCPU returns 0: only Linux reports another process's CPU time
// here.
func processCPU(int) time.Duration { return 0 }
