package vsproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/internal/testproc"
)

// envEtcdListen makes the test binary, run with
// -test.run=^TestHelperEtcd$, an etcd process listening for clients on
// this host:port (see TestHelperEtcd).
const envEtcdListen = "VSPROC_ETCD_LISTEN"

// etcdReady is the line an etcd process prints once it serves clients.
const etcdReady = "vsproc: etcd ready"

// etcdPort is the client port of the etcd process on its host.
const etcdPort = 2379

// runEtcd is the body of an etcd process: it runs an embedded etcd on the
// address in envEtcdListen, prints etcdReady, and serves until its
// standard input reaches EOF (the test closed it, or died) or it receives
// SIGTERM; then it stops etcd, which removes its data directory.
func runEtcd(ctx context.Context) error {
	addr := os.Getenv(envEtcdListen)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)
	srv, err := etcddev.Start(ctx, etcddev.Config{ClientAddr: addr})
	if err != nil {
		return err
	}
	fmt.Println(etcdReady, srv.Endpoints()[0])
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-sigs:
	case <-ctx.Done():
	}
	return srv.Close()
}

// network is an emulated switch whose last host runs etcd and whose
// other hosts run one member each: member id on host id-1.
type network struct {
	sw *netns.Switch
	// endpoints are etcd's client URLs.
	endpoints []string
	etcd      *exec.Cmd
	etcdLogs  testproc.Output
}

// newNetwork builds a switch of members+1 unshaped hosts and starts etcd
// on the last one. The test's cleanup stops etcd and removes the switch;
// register the cluster's cleanup after this, so that it runs first and
// stops the members.
func newNetwork(t *testing.T, members int) *network {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	sw, err := netns.New(ctx, netns.Config{Hosts: members + 1})
	if err != nil {
		t.Fatal(err)
	}
	n := &network{sw: sw}
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	n.startEtcd(t, members)
	return n
}

// startEtcd starts the etcd process on host and waits until it serves.
func (n *network) startEtcd(t *testing.T, host int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(n.sw.Hosts()[host].Addr.String(), strconv.Itoa(etcdPort))
	cmd := n.sw.Command(context.Background(), host, exe)
	cmd.Env = append(os.Environ(), envEtcdListen+"="+addr)
	cmd.Stdout = &n.etcdLogs
	cmd.Stderr = &n.etcdLogs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	n.etcd = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// Closing its input stops etcd gracefully; kill it if it hangs.
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(closeTimeout):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() || os.Getenv(envLogs) != "" {
			t.Logf("--- etcd (pid %d) log:\n%s", cmd.Process.Pid, tail(n.etcdLogs.Bytes(), 64<<10))
		}
	})
	deadline := time.Now().Add(waitTimeout)
	for !bytes.Contains(n.etcdLogs.Bytes(), []byte(etcdReady)) {
		select {
		case err := <-exited:
			t.Fatalf("etcd exited before serving (%v):\n%s", err, n.etcdLogs.Bytes())
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not ready after %v:\n%s", waitTimeout, n.etcdLogs.Bytes())
		}
	}
	n.endpoints = []string{"http://" + addr}
	t.Logf("etcd serving at %s on host %s", addr, n.sw.Hosts()[host].Namespace)
}

// startOn starts member id on its host of n, listening on the host's
// address, with Config.InitialMembers initial. It is cluster.start for
// an emulated network.
func (c *cluster) startOn(n *network, id uint64, initial int) *proc {
	c.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	host := int(id) - 1
	spec := memberSpec{
		id: convoy.NodeID(id), etcd: n.endpoints, prefix: c.prefix, initial: initial,
		addr: net.JoinHostPort(n.sw.Hosts()[host].Addr.String(), "0"),
		out:  filepath.Join(c.dir, fmt.Sprintf("member-%d.jsonl", id)), pause: sendPause,
	}
	p := &proc{id: id, path: spec.out, exited: make(chan struct{})}
	p.cmd = n.sw.Command(context.Background(), host, exe)
	p.cmd.Env = append(os.Environ(), spec.encode()...)
	if os.Getenv("GORACE") == "" {
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	p.cmd.Stdout = &p.logs
	p.cmd.Stderr = &p.logs
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start member %d: %v", id, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	c.procs = append(c.procs, p)
	return p
}

// startAllOn starts members 1..n on their hosts of net; they found the
// group together.
func (c *cluster) startAllOn(net *network, n int) []*proc {
	ps := make([]*proc, n)
	for i := range n {
		ps[i] = c.startOn(net, uint64(i+1), n)
	}
	return ps
}

// partition cuts the members' hosts into sides, given as member ids;
// etcd's host stays reachable from every side.
func (n *network) partition(t *testing.T, sides ...[]uint64) {
	t.Helper()
	hosts := make([][]int, len(sides))
	for i, side := range sides {
		for _, id := range side {
			hosts[i] = append(hosts[i], int(id)-1)
		}
	}
	if err := n.sw.Partition(t.Context(), hosts...); err != nil {
		t.Fatal(err)
	}
	t.Logf("partitioned the members: %v", sides)
}

// heal ends the partition.
func (n *network) heal(t *testing.T) {
	t.Helper()
	if err := n.sw.Heal(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Log("healed the partition")
}
