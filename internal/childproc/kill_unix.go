//go:build unix

package childproc

import (
	"os"
	"syscall"
)

// kill sends SIGKILL to p's process group if p leads one (a child started
// with SysProcAttr), or else to p alone.
func kill(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err == nil {
		return nil
	}
	return p.Kill()
}
