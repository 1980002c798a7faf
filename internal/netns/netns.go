// Package netns builds an emulated switched network on one Linux machine:
// a set of network namespaces ("hosts"), each joined by a veth link to a
// bridge that lives in a namespace of its own (the "switch"), with every
// link optionally shaped by a tbf qdisc in both directions. On a shaped
// link each of a host's TCP connections keeps at most about a millisecond
// of the link's traffic queued in front of the others, as fair queueing
// gives a real host (see Config.FlowQueueBytes).
//
// It drives the ip and tc commands (iproute2) and needs root. Programs run
// inside a host with [Switch.Command]; pipes to and from them work across
// namespaces, so a parent process can coordinate children that sit on
// different hosts.
//
// Usage:
//
//	sw, err := netns.New(ctx, netns.Config{Hosts: 4, RateMbit: 1000})
//	if err != nil { ... }
//	defer sw.Close()
//	cmd := sw.Command(ctx, 0, "/path/to/server", "-listen", sw.Hosts()[0].Addr.String()+":7000")
//
// Sockets this process opens inside [Switch.InHost] (or dials with
// [Switch.Dialer]) belong to a host, so the process can talk to the
// programs on the switch without a link of its own.
//
// Faults: [Switch.Partition] and [Switch.Filter] drop frames between
// hosts (all of them, one way or both, or a random share: packet loss)
// with nftables rules on the bridge; [Switch.Delay] delays the packets a
// host sends, through an NFQUEUE rule of iptables-nft and a delayer in
// this process; [Switch.Heal] ends them all.
//
// Every name created carries a random run id, so concurrent runs do not
// collide, and traffic stays on the private bridge.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Defaults for Config fields left zero.
const (
	// DefaultBurstBytes is the tbf bucket size. It must exceed 64 KiB: with
	// TSO the kernel hands tbf super-packets of up to 64 KiB, and a smaller
	// bucket makes tbf burn CPU re-queueing them.
	DefaultBurstBytes = 256 << 10
	// DefaultQueueMillis sizes the tbf queue limit (see Config.LimitBytes).
	DefaultQueueMillis = 50
	// DefaultFlowQueueMillis sizes the bound on what one TCP connection of
	// a host may queue in its link's qdisc (see Config.FlowQueueBytes).
	DefaultFlowQueueMillis = 1
	// minFlowQueueBytes is the least default bound: one TSO super-packet.
	minFlowQueueBytes = 64 << 10
	// teardownTimeout bounds Close, which must work even after the
	// caller's context was cancelled.
	teardownTimeout = 30 * time.Second
)

// DefaultSubnet is the private range the hosts are numbered from. It is
// only ever configured inside the namespaces, so it cannot clash with the
// machine's own networks.
var DefaultSubnet = netip.MustParsePrefix("10.77.0.0/24")

// ErrUnsupported is returned by Check and New when this machine or user
// cannot build namespaces (not root, ip or tc missing).
var ErrUnsupported = errors.New("netns: unsupported")

// Config describes a switch.
type Config struct {
	// Name prefixes every namespace created. It must be unique among the
	// runs on this machine; empty means "cv" followed by a random run id.
	Name string
	// Hosts is the number of hosts, at least 1.
	Hosts int
	// Subnet numbers the hosts: host i gets the (i+1)-th address. Zero
	// means DefaultSubnet. It must have room for every host.
	Subnet netip.Prefix
	// RateMbit shapes every link to this many Mbit/s in each direction
	// (host to switch and switch to host). Zero means unshaped.
	RateMbit int
	// BurstBytes is the tbf burst; zero means DefaultBurstBytes.
	BurstBytes int
	// LimitBytes is the tbf queue limit; zero means DefaultQueueMillis of
	// traffic at RateMbit plus 64 KiB.
	LimitBytes int
	// FlowQueueBytes bounds, on a shaped link, the bytes one TCP
	// connection of a host may have queued in the qdisc below it (the
	// host namespace's net.ipv4.tcp_limit_output_bytes, whose default is
	// megabytes). A real host paces its connections or schedules them
	// fairly (the fq and fq_codel qdiscs), so that the other connections'
	// packets do not wait behind a bulk transfer's; tbf's queue is one
	// FIFO, and this bound keeps what they wait behind short. Zero means
	// DefaultFlowQueueMillis of traffic at RateMbit, at least 64 KiB.
	// Unshaped links queue nothing, and the bound is not set.
	FlowQueueBytes int
	// Logger receives a debug line per command run; nil discards them.
	Logger *slog.Logger
}

