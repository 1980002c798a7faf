package jepsen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/convoy-gcs/convoy/internal/freeport"
	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// Ports of the processes on their hosts, when each has a host of its
// own.
const (
	memberHTTPPort      = 8080
	memberTransportPort = 7000
	etcdClientPort      = 2379
	etcdPeerPort        = 2380
)

// networkSetupTimeout bounds building the switch.
const networkSetupTimeout = time.Minute

// dialTimeout bounds one connection attempt of a client.
const dialTimeout = time.Second

// network is where the processes of a campaign run: each on a host of
// its own, a network namespace on an emulated switch (package
// internal/netns), where the schedules' network faults cut and thin the
// links; or all on loopback, where they cannot. Host member-1 runs
// member member, host members+i-1 etcd member i, and the last host the
// clients and the harness's own requests, which no fault cuts off.
type network struct {
	sw      *netns.Switch    // nil on loopback
	ports   *freeport.Picker // on loopback: hands out each port once
	members int
	etcd    int
	// dial makes the connections of clients and of the harness.
	dial netns.DialFunc
	// noDelay says why packet delay cannot be carried out, if it cannot.
	noDelay string
}

// namespacePrefix starts the name of every namespace a campaign
// creates; the process id that follows lets a later campaign remove what
// one that died left behind.
const namespacePrefix = "cvj"

// leftover matches the namespaces of a campaign (the process id, then a
// run id).
var leftover = regexp.MustCompile("^" + namespacePrefix + `(\d+)x[0-9a-f]+-`)

// newNetwork returns the network of a campaign of members and etcd
// members: an emulated switch when this process may build one and
// loopback is false, else loopback; why not the switch is in the second
// result.
func newNetwork(ctx context.Context, members, etcd int, loopback bool) (*network, string, error) {
	n := &network{members: members, etcd: etcd}
	why := "-jepsen.loopback"
	if !loopback {
		why = ""
		if err := netns.CheckPartition(); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		n.ports = freeport.NewPicker("127.0.0.1")
		n.dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
		return n, why, nil
	}
	removeLeftovers()
	id := make([]byte, 3)
	if _, err := rand.Read(id); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, networkSetupTimeout)
	defer cancel()
	sw, err := netns.New(ctx, netns.Config{
		Name:  fmt.Sprintf("%s%dx%s", namespacePrefix, os.Getpid(), hex.EncodeToString(id)),
		Hosts: members + etcd + 1,
	})
	if err != nil {
		return nil, "", err
	}
	n.sw = sw
	n.dial = sw.Dialer(n.clientHost(), &net.Dialer{Timeout: dialTimeout})
	if err := netns.CheckDelay(); err != nil {
		n.noDelay = err.Error()
	}
	return n, "", nil
}

// removeLeftovers deletes the namespaces of campaigns whose process has
// died without removing them (killed by a test timeout, say); their own
// processes died with them.
func removeLeftovers() {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		m := leftover.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, err := strconv.Atoi(m[1]); err != nil || pid == os.Getpid() || processExists(pid) {
			continue
		}
		_ = exec.Command("ip", "netns", "del", e.Name()).Run()
	}
}

// processExists says whether a process with this id runs.
func processExists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// namespaces says whether the processes run in network namespaces.
func (n *network) namespaces() bool { return n.sw != nil }

func (n *network) String() string {
	if n.sw == nil {
		return "loopback"
	}
	return fmt.Sprintf("%d network namespaces %s-* on a bridge", len(n.sw.Hosts()), n.sw.Name())
}

// close removes the switch, if any. The processes on it must be gone.
func (n *network) close() error {
	if n.sw == nil {
		return nil
	}
	return n.sw.Close()
}

func (n *network) memberHost(id int) int { return id - 1 }
func (n *network) etcdHost(i int) int    { return n.members + i - 1 }
func (n *network) clientHost() int       { return n.members + n.etcd }

// hostAddr returns host h's address and port p.
func (n *network) hostAddr(h, p int) string {
	return net.JoinHostPort(n.sw.Hosts()[h].Addr.String(), strconv.Itoa(p))
}

// memberAddrs returns the HTTP address of member id and the address its
// transport listens on, fixed for the run.
func (n *network) memberAddrs(id int) (http, transport string, err error) {
	if n.sw == nil {
		http, err = n.ports.Addr()
		return http, "127.0.0.1:0", err
	}
	h := n.memberHost(id)
	return n.hostAddr(h, memberHTTPPort), n.hostAddr(h, memberTransportPort), nil
}

// etcdAddrs returns the client and peer addresses of etcd member i.
func (n *network) etcdAddrs(i int) (client, peer string, err error) {
	if n.sw == nil {
		if client, err = n.ports.Addr(); err != nil {
			return "", "", err
		}
		peer, err = n.ports.Addr()
		return client, peer, err
	}
	h := n.etcdHost(i)
	return n.hostAddr(h, etcdClientPort), n.hostAddr(h, etcdPeerPort), nil
}

// command returns the command that runs path with args on host h.
func (n *network) command(h int, path string, args ...string) *exec.Cmd {
	if n.sw == nil {
		return exec.Command(path, args...)
	}
	// ip netns exec executes the program in its own place: the process
	// is the program's.
	return exec.Command("ip", slices.Concat([]string{"netns", "exec", n.sw.Hosts()[h].Namespace, path}, args)...)
}

