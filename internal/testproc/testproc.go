// Package testproc lets a test binary be the program of the processes its
// tests start. A test that needs a member as a separate process starts
// its own binary again with an environment variable that says so; the
// package's TestMain calls Run first, which runs the process's body
// instead of the tests and exits. Summaries starts such processes and
// collects what each reports.
package testproc

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
)

// Run runs body and exits when the environment variable env is set, and
// returns at once otherwise (the caller then runs its tests). body gets a
// context that ends after limit; the process exits with status 0 when
// body returns nil and 1, printing the error to standard error, when it
// does not. A body that outlives its context by a minute (a hang) ends
// the process with status 2, so that a process whose test died does not
// stay behind.
func Run(env string, limit time.Duration, body func(ctx context.Context) error) {
	if os.Getenv(env) == "" {
		return
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), limit,
		fmt.Errorf("%s: ran for %v", os.Args[0], limit))
	hang := time.AfterFunc(limit+time.Minute, func() {
		fmt.Fprintf(os.Stderr, "%s: still running %v after its limit of %v\n", os.Args[0], time.Minute, limit)
		os.Exit(2)
	})
	err := body(ctx)
	hang.Stop()
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Summaries starts n processes of this binary, process i (from 0) with
// env(i) added to this process's environment, and returns, by process,
// what each printed on the first line of its standard output that starts
// with prefix, decoded from the JSON that follows. A process is told to
// exit by the end of its standard input, once every process has printed
// its summary or the test failed; each must then exit with status 0.
// Standard error and the other lines of standard output are shown if the
// test fails. It fails the test if some process gives no summary within
// timeout.
func Summaries[S any](t *testing.T, timeout time.Duration, n int, prefix string, env func(i int) []string) []S {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	type report struct {
		i   int
		sum S
		err error
	}
	reports := make(chan report, n)
	children := make([]*child, n)
	var readers sync.WaitGroup
	// However the test ends, stop every process and reap it: closing
	// stdin tells one that has reported to exit; a failed test kills them.
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
		for i, c := range children {
			if c == nil {
				continue
			}
			if err := c.cmd.Wait(); err != nil && !t.Failed() {
				t.Errorf("process %d: %v\n%s", i, err, c.logged())
			}
		}
	}()
	for i := range n {
		c := &child{cmd: exec.CommandContext(ctx, os.Args[0])}
		c.cmd.Env = append(os.Environ(), env(i)...)
		c.cmd.Stderr = &c.Output
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start process %d: %v", i, err)
		}
		children[i] = c
		readers.Go(func() {
			// One report: the summary as soon as it arrives (the process
			// waits for the others before it exits), or why there is none
			// once its output ends.
			sent := false
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 64<<20)
			for sc.Scan() {
				line, ok := bytes.CutPrefix(sc.Bytes(), []byte(prefix))
				if !ok || sent {
					c.Write(append(sc.Bytes(), '\n'))
					continue
				}
				r := report{i: i}
				r.err = json.Unmarshal(line, &r.sum)
				reports <- r
				sent = true
			}
			if !sent {
				err := errors.New("exited without a summary")
				if serr := sc.Err(); serr != nil {
					err = fmt.Errorf("reading output: %w", serr)
				}
				reports <- report{i: i, err: err}
			}
		})
	}
	sums := make([]S, n)
	for range n {
		select {
		case r := <-reports:
			if r.err != nil {
				t.Fatalf("process %d: %v\n%s", r.i, r.err, children[r.i].logged())
			}
			sums[r.i] = r.sum
		case <-ctx.Done():
			var out strings.Builder
			for i, c := range children {
				fmt.Fprintf(&out, "--- process %d:\n%s", i, c.logged())
			}
			t.Fatalf("no summary from every process after %v:\n%s", timeout, out.String())
		}
	}
	return sums
}

// child is one process Summaries started; it collects the process's
// output other than its summary.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	Output
}

func (c *child) logged() string { return string(c.Bytes()) }

// Output collects a process's output: a bytes.Buffer safe for concurrent
// use.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// Bytes returns a copy of what was written.
func (o *Output) Bytes() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.buf.Bytes())
}

// FreeAddrs returns n loopback addresses whose ports were free a moment
// ago.
func FreeAddrs(t *testing.T, n int) []string {
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