// Host is one emulated machine.
type Host struct {
	// Namespace is the network namespace's name (as in ip netns list).
	Namespace string
	// Addr is the host's address on the switch.
	Addr netip.Addr
}

// Switch is a running emulated network. Close removes it.
type Switch struct {
	cfg     Config
	log     *slog.Logger
	sw      string // the switch's namespace
	hosts   []Host
	created []string // namespaces to delete on Close, in creation order
	// delays stop the delays in effect (see Delay).
	delays []func(context.Context) error
}

// Check reports, wrapped in ErrUnsupported, why namespaces cannot be
// built here: not running as root, or ip or tc not installed.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces need root", ErrUnsupported)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found (install iproute2): %w", ErrUnsupported, tool, err)
		}
	}
	return nil
}

// New builds the switch and its hosts. On error it removes whatever it
// created. The context bounds the setup only; the switch lives until Close.
func New(ctx context.Context, cfg Config) (*Switch, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	s := &Switch{cfg: cfg, log: cfg.Logger, sw: cfg.Name + "-sw"}
	addr := cfg.Subnet.Addr()
	for i := range cfg.Hosts {
		addr = addr.Next()
		s.hosts = append(s.hosts, Host{Namespace: cfg.Name + "-h" + strconv.Itoa(i), Addr: addr})
	}
	if err := s.build(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.Hosts < 1 {
		return cfg, fmt.Errorf("netns: %d hosts, need at least 1", cfg.Hosts)
	}
	if cfg.RateMbit < 0 || cfg.BurstBytes < 0 || cfg.LimitBytes < 0 || cfg.FlowQueueBytes < 0 {
		return cfg, errors.New("netns: negative rate, burst, limit or flow queue")
	}
	if cfg.Name == "" {
		id := make([]byte, 4)
		if _, err := rand.Read(id); err != nil {
			return cfg, fmt.Errorf("netns: run id: %w", err)
		}
		cfg.Name = "cv" + hex.EncodeToString(id)
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if !cfg.Subnet.Addr().Is4() {
		return cfg, fmt.Errorf("netns: subnet %v is not IPv4", cfg.Subnet)
	}
	// Leave out the network and broadcast addresses.
	if hostBits := 32 - cfg.Subnet.Bits(); hostBits < 31 && cfg.Hosts > 1<<hostBits-2 {
		return cfg, fmt.Errorf("netns: subnet %v has no room for %d hosts", cfg.Subnet, cfg.Hosts)
	}
	if cfg.BurstBytes == 0 {
		cfg.BurstBytes = DefaultBurstBytes
	}
	if cfg.LimitBytes == 0 {
		cfg.LimitBytes = hostLimitBytes(cfg.RateMbit)
	}
	if cfg.FlowQueueBytes == 0 {
		cfg.FlowQueueBytes = hostFlowQueueBytes(cfg.RateMbit)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// build carries out the setup, recording each namespace as soon as it
// exists so that Close can remove it.
func (s *Switch) build(ctx context.Context) error {
	if err := s.addNamespace(ctx, s.sw); err != nil {
		return err
	}
	if err := s.ip(ctx, "-n", s.sw, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := s.ip(ctx, "-n", s.sw, "link", "set", "br0", "up"); err != nil {
		return err
	}
	// Keep bridged frames away from the host's iptables, if br_netfilter
	// is loaded; without it the keys do not exist and nothing is filtered.
	if _, err := os.Stat("/proc/sys/net/bridge"); err == nil {
		if err := s.run(ctx, "ip", "netns", "exec", s.sw, "sysctl", "-qw",
			"net.bridge.bridge-nf-call-iptables=0", "net.bridge.bridge-nf-call-ip6tables=0"); err != nil {
			s.log.Debug("netns: leaving bridge netfilter as is", "err", err)
		}
	}
	for i, h := range s.hosts {
		if err := s.addHost(ctx, i, h); err != nil {
			return err
		}
	}
	return nil
}

func (s *Switch) addNamespace(ctx context.Context, name string) error {
	if err := s.ip(ctx, "netns", "add", name); err != nil {
		return err
	}
	s.created = append(s.created, name)
	return s.ip(ctx, "-n", name, "link", "set", "lo", "up")
}

// addHost creates host i's namespace and links it to the bridge through a
// veth pair: eth0 on the host side, p<i> on the switch side.
func (s *Switch) addHost(ctx context.Context, i int, h Host) error {
	if err := s.addNamespace(ctx, h.Namespace); err != nil {
		return err
	}
	port := "p" + strconv.Itoa(i)
	prefix := netip.PrefixFrom(h.Addr, s.cfg.Subnet.Bits()).String()
	steps := [][]string{
		{"link", "add", "veth0", "netns", h.Namespace, "type", "veth", "peer", "name", port, "netns", s.sw},
		{"-n", h.Namespace, "link", "set", "veth0", "name", "eth0"},
		{"-n", h.Namespace, "addr", "add", prefix, "dev", "eth0"},
		{"-n", h.Namespace, "link", "set", "eth0", "up"},
		{"-n", s.sw, "link", "set", port, "master", "br0", "up"},
	}
	for _, args := range steps {
		if err := s.ip(ctx, args...); err != nil {
			return err
		}
	}
	if s.cfg.RateMbit == 0 {
		return nil
	}
	if err := s.setFlowQueue(i, s.cfg.FlowQueueBytes); err != nil {
		return err
	}
	if err := s.shape(ctx, h.Namespace, "eth0"); err != nil { // host to switch
		return err
	}
	return s.shape(ctx, s.sw, port) // switch to host
}

// flowQueueSysctl is the kernel setting Config.FlowQueueBytes sets in
// each host's namespace. The settings under /proc/sys/net are those of
// the namespace of the thread that opens them.
const flowQueueSysctl = "/proc/sys/net/ipv4/tcp_limit_output_bytes"

// setFlowQueue bounds what one TCP connection of host i may queue below
// it (see Config.FlowQueueBytes).
func (s *Switch) setFlowQueue(i, n int) error {
	s.log.Debug("netns: flow queue", "host", i, "bytes", n)
	err := s.InHost(i, func() error {
		return os.WriteFile(flowQueueSysctl, []byte(strconv.Itoa(n)), 0)
	})
	if err != nil {
		return fmt.Errorf("netns: host %d: bound its connections' queues: %w", i, err)
	}
	return nil
}

func (s *Switch) shape(ctx context.Context, ns, dev string) error {
	return s.run(ctx, "tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
		"rate", strconv.Itoa(s.cfg.RateMbit)+"mbit",
		"burst", strconv.Itoa(s.cfg.BurstBytes),
		"limit", strconv.Itoa(s.cfg.LimitBytes))
}

// Hosts returns the hosts, in index order. The slice must not be modified.
func (s *Switch) Hosts() []Host { return s.hosts }

// Name returns the prefix of every namespace of this switch.
func (s *Switch) Name() string { return s.cfg.Name }

// Command returns a command that runs name with args inside host i's
// namespace (through ip netns exec, which execs name in place, so the
// process id is the program's own). The context kills it as in
// exec.CommandContext. Name should be an absolute path: a path under
// /proc/self would name ip itself.
func (s *Switch) Command(ctx context.Context, host int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", s.hosts[host].Namespace, name}, args...)...)
}

// Close deletes every namespace of the switch, which also removes the
// links, the bridge and the qdiscs. Processes still running inside a host
// keep it alive, unnamed, until they exit: stop them first. Close may be
// called more than once.
func (s *Switch) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	errs := []error{s.stopDelays(ctx)}
	for i := len(s.created) - 1; i >= 0; i-- {
		if err := s.ip(ctx, "netns", "del", s.created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	s.created = nil
	return errors.Join(errs...)
}

func (s *Switch) ip(ctx context.Context, args ...string) error {
	return s.run(ctx, "ip", args...)
}

// run runs one command, returning its output in the error if it fails.
func (s *Switch) run(ctx context.Context, name string, args ...string) error {
	s.log.Debug("netns: run", "cmd", name+" "+strings.Join(args, " "))
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
