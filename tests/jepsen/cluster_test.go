package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// Bounds of the cluster's setup.
const (
	// etcdReadyTimeout bounds the wait for a new etcd cluster to serve.
	etcdReadyTimeout = 30 * time.Second
	// membersReadyTimeout bounds the wait for every member of a new group
	// to serve.
	membersReadyTimeout = 60 * time.Second
	// readyPoll is how often readiness is polled.
	readyPoll = 50 * time.Millisecond
)

// timeline records what happened in a run, each line with its offset
// from the start of the schedule (negative: during the setup).
type timeline struct {
	mu    sync.Mutex
	zero  time.Time
	lines []string
}

func newTimeline() *timeline { return &timeline{zero: time.Now()} }

func (tl *timeline) add(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	at := time.Since(tl.zero)
	tl.lines = append(tl.lines, fmt.Sprintf("%9.3fs  %s", at.Seconds(), fmt.Sprintf(format, args...)))
}

// restart makes now the timeline's zero: the start of the schedule.
func (tl *timeline) restart() time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	now := time.Now()
	tl.lines = append(tl.lines, fmt.Sprintf("%9.3fs  schedule starts (time zero from here on)", now.Sub(tl.zero).Seconds()))
	tl.zero = now
	return now
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n") + "\n"
}

// etcdMember is one member of the etcd cluster, on fixed addresses and
// a data directory that outlive its processes.
type etcdMember struct {
	name         string
	host         int // on the network
	client, peer string
	dir, log     string
	proc         *proc // the latest run; nil before the first
	paused       bool
}

// member is one Convoy member (a "convoy node" process, or a
// groupmember), on fixed addresses and a data directory that outlive its
// processes.
type member struct {
	id        int
	host      int    // on the network
	http      string // host:port
	transport string // host:port, or a free port on loopback
	// dir is the member's data directory; on a member whose disk the
	// schedule fills, it lies in disk, the mount point of a tmpfs of its
	// own, which holds the filler too (see disk_test.go).
	dir, log string
	disk     string
	proc     *proc
	paused   bool
	// full: its disk is full (schedule.DiskFull), filled by filler.
	full   bool
	filler *filler
	// lost: killed for good (schedule.Lose).
	lost bool
	// runs counts the member's processes started; outs are the files of
	// their records, one a run, for the group workload.
	runs int
	outs []string
	// clock is how the member's clock is to be set off (by the
	// schedule's latest clock step for it); running is how the clock of
	// its latest process is. Their Member fields are zero.
	clock, running schedule.Clock
}

func (m *member) url() string { return "http://" + m.http }

// up says whether the member's latest process runs (paused or not).
func (m *member) up() bool { return m.proc != nil && !m.proc.done() }

// cluster is the etcd cluster and the Convoy members of one run, all
// separate processes on the campaign's network. Its methods are called
// from one goroutine.
type cluster struct {
	bins binaries
	// app is the application the members serve ("convoy node -app"), or
	// workloadGroup: the members are groupmember processes.
	app      string
	seed     int64
	dir      string
	tl       *timeline
	net      *network
	leaseTTL time.Duration
	// logLevel, if set, is the members' -log-level.
	logLevel string
	etcd     []*etcdMember
	members  []*member
	// procs is every process started, for the cleanup; mounted every
	// disk mounted.
	procs   []*proc
	mounted []string
}

// newCluster lays out the cluster of schedule s, whose members serve
// app, under dir: s.Config.Members members and s.Config.Etcd etcd
// members, and a disk of its own for each member s fills. Nothing runs
// yet and nothing is mounted.
func newCluster(bins binaries, app, dir string, tl *timeline, nw *network, s schedule.Schedule) (*cluster, error) {
	c := &cluster{bins: bins, app: app, seed: s.Seed, dir: dir, tl: tl, net: nw, leaseTTL: s.Config.LeaseTTL}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	for i := 1; i <= s.Config.Etcd; i++ {
		em := &etcdMember{
			name: fmt.Sprintf("e%d", i),
			host: nw.etcdHost(i),
			dir:  filepath.Join(dir, fmt.Sprintf("etcd-%d", i)),
			log:  filepath.Join(dir, "logs", fmt.Sprintf("etcd-%d.log", i)),
		}
		var err error
		if em.client, em.peer, err = nw.etcdAddrs(i); err != nil {
			return nil, err
		}
		c.etcd = append(c.etcd, em)
	}
	filled := filledMembers(s)
	for i := 1; i <= s.Config.Members; i++ {
		m := &member{
			id:   i,
			host: nw.memberHost(i),
			dir:  filepath.Join(dir, fmt.Sprintf("member-%d", i)),
			log:  filepath.Join(dir, "logs", fmt.Sprintf("member-%d.log", i)),
		}
		if slices.Contains(filled, i) {
			m.disk = filepath.Join(dir, fmt.Sprintf("disk-%d", i))
			m.dir = filepath.Join(m.disk, "data")
		}
		var err error
		if m.http, m.transport, err = nw.memberAddrs(i); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
	}
	return c, nil
}

// close kills every process still running, then unmounts the members'
// disks.
func (c *cluster) close() {
	for _, p := range c.procs {
		if !p.done() {
			p.kill()
		}
	}
	c.unmountDisks()
}

