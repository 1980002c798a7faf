package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy/internal/childproc"
)

// stopTimeout bounds how long a replica may take to exit after its
// standard input closes before it is killed.
const stopTimeout = 10 * time.Second

// readyEvent is the line a replica prints on standard output once it
// serves clients.
type readyEvent struct {
	Ready bool `json:"ready"`
}

// isReady reports whether line is a replica's readyEvent.
func isReady(line []byte) bool {
	var ev readyEvent
	return json.Unmarshal(line, &ev) == nil && ev.Ready
}

// cluster is the three replica processes of one system.
type cluster struct {
	// procs are this program re-executed as "bench replica ...", each
	// exiting when its standard input closes.
	procs []*childproc.Proc
	// clientAddrs are the addresses the replicas serve clients on, in
	// replica order.
	clientAddrs []string
	dir         string // removed by stop
}

// startCluster starts n replicas of sys, with data directories under a
// fresh directory in root, and waits until every one serves clients, ctx
// ends, or timeout passes. Ports are picked free just before the start;
// another process may take one in between, so a cluster that fails to
// start is started again on other ports, up to three times.
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
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[i]))
		c.clientAddrs = append(c.clientAddrs, fmt.Sprintf("127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		args := replicaArgs{
			kind:    sys.kind,
			id:      i + 1,
			dir:     fmt.Sprintf("%s/%d", dir, i+1),
			peers:   peers,
			clients: c.clientAddrs,
			durable: sys.durable,
		}
		p, err := childproc.Start(exec.Command(exe, args.argv()...), childproc.Options{
			Name:   fmt.Sprintf("%s replica %d", sys.name, i+1),
			Stderr: verbose,
			Ready:  isReady,
		})
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("not ready within %v", timeout))
	defer cancel()
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
	return total
}

// stop stops every replica, all at once, and removes the cluster's
// directory.
func (c *cluster) stop() error {
	return errors.Join(childproc.StopAll(stopTimeout, c.procs...), os.RemoveAll(c.dir))
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
