package orderproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/testproc"
)

// TestMain runs the tests, or, in a process started as a member (see
// TestProcesses), the member.
func TestMain(m *testing.M) {
	testproc.Run(envMember, memberTimeout, func(ctx context.Context) error {
		s, err := memberSpecFromEnv()
		if err != nil {
			return err
		}
		if err := runMember(ctx, s, os.Stdin, os.Stdout); err != nil {
			return fmt.Errorf("member %d: %w", s.self, err)
		}
		return nil
	})
	os.Exit(m.Run())
}

// TestProcesses runs a group whose members are separate processes, all
// sending at once, and checks that every member delivers every message
// once, each sender's in the order sent, and in atomic and total mode all
// in the same order.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes; skipped with -short")
	}
	for _, tc := range []struct {
		mode    convoy.Mode
		members int
		count   int
	}{
		{convoy.Atomic, 4, 2000},
		{convoy.TotalOrder, 3, 2000},
		{convoy.Unordered, 3, 2000},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			sums := runGroup(t, tc.mode, tc.members, tc.count)
			checkSummaries(t, tc.mode, sums, tc.count)
		})
	}
}

// groupTimeout bounds one group's run, from starting the processes to
// their exit.
const groupTimeout = memberTimeout + 30*time.Second

// child is one member process.
type child struct {
	id     convoy.NodeID
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	output bytes.Buffer // stdout lines other than the summary, and stderr
	mu     sync.Mutex   // guards output
}

func (c *child) log(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.output.WriteString(line)
	c.output.WriteByte('\n')
}

func (c *child) logged() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.output.String()
}

// report is a member's summary, or why there is none.
type report struct {
	id  convoy.NodeID
	sum summary
	err error
}

// runGroup starts n member processes and returns their summaries, by rank.
func runGroup(t *testing.T, mode convoy.Mode, n, count int) []summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), groupTimeout)
	defer cancel()
	members := make([]convoy.Member, n)
	for i, addr := range freeAddrs(t, n) {
		members[i] = convoy.Member{ID: convoy.NodeID(i + 1), Addr: addr}
	}

	reports := make(chan report, n)
	children := make([]*child, n)
	var readers sync.WaitGroup
	for i, m := range members {
		c := &child{id: m.ID}
		c.cmd = exec.CommandContext(ctx, os.Args[0])
		c.cmd.Env = append(os.Environ(), encodeSpec(m.ID, members, mode, count)...)
		c.cmd.Stderr = writerFunc(func(p []byte) (int, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.output.Write(p)
		})
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start member %d: %v", m.ID, err)
		}
		children[i] = c
		readers.Go(func() { c.read(stdout, reports) })
	}
	// However the test ends, stop every member and reap it: closing stdin
	// tells a member that has reported to exit; a failed test kills them.
	defer func() {
		if t.Failed() {
			cancel()
		}
		for _, c := range children {
			if c != nil {
				c.stdin.Close()
			}
		}
		readers.Wait()
		for _, c := range children {
			if c == nil {
				continue
			}
			if err := c.cmd.Wait(); err != nil && !t.Failed() {
				t.Errorf("member %d: %v\n%s", c.id, err, c.logged())
			}
		}
	}()

	sums := make([]summary, n)
	for range n {
		select {
		case r := <-reports:
			if r.err != nil {
				t.Fatalf("member %d: %v\n%s", r.id, r.err, children[r.id-1].logged())
			}
			sums[r.id-1] = r.sum
		case <-ctx.Done():
			var out strings.Builder
			for _, c := range children {
				fmt.Fprintf(&out, "--- member %d:\n%s", c.id, c.logged())
			}
			t.Fatalf("no summary from every member after %v:\n%s", groupTimeout, out.String())
		}
	}
	return sums
}

// read reads the child's stdout to its end. It sends one report: the
// summary as soon as it arrives (the member waits for the others before
// it exits), or why there is none once the output ends. Other lines are
// kept for diagnostics.
func (c *child) read(stdout io.Reader, reports chan<- report) {
	sent := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), summaryPrefix)
		if !ok || sent {
			c.log(sc.Text())
			continue
		}
		r := report{id: c.id}
		r.err = json.Unmarshal([]byte(line), &r.sum)
		if r.err == nil && r.sum.Member != c.id {
			r.err = fmt.Errorf("summary names member %d", r.sum.Member)
		}
		reports <- r
		sent = true
	}
	if sent {
		return
	}
	err := errors.New("exited without a summary")
	if serr := sc.Err(); serr != nil {
		err = fmt.Errorf("reading output: %w", serr)
	}
	reports <- report{id: c.id, err: err}
}

// checkSummaries compares the members' summaries: each delivered every
// message exactly once in its sender's order, and in atomic and total mode
// all delivered the same sequence.
func checkSummaries(t *testing.T, mode convoy.Mode, sums []summary, count int) {
	t.Helper()
	total := count * len(sums)
	for _, s := range sums {
		if s.Err != "" {
			t.Errorf("member %d: %s", s.Member, s.Err)
			continue
		}
		if s.Count != total {
			t.Errorf("member %d delivered %d messages, want %d", s.Member, s.Count, total)
		}
		for r, n := range s.PerSender {
			if n != uint64(count) {
				t.Errorf("member %d delivered %d messages from member %d, want %d", s.Member, n, r+1, count)
			}
		}
	}
	if mode == convoy.Unordered {
		return
	}
	first := sums[0]
	for _, s := range sums[1:] {
		if s.Hash == first.Hash {
			continue
		}
		t.Errorf("members %d and %d delivered different sequences: %s", first.Member, s.Member, divergence(first, s))
	}
}

// divergence says where two members' delivery sequences first differ, at
// checkpoint resolution.
func divergence(a, b summary) string {
	for i := range min(len(a.Checkpoints), len(b.Checkpoints)) {
		if a.Checkpoints[i] != b.Checkpoints[i] {
			return fmt.Sprintf("within deliveries %d to %d", i*checkpointEvery+1, (i+1)*checkpointEvery)
		}
	}
	return fmt.Sprintf("after delivery %d", min(len(a.Checkpoints), len(b.Checkpoints))*checkpointEvery)
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// writerFunc adapts a function to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
