package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/internal/rdmacount"
	"github.com/convoy-gcs/convoy/rdma"
)

const psnodeUsage = `Usage:
  convoy bench psnode -id N -listen ADDR -peers ID=ADDR,... [bench pubsub flags]

Runs one member of the group of "convoy bench pubsub -netns", which starts
these itself. The member listens on -listen (tcp transport), opens the
group with every member of -peers, and prints JSON lines on stdout:
"open" once the group is open; then, after a line {"start": T} on stdin
(T a wall-clock time in Unix nanoseconds), it runs the topics phase from
T and the group phase after it, and prints a "result" line for each with
what it measured. It closes the group and exits once its stdin ends.
`

// Events a psnode prints.
const (
	psOpen   = "open"
	psResult = "result"
	psError  = "error"
)

// psEvent is a line a psnode prints.
type psEvent struct {
	Event string      `json:"event"`
	Node  rdma.NodeID `json:"node"`
	Phase string      `json:"phase,omitempty"` // of a result
	Raw   *psRaw      `json:"raw,omitempty"`
	Err   string      `json:"err,omitempty"`
}

// psStart is the line that starts a psnode's phases.
type psStart struct {
	Start int64 `json:"start"` // wall clock, Unix nanoseconds
}

// psPhaseGap separates the phases of the member processes: the first
// phase's publishers stop, and their last messages are delivered, before
// the second starts.
const psPhaseGap = 500 * time.Millisecond

// psStartDelay is how far ahead of now the coordinator sets the start:
// time for its line to reach every member.
const psStartDelay = 200 * time.Millisecond

// runBenchPSNode is "convoy bench psnode": the body of a member process.
func runBenchPSNode(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench psnode", psnodeUsage, c)
	id := fs.Uint64("id", 0, "this member's id")
	listen := fs.String("listen", "", "address to listen on, host:port")
	peersFlag := fs.String("peers", "", "every member's address, as id=host:port,...")
	b := &pubsubBench{}
	size := fs.Int("size", 1024, "message size in bytes")
	fs.IntVar(&b.nodes, "nodes", 0, "members of the group")
	fs.IntVar(&b.topics, "topics", 0, "topics")
	fs.IntVar(&b.subscribers, "subscribers", 0, "subscribers of each topic")
	fs.DurationVar(&b.duration, "duration", 0, "how long each phase measures")
	fs.DurationVar(&b.warmup, "warmup", 0, "how long each phase runs before it measures")
	fs.IntVar(&b.rate, "publish-rate", 0, "messages per second this member publishes; 0 as fast as its window lets it")
	fs.IntVar(&b.window, "window", 1024, "Config.WindowMessages")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	b.size = *size
	if *id == 0 || *listen == "" || b.nodes < 2 || b.topics < 1 || b.subscribers < 1 || b.duration <= 0 {
		return usagef("bench psnode: -id, -listen, -nodes, -topics, -subscribers and -duration are required")
	}
	book, members, err := parsePeers("bench psnode", *peersFlag)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, b.verbose).With("node", *id)
	self := rdma.NodeID(*id)
	var mu sync.Mutex
	enc := json.NewEncoder(c.stdout)
	emit := func(ev psEvent) {
		mu.Lock()
		defer mu.Unlock()
		ev.Node = self
		if err := enc.Encode(ev); err != nil {
			log.Warn("writing event", "err", err)
		}
	}
	if err := b.member(ctx, c, self, *listen, book, members, emit); err != nil {
		emit(psEvent{Event: psError, Err: err.Error()})
		return err
	}
	return nil
}

// member runs the member: it opens the group, waits for the start, runs
// both phases, reports them, and closes the group when stdin ends.
func (b *pubsubBench) member(ctx context.Context, c *cli, self rdma.NodeID, listen string, book *addrBook, members []convoy.Member, emit func(psEvent)) (err error) {
	log := newLogger(c.stderr, b.verbose).With("node", self)
	ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: self, ListenAddr: listen, Resolve: book.resolve, Logger: log})
	if err != nil {
		return err
	}
	cl, err := b.open(ctx, log, members, []*rdmacount.Endpoint{rdmacount.Wrap(ep)})
	if err != nil {
		return err
	}
	// Once its results are out, the member ends when the coordinator says
	// so; the others close their groups meanwhile, which fails this one's,
	// so closing's error then says nothing.
	reported := false
	defer func() {
		if cerr := cl.close(); cerr != nil && !reported {
			err = errors.Join(err, cerr)
		}
	}()
	emit(psEvent{Event: psOpen})
	sc := bufio.NewScanner(c.stdin)
	if !sc.Scan() {
		return fmt.Errorf("stdin ended before the start: %v", sc.Err())
	}
	var st psStart
	if err := json.Unmarshal(sc.Bytes(), &st); err != nil || st.Start == 0 {
		return fmt.Errorf("bad start line %q: %v", sc.Text(), err)
	}
	begin := time.Unix(0, st.Start)
	topics, err := b.phase(ctx, cl, true, begin)
	if err != nil {
		return fmt.Errorf("topics phase: %w", err)
	}
	group, err := b.phase(ctx, cl, false, begin.Add(b.warmup+b.duration+psPhaseGap))
	if err != nil {
		return fmt.Errorf("group phase: %w", err)
	}
	emit(psEvent{Event: psResult, Phase: "topics", Raw: &topics})
	emit(psEvent{Event: psResult, Phase: "group", Raw: &group})
	reported = true
	for sc.Scan() {
	}
	return nil
}

