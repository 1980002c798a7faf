package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
	"github.com/convoy-gcs/convoy/internal/childproc"
)

// stopTimeout bounds how long a replica may take to exit after its
// standard input closes before it is killed.
const stopTimeout = 10 * time.Second

// startProc starts the executable exe with args as a replica process,
// named name in errors, its standard error going to verbose too if not
// nil. The process has a process group of its own and, on Linux, is
// killed by the kernel if this process dies first (see
// childproc.SysProcAttr).
func startProc(exe, name string, args []string, verbose io.Writer) (*childproc.Proc, error) {
	return childproc.Start(exec.Command(exe, args...), childproc.Options{
		Name:   name,
		Stderr: verbose,
		Ready:  replica.IsReady,
	})
}

// cluster is the replica processes of one system.
type cluster struct {
	// procs exit when their standard input closes.
	procs []*childproc.Proc
	// views is the etcd that holds the group's views, for a system that
	// keeps them there (system.views), else nil.
	views *childproc.Proc
	// clientAddrs are the addresses the replicas serve clients on, in
	// replica order.
	clientAddrs []string
	dir         string // removed by stop
}

// startCluster starts n replicas of sys from the executable exe, with data
// directories under a fresh directory in root (and, if profiles is set,
// each replica's CPU profile written into that directory), and waits
// until every one serves clients, ctx ends, or timeout passes. For a
// system that keeps
// its views in etcd, it first starts a one-member etcd (exe's replica of
// kind etcd) and waits until it serves. Ports are picked free just before
// the start; another process may take one in between, so a cluster that
// fails to start is started again on other ports, up to three times.
func startCluster(ctx context.Context, exe, root string, sys system, n int, timeout time.Duration, profiles string, verbose io.Writer) (*cluster, error) {
	var errs []error
	for range 3 {
		c, err := startClusterOnce(ctx, exe, root, sys, n, timeout, profiles, verbose)
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

func startClusterOnce(ctx context.Context, exe, root string, sys system, n int, timeout time.Duration, profiles string, verbose io.Writer) (_ *cluster, err error) {
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
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("not ready within %v", timeout))
	defer cancel()
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
		if err := c.views.WaitReady(ctx); err != nil {
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
		if profiles != "" {
			// Named after the cluster's directory, unique in root.
			args.CPUProfile = filepath.Join(profiles, fmt.Sprintf("%s-%d.pprof", filepath.Base(dir), i+1))
		}
		p, err := startProc(exe, fmt.Sprintf("%s replica %d", sys.name, i+1), args.Argv(), verbose)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	for _, p := range c.procs {
		if err := p.WaitReady(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// cpu returns the CPU time the cluster's processes have used so far.
func (c *cluster) cpu() time.Duration {
	var total time.Duration
	for _, p := range c.procs {
		total += p.CPU()
	}
	if c.views != nil {
		total += c.views.CPU()
	}
	return total
}

// stop stops every replica, all at once, then the etcd that holds their
// views, and removes the cluster's directory.
func (c *cluster) stop() error {
	errs := []error{childproc.StopAll(stopTimeout, c.procs...)}
	if c.views != nil {
		errs = append(errs, c.views.Stop(stopTimeout))
	}
	return errors.Join(append(errs, os.RemoveAll(c.dir))...)
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

// selfCPU returns the user and system CPU time this process has used, or
// 0 if the kernel cannot tell.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
