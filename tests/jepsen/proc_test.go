package jepsen

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// exitTimeout bounds the wait for a process killed with SIGKILL to be
// reaped.
const exitTimeout = 10 * time.Second

// proc is one run of a process: a member or an etcd member, in its own
// process group, its standard output and error appended to a log file
// shared by all runs of that member.
type proc struct {
	name string
	cmd  *exec.Cmd
	// exited is closed once the process has exited; err is then its
	// wait status.
	exited chan struct{}
	err    error
	// killed is set when the harness killed it (or is stopping it), and
	// mayExit when a fault may make it exit (its disk is full), so that
	// its exit is no finding.
	mu      sync.Mutex
	killed  bool
	mayExit bool
}

// startProc starts cmd. The process leads a process group of its own
// (so that signals reach it alone, and all of it) and is killed by the
// kernel if the test process dies.
func startProc(name, logPath string, cmd *exec.Cmd) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(log, "=== %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) String() string { return fmt.Sprintf("%s (pid %d)", p.name, p.cmd.Process.Pid) }

// signal sends sig to the process's group.
func (p *proc) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) && p.done() {
		return nil // it has exited: nothing to signal
	}
	return err
}

// kill kills the process with SIGKILL and waits until it is reaped.
func (p *proc) kill() error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if err := p.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %v: %w", p, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("%v not reaped %v after SIGKILL", p, exitTimeout)
	}
}

// allowExit makes an exit of the process no finding: a fault may end
// it.
func (p *proc) allowExit() {
	p.mu.Lock()
	p.mayExit = true
	p.mu.Unlock()
}

// done says whether the process has exited.
func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// unexpectedExit says why the process exited, if it exited without the
// harness killing it.
func (p *proc) unexpectedExit() error {
	if !p.done() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed || p.mayExit {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%v exited on its own", p)
	}
	return fmt.Errorf("%v exited on its own: %w", p, p.err)
}
