package childproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ErrKilled is wrapped by the error of Stop and StopAll for a child that
// did not exit within the grace period after its standard input closed,
// and was killed.
var ErrKilled = errors.New("childproc: killed after the grace period")

// stderrTail is how much of a child's standard error a Proc keeps.
const stderrTail = 4 << 10

// maxLine bounds a line on a child's standard output. A longer line ends
// the reading: the rest of the output is discarded and the child's error
// says so.
const maxLine = 1 << 20

// Options configures a child process. The zero value is valid.
type Options struct {
	// Name labels the child in errors ("replica 2"); empty means the base
	// name of the command's path.
	Name string
	// Env is added to the environment the command has (by default this
	// process's).
	Env []string
	// Stderr receives the child's standard error as it comes, besides the
	// tail the Proc keeps; nil keeps only the tail. Writes come from one
	// goroutine of the Proc's.
	Stderr io.Writer
	// Line, if set, is called with each line the child prints on standard
	// output, without its newline, in order, from one goroutine. The
	// slice is valid only during the call. The child blocks on its output
	// while Line runs.
	Line func(line []byte)
	// Ready, if set, says whether a line of standard output reports the
	// child ready; WaitReady returns once the first such line came. It is
	// called from the same goroutine as Line, after it, and until it
	// returns true once.
	Ready func(line []byte) bool
	// Exited, if set, is called once the child's output ended and the
	// child was reaped, after the last call to Line, with what Err then
	// returns; Done closes after it returns.
	Exited func(err error)
}

// Proc is a started child process. Its methods are safe for concurrent
// use.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	// ready is closed at the first ready line, done once the output ended
	// and the child was reaped.
	ready, done chan struct{}
	// waitErr is how the child ended (Wait's error, joined with one from
	// reading its output); written before done closes.
	waitErr error
	// killed is set by Kill: the child's end is no failure.
	killed atomic.Bool

	mu struct {
		sync.Mutex
		stdin io.WriteCloser // nil once closed
	}
}

// Start starts cmd, which must not be started yet and whose Stdin, Stdout
// and Stderr must be unset, as a child described by o. It sets
// cmd.SysProcAttr to SysProcAttr() unless it is set already.
func Start(cmd *exec.Cmd, o Options) (*Proc, error) {
	p := &Proc{
		name:   o.Name,
		cmd:    cmd,
		stderr: &tailBuffer{max: stderrTail},
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
	}
	if p.name == "" {
		p.name = filepath.Base(cmd.Path)
	}
	if len(o.Env) > 0 {
		cmd.Env = append(cmd.Environ(), o.Env...)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = SysProcAttr()
	}
	cmd.Stderr = p.stderr
	if o.Stderr != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, o.Stderr)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdin.Close()
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	p.mu.stdin = stdin
	go p.read(stdout, o)
	return p, nil
}

// read hands the child's output to o.Line and o.Ready line by line, then
// reaps the child.
func (p *Proc) read(out io.Reader, o Options) {
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, maxLine)
	ready := o.Ready == nil
	for sc.Scan() {
		if o.Line != nil {
			o.Line(sc.Bytes())
		}
		if !ready && o.Ready(sc.Bytes()) {
			ready = true
			close(p.ready)
		}
	}
	var errs []error
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("reading its output: %w", err))
		// Drain the pipe, so that the child does not block on it.
		_, _ = io.Copy(io.Discard, out)
	}
	p.waitErr = errors.Join(append([]error{p.cmd.Wait()}, errs...)...)
	if o.Exited != nil {
		o.Exited(p.Err())
	}
	close(p.done)
}

// WaitReady waits until the child printed a line that Options.Ready
// accepts, and returns nil then. It returns an error if the child exits
// first, or ctx ends first (with the context's cause), or Options.Ready
// is nil.
func (p *Proc) WaitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		// The ready line came in just before the end.
		select {
		case <-p.ready:
			return nil
		default:
		}
		if p.waitErr == nil {
			return p.withTail(fmt.Errorf("%s exited before it was ready", p.name))
		}
		return p.withTail(fmt.Errorf("%s exited before it was ready: %w", p.name, p.waitErr))
	case <-ctx.Done():
		return p.withTail(fmt.Errorf("%s not ready: %w", p.name, context.Cause(ctx)))
	}
}

// Write writes b to the child's standard input. It fails once Stop closed
// it.
func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.stdin == nil {
		return 0, fmt.Errorf("%s: its standard input is closed", p.name)
	}
	return p.mu.stdin.Write(b)
}

// Done returns a channel closed once the child's output ended and the
// child was reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns how the child ended, once Done is closed (nil before): nil
// if it exited with status 0 or was ended by Kill, otherwise an error
// naming the child, with the tail of its standard error.
func (p *Proc) Err() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	if p.waitErr == nil || p.killed.Load() {
		return nil
	}
	return p.withTail(fmt.Errorf("%s: %w", p.name, p.waitErr))
}

// Stop closes the child's standard input, which asks it to exit, and
// waits until it is reaped. It kills the child if it has not exited
// within grace, and returns an error wrapping ErrKilled then; otherwise it
// returns Err. Stop may be called more than once.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	if p.mu.stdin != nil {
		_ = p.mu.stdin.Close()
		p.mu.stdin = nil
	}
	p.mu.Unlock()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.Err()
	case <-t.C:
	}
	_ = kill(p.cmd.Process)
	<-p.done
	if p.killed.Load() {
		return nil
	}
	return p.withTail(fmt.Errorf("%s did not exit within %v of its standard input closing: %w", p.name, grace, ErrKilled))
}

// Kill sends the child SIGKILL, to its whole process group where it has
// one (see SysProcAttr), and returns without waiting: Done closes once it
// is reaped. A child ended so ended on purpose: Err and Stop report no
// error for it.
func (p *Proc) Kill() error {
	p.killed.Store(true)
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := kill(p.cmd.Process); err != nil {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	return nil
}

// Signal sends sig to the child alone, as a request: what follows is up
// to the child (a Go program that stops on os.Interrupt, for one).
func (p *Proc) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

// CPU returns the user and system CPU time the child has used so far, all
// its threads together; 0 once it is reaped, or where the system cannot
// tell (anywhere but Linux).
func (p *Proc) CPU() time.Duration {
	select {
	case <-p.done:
		return 0
	default:
		return processCPU(p.cmd.Process.Pid)
	}
}

// withTail appends the tail of the child's standard error to err's
// message, if there is any.
func (p *Proc) withTail(err error) error {
	if tail := p.stderr.String(); tail != "" {
		return fmt.Errorf("%w: %s", err, tail)
	}
	return err
}

// StopAll stops every one of ps at once, as Stop does, and returns their
// errors joined.
func StopAll(grace time.Duration, ps ...*Proc) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.Stop(grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
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

// String returns what the buffer keeps, without surrounding white space.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.buf))
}