// watch records p's exit in the timeline.
func (c *cluster) watch(p *proc) {
	c.procs = append(c.procs, p)
	c.tl.add("%v started", p)
	go func() {
		<-p.exited
		status := "exited"
		if p.err != nil {
			status = p.err.Error()
		}
		c.tl.add("%v: %s", p, status)
	}()
}

func (c *cluster) etcdEndpoints() []string {
	var out []string
	for _, em := range c.etcd {
		out = append(out, "http://"+em.client)
	}
	return out
}

// startEtcd starts etcd member i (from 1) on its directory.
func (c *cluster) startEtcd(i int) error {
	em := c.etcd[i-1]
	var peers []string
	for _, o := range c.etcd {
		peers = append(peers, o.name+"=http://"+o.peer)
	}
	p, err := startProc("etcd "+em.name, em.log, c.net.command(em.host, c.bins.etcd,
		"-name", em.name, "-data", em.dir, "-client", em.client, "-peer", em.peer, "-cluster", strings.Join(peers, ",")))
	if err != nil {
		return err
	}
	em.proc, em.paused = p, false
	c.watch(p)
	return nil
}

// startEtcdCluster starts every etcd member and waits until the cluster
// serves a write.
func (c *cluster) startEtcdCluster(ctx context.Context) error {
	for i := range c.etcd {
		if err := c.startEtcd(i + 1); err != nil {
			return err
		}
	}
	dial := c.net.dial
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.etcdEndpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, etcdReadyTimeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(pctx, "/jepsen/ready", "1")
		pcancel()
		if err == nil {
			c.tl.add("etcd cluster serves")
			return nil
		}
		for _, em := range c.etcd {
			if e := em.proc.unexpectedExit(); e != nil {
				return fmt.Errorf("etcd cluster: %w (log: %s)", e, em.log)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd cluster did not serve within %v: %w", etcdReadyTimeout, err)
		case <-time.After(readyPoll):
		}
	}
}

// startMember starts member id on its directory (wiped first if wipe).
func (c *cluster) startMember(id int, wipe bool) error {
	m := c.members[id-1]
	if wipe {
		if err := os.RemoveAll(m.dir); err != nil {
			return err
		}
		c.tl.add("member %d: data directory wiped", id)
	}
	m.runs++
	bin, args := c.bins.convoy, []string{"node", "-app", c.app, "-http-url", m.url()}
	if c.app == workloadGroup {
		// Each run records to a file of its own, beside the logs (off
		// the member's disk, which a fault may fill).
		out := filepath.Join(c.dir, "logs", fmt.Sprintf("member-%d-run-%d.jsonl", id, m.runs))
		m.outs = append(m.outs, out)
		bin, args = c.bins.group, []string{"-run", strconv.Itoa(m.runs), "-seed", strconv.FormatInt(c.seed, 10), "-out", out}
	}
	args = append(args,
		"-id", strconv.Itoa(id),
		"-etcd", strings.Join(c.etcdEndpoints(), ","), "-prefix", "/jepsen/",
		"-data", m.dir, "-listen", m.transport, "-http", m.http,
		"-initial", strconv.Itoa(len(c.members)), "-lease-ttl", c.leaseTTL.String(),
	)
	if c.logLevel != "" {
		args = append(args, "-log-level", c.logLevel)
	}
	if m.clock.Offset != 0 {
		args = append(args, "-clock-offset", m.clock.Offset.String())
	}
	if m.clock.Drift != 0 {
		args = append(args, "-clock-drift-ppm", strconv.Itoa(m.clock.Drift))
	}
	p, err := startProc(fmt.Sprintf("member %d", id), m.log, c.net.command(m.host, bin, args...))
	if err != nil {
		return err
	}
	m.proc, m.paused, m.running = p, false, m.clock
	if m.full {
		// Its log may fail, ending its group, and the process with it.
		p.allowExit()
	}
	c.watch(p)
	return nil
}

// startMembers starts every member and waits until each serves.
func (c *cluster) startMembers(ctx context.Context, hc *http.Client) error {
	for _, m := range c.members {
		if err := c.startMember(m.id, false); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, membersReadyTimeout)
	defer cancel()
	for _, m := range c.members {
		for {
			st, err := memberStatus(ctx, hc, m.url())
			if err == nil && st.Serving {
				break
			}
			if e := m.proc.unexpectedExit(); e != nil {
				return fmt.Errorf("%w (log: %s)", e, m.log)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("member %d did not serve within %v (last: %+v, %v)", m.id, membersReadyTimeout, st, err)
			case <-time.After(readyPoll):
			}
		}
	}
	c.tl.add("every member serves")
	return nil
}

// status is what GET /status answers.
type status struct {
	ID      uint64   `json:"id"`
	Epoch   uint64   `json:"epoch"`
	Members []uint64 `json:"members"`
	Serving bool     `json:"serving"`
	Applied uint64   `json:"applied"`
}

func memberStatus(ctx context.Context, hc *http.Client, url string) (status, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var st status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// pause stops p with SIGSTOP, cont resumes it.
func pause(p *proc) error { return p.signal(syscall.SIGSTOP) }
func cont(p *proc) error  { return p.signal(syscall.SIGCONT) }

// unexpectedExits lists the processes of the latest runs that exited
// without being killed.
func (c *cluster) unexpectedExits() error {
	var errs []error
	for _, p := range c.procs {
		if err := p.unexpectedExit(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