// runNetns runs every member as a process in a network namespace of its
// own, behind a switch whose links are shaped to -rate, and merges what
// they measured.
func (b *pubsubBench) runNetns(ctx context.Context, c *cli) (topics, group psRaw, err error) {
	log := newLogger(c.stderr, b.verbose)
	if err := netns.Check(); err != nil {
		return psRaw{}, psRaw{}, fmt.Errorf("-netns: %w", err)
	}
	exe := c.self.path
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return psRaw{}, psRaw{}, fmt.Errorf("-netns: finding this program to run members: %w", err)
		}
	}
	sw, err := netns.New(ctx, netns.Config{Hosts: b.nodes, RateMbit: b.linkMbit, Logger: log})
	if err != nil {
		return psRaw{}, psRaw{}, err
	}
	cs := newChildren[psEvent](log, eventQueueLen, c.self, c.stderr)
	defer func() { err = errors.Join(err, cs.close(nodeExitTimeout), sw.Close()) }()
	peers, addrs := netnsPeers(sw)
	for i, addr := range addrs {
		args := []string{"bench", "psnode",
			"-id", strconv.Itoa(int(nodeID(i))),
			"-listen", addr,
			"-peers", peers,
			"-nodes", strconv.Itoa(b.nodes), "-topics", strconv.Itoa(b.topics), "-subscribers", strconv.Itoa(b.subscribers),
			"-size", strconv.Itoa(b.size), "-duration", b.duration.String(), "-warmup", b.warmup.String(),
			"-publish-rate", strconv.Itoa(b.rate), "-window", strconv.Itoa(b.window),
		}
		if b.verbose {
			args = append(args, "-v")
		}
		id := nodeID(i)
		name := fmt.Sprintf("member %d", id)
		_, err := cs.start(sw.Command(context.Background(), i, exe, args...), name, func(err error) psEvent {
			return psEvent{Event: psError, Node: id, Err: "process ended: " + errText(err)}
		})
		if err != nil {
			return psRaw{}, psRaw{}, err
		}
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	for opened := 0; opened < b.nodes; {
		ev, err := cs.next(octx, "waiting for the members to open the group")
		if err != nil {
			return psRaw{}, psRaw{}, err
		}
		switch ev.Event {
		case psOpen:
			opened++
		case psError:
			return psRaw{}, psRaw{}, fmt.Errorf("member %d: %s", ev.Node, ev.Err)
		}
	}
	line, err := json.Marshal(psStart{Start: time.Now().Add(psStartDelay).UnixNano()})
	if err != nil {
		return psRaw{}, psRaw{}, err
	}
	for _, p := range cs.procs {
		if _, err := p.Write(append(line, '\n')); err != nil {
			return psRaw{}, psRaw{}, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, psStartDelay+2*(b.warmup+b.duration)+psPhaseGap+openTimeout)
	defer cancel()
	for got := 0; got < 2*b.nodes; {
		ev, err := cs.next(rctx, "waiting for the members' results")
		if err != nil {
			return psRaw{}, psRaw{}, err
		}
		switch {
		case ev.Event == psError:
			return psRaw{}, psRaw{}, fmt.Errorf("member %d: %s", ev.Node, ev.Err)
		case ev.Event != psResult || ev.Raw == nil:
			continue
		case ev.Phase == "topics":
			topics.merge(ev.Raw)
		case ev.Phase == "group":
			group.merge(ev.Raw)
		default:
			return psRaw{}, psRaw{}, fmt.Errorf("member %d: result of an unknown phase %q", ev.Node, ev.Phase)
		}
		got++
	}
	return topics, group, nil
}
