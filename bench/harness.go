package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// stopTimeout bounds how long a replica may take to exit after its
// standard input closes before it is killed.
const stopTimeout = 10 * time.Second

// stderrTail is how much of a replica's standard error is kept to show
// when it fails.
const stderrTail = 4 << 10

// proc is one replica process: this program re-executed as
// "bench replica ...", or a replica program of its own
// (system.binary). It exits when its standard input closes.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// ready receives nil once the replica reports it serves, or the error
	// that ended it first; it is written once.
	ready  chan error
	stderr *tailBuffer
	// exited is closed once Wait returned; err is its result.
	exited chan struct{}
	err    error
}

// startProc starts the executable exe with args as a replica process in
// a process group of its own, killed by the kernel if this process dies
// first (see childAttr). Its standard error goes to a buffer
// that keeps the tail, and to verbose if not nil.
func startProc(exe, name string, args []string, verbose io.Writer) (*proc, error) {
	p := &proc{
		name:   name,
		cmd:    exec.Command(exe, args...),
		ready:  make(chan error, 1),
		stderr: &tailBuffer{max: stderrTail},
		exited: make(chan struct{}),
	}
	p.cmd.SysProcAttr = childAttr()
	if verbose != nil {
		p.cmd.Stderr = io.MultiWriter(p.stderr, verbose)
	} else {
		p.cmd.Stderr = p.stderr
	}
	in, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.stdin = in
	go func() {
		sc := bufio.NewScanner(out)
		reported := false
		for sc.Scan() {
			if replica.IsReady(sc.Bytes()) && !reported {
				reported = true
				p.ready <- nil
			}
		}
		p.err = p.cmd.Wait()
		if !reported {
			p.ready <- fmt.Errorf("%s exited before it was ready (%v): %s", name, p.err, p.stderr.String())
		}
		close(p.exited)
	}()
	return p, nil
}

// stop closes the replica's standard input, which asks it to exit, and
// waits until it does; after stopTimeout it kills the replica's process
// group.
func (p *proc) stop() error {
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("%s did not exit within %v of being asked: killed", p.name, stopTimeout)
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w: %s", p.name, p.err, p.stderr.String())
	}
	return nil
}

// cluster is the replica processes of one system.
type cluster struct {
	procs []*proc
	// views is the etcd that holds the group's views, for a system that
	// keeps them there (system.views), else nil.
	views *proc
	// clientAddrs are the addresses the replicas serve clients on, in
	// replica order.
	clientAddrs []string
	dir         string // removed by stop
}

// startCluster starts n replicas of sys from the executable exe, with data
// directories under a fresh directory in root, and waits until every one
// serves clients, ctx ends, or timeout passes. For a system that keeps
// its views in etcd, it first starts a one-member etcd (exe's replica of
// kind etcd) and waits until it serves. Ports are picked free just before
// the start; another process may take one in between, so a cluster that
// fails to start is started again on other ports, up to three times.
func startCluster(ctx context.Context, exe, root string, sys system, n int, timeout time.Duration, verbose io.Writer) (*cluster, error) {
	var errs []error
	for range 3 {
		c, err := startClusterOnce(ctx, exe, root, sys, n, timeout, verbose)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start %s: %w", sys.name, errors.Join(errs...))
}

func startClusterOnce(ctx context.Context, exe, root string, sys system, n int, timeout time.Duration, verbose io.Writer) (_ *cluster, err error) {
	dir, err := os.MkdirTemp(root, sys.name+"-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	ports, err := freePorts(2*n + 2)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var etcd string
	if sys.views {
		args := replica.Args{
			Kind:    "etcd",
			ID:      1,
			Dir:     dir + "/views",
			Peers:   []string{addr(2 * n)},
			Clients: []string{addr(2*n + 1)},
			Durable: true,
		}
		if c.views, err = startProc(exe, sys.name+" views etcd", args.Argv(), verbose); err != nil {
			return nil, err
		}
		if err := waitReady(ctx, deadline.C, timeout, c.views); err != nil {
			return nil, err
		}
		etcd = "http://" + args.Clients[0]
	}
	var peers []string
	for i := range n {
		peers = append(peers, addr(i))
		c.clientAddrs = append(c.clientAddrs, addr(n+i))
	}
	for i := range n {
		args := replica.Args{
			Kind:    sys.kind,
			ID:      i + 1,
			Dir:     fmt.Sprintf("%s/%d", dir, i+1),
			Peers:   peers,
			Clients: c.clientAddrs,
			Durable: sys.durable,
			Etcd:    etcd,
		}
		p, err := startProc(exe, fmt.Sprintf("%s replica %d", sys.name, i+1), args.Argv(), verbose)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	if err := waitReady(ctx, deadline.C, timeout, c.procs...); err != nil {
		return nil, err
	}
	return c, nil
}

// waitReady waits until every one of procs serves clients, ctx ends, or
// deadline (timeout after the start) fires.
func waitReady(ctx context.Context, deadline <-chan time.Time, timeout time.Duration, procs ...*proc) error {
	for _, p := range procs {
		select {
		case err := <-p.ready:
			if err != nil {
				return err
			}
		case <-deadline:
			return fmt.Errorf("%s not ready within %v: %s", p.name, timeout, p.stderr.String())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// cpu returns the CPU time the cluster's processes have used so far.
func (c *cluster) cpu() time.Duration {
	var total time.Duration
	for _, p := range c.procs {
		total += procCPU(p.cmd.Process.Pid)
	}
	if c.views != nil {
		total += procCPU(c.views.cmd.Process.Pid)
	}
	return total
}

// stop stops every replica, all at once, then the etcd that holds their
// views, and removes the cluster's directory.
func (c *cluster) stop() error {
	errs := make([]error, len(c.procs), len(c.procs)+1)
	var wg sync.WaitGroup
	for i, p := range c.procs {
		wg.Go(func() { errs[i] = p.stop() })
	}
	wg.Wait()
	if c.views != nil {
		errs = append(errs, c.views.stop())
	}
	return errors.Join(errors.Join(errs...), os.RemoveAll(c.dir))
}

// freePorts asks the kernel for n distinct free loopback ports, holding
// them all open until it has them.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = b.buf[over:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}

// selfCPU returns the user and system CPU time this process has used, or
// 0 if the kernel cannot tell.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