// networkKinds returns the network faults the switch carries out, in
// the order of schedule.Faults: none on loopback, packet delay only
// where iptables-nft can queue packets to this process.
func (n *network) networkKinds() []schedule.Kind {
	if n.sw == nil {
		return nil
	}
	kinds := []schedule.Kind{
		schedule.IsolateOne, schedule.SplitHalves, schedule.Bridge, schedule.OneWayCut,
		schedule.PacketLoss, schedule.PacketDelay, schedule.EtcdPartition,
	}
	if n.noDelay != "" {
		kinds = slices.DeleteFunc(kinds, func(k schedule.Kind) bool { return k == schedule.PacketDelay })
	}
	return kinds
}

// fault carries out a network step: it replaces the network's filter
// with the rules that step describes, or removes it (Heal, HealAll).
func (n *network) fault(ctx context.Context, st schedule.Step) error {
	if n.sw == nil {
		if st.Kind == schedule.HealAll {
			return nil
		}
		return fmt.Errorf("%v needs network namespaces; the processes run on loopback", st.Kind)
	}
	if st.Kind == schedule.Heal || st.Kind == schedule.HealAll {
		return n.sw.Heal(ctx)
	}
	if st.Kind == schedule.PacketDelay {
		if n.noDelay != "" {
			return fmt.Errorf("%v: %s", st.Kind, n.noDelay)
		}
		return n.sw.Delay(ctx, uint64(st.At), n.delays(st)...)
	}
	rules, err := n.rules(st)
	if err != nil {
		return err
	}
	return n.sw.Filter(ctx, rules...)
}

// rules returns the filter rules of a network fault.
func (n *network) rules(st schedule.Step) ([]netns.Rule, error) {
	memberHosts := func(ids []int) []int {
		out := make([]int, len(ids))
		for i, id := range ids {
			out[i] = n.memberHost(id)
		}
		return out
	}
	var allEtcd []int
	for i := 1; i <= n.etcd; i++ {
		allEtcd = append(allEtcd, n.etcdHost(i))
	}
	switch st.Kind {
	case schedule.IsolateOne, schedule.SplitHalves, schedule.Bridge:
		if len(st.Sides) != 2 {
			return nil, fmt.Errorf("%v with %d sides", st.Kind, len(st.Sides))
		}
		sides := [][]int{memberHosts(st.Sides[0]), memberHosts(st.Sides[1])}
		if len(st.Etcd) > 0 {
			for i := 1; i <= n.etcd; i++ {
				side := 1
				if slices.Contains(st.Etcd, i) {
					side = 0
				}
				sides[side] = append(sides[side], n.etcdHost(i))
			}
		}
		return cutBetween(sides), nil
	case schedule.OneWayCut:
		return []netns.Rule{{From: memberHosts(st.Members), To: memberHosts(st.To)}}, nil
	case schedule.PacketLoss:
		// Every link between two members, one of which is in
		// st.Members, loses st.Loss percent of its frames each way.
		var rules []netns.Rule
		lossy := memberHosts(st.Members)
		for id := 1; id <= n.members; id++ {
			from := n.memberHost(id)
			var to []int
			for other := 1; other <= n.members; other++ {
				h := n.memberHost(other)
				if other != id && (slices.Contains(lossy, from) || slices.Contains(lossy, h)) {
					to = append(to, h)
				}
			}
			if len(to) > 0 {
				rules = append(rules, netns.Rule{From: []int{from}, To: to, Percent: st.Loss})
			}
		}
		return rules, nil
	case schedule.EtcdPartition:
		cut := memberHosts(st.Members)
		return []netns.Rule{{From: cut, To: allEtcd}, {From: allEtcd, To: cut}}, nil
	}
	return nil, fmt.Errorf("%v is not a network fault the switch carries out", st.Kind)
}

// delays returns the delay rules of a PacketDelay: every link between two
// members, one of which is in st.Members, delays its packets each way.
func (n *network) delays(st schedule.Step) []netns.DelayRule {
	var rules []netns.DelayRule
	for id := 1; id <= n.members; id++ {
		var to []int
		for other := 1; other <= n.members; other++ {
			if other != id && (slices.Contains(st.Members, id) || slices.Contains(st.Members, other)) {
				to = append(to, n.memberHost(other))
			}
		}
		if len(to) > 0 {
			rules = append(rules, netns.DelayRule{From: n.memberHost(id), To: to, Delay: st.Delay, Jitter: st.Jitter})
		}
	}
	return rules
}

// cutBetween returns the rules of a partition into sides of hosts: two
// hosts reach each other only if some side holds both. A host on both
// sides (a bridge) reaches every host; a host on no side is left alone.
func cutBetween(sides [][]int) []netns.Rule {
	var hosts []int
	for _, side := range sides {
		for _, h := range side {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	slices.Sort(hosts)
	together := func(a, b int) bool {
		for _, side := range sides {
			if slices.Contains(side, a) && slices.Contains(side, b) {
				return true
			}
		}
		return false
	}
	var rules []netns.Rule
	for _, a := range hosts {
		var cut []int
		for _, b := range hosts {
			if a != b && !together(a, b) {
				cut = append(cut, b)
			}
		}
		if len(cut) > 0 {
			rules = append(rules, netns.Rule{From: []int{a}, To: cut})
		}
	}
	return rules
}
