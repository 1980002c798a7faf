package childproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childEnv makes the test binary act as a child: its value names the
// behaviour (see child).
const childEnv = "CHILDPROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// child plays a child process and returns its exit status:
//
//	echo    prints "ready", then "echo: " and each line of its standard input, until it closes
//	fail    writes "boom" on standard error and exits with status 3 before it is ready
//	late    prints "ready", fails with status 1 once its standard input closes
//	linger  prints "ready" and ignores its standard input closing
//	silent  prints nothing; exits once its standard input closes
//	lines   prints three lines and exits
//	burn    uses 50ms of CPU time, prints "ready" and exits once its standard input closes
func child(mode string) int {
	waitStdin := func() { _, _ = bufio.NewReader(os.Stdin).WriteTo(devNull{}) }
	switch mode {
	case "echo":
		fmt.Println("ready")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("echo: " + sc.Text())
		}
	case "fail":
		fmt.Fprintln(os.Stderr, "boom")
		return 3
	case "late":
		fmt.Println("ready")
		waitStdin()
		fmt.Fprintln(os.Stderr, "bad end")
		return 1
	case "linger":
		fmt.Println("ready")
		waitStdin()
		time.Sleep(time.Hour)
	case "silent":
		waitStdin()
	case "lines":
		fmt.Println("one")
		fmt.Println("two")
		fmt.Println("three")
	case "burn":
		var ru syscall.Rusage
		for {
			if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil || ru.Utime.Nano()+ru.Stime.Nano() > int64(50*time.Millisecond) {
				break
			}
		}
		fmt.Println("ready")
		waitStdin()
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 2
	}
	return 0
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// startChild starts the test binary as a child in mode, with o (its Env
// and Ready set here).
func startChild(t *testing.T, mode string, o Options) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.Env = append(o.Env, childEnv+"="+mode)
	if o.Ready == nil {
		o.Ready = func(line []byte) bool { return string(line) == "ready" }
	}
	p, err := Start(exec.Command(exe), o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLifecycle starts a child in each mode, waits until it is ready and
// stops it, checking what each step returns.
func TestLifecycle(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		grace time.Duration
		// readyErr and stopErr are in the errors' messages; "" means no
		// error.
		readyErr, stopErr string
		killed            bool // Stop's error wraps ErrKilled
	}{
		{mode: "echo", grace: 10 * time.Second},
		{mode: "fail", grace: 10 * time.Second, readyErr: "child fail exited before it was ready: exit status 3: boom", stopErr: "child fail: exit status 3: boom"},
		{mode: "late", grace: 10 * time.Second, stopErr: "child late: exit status 1: bad end"},
		{mode: "linger", grace: 100 * time.Millisecond, stopErr: "child linger did not exit within 100ms of its standard input closing", killed: true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p := startChild(t, tc.mode, Options{Name: "child " + tc.mode})
			if err := p.WaitReady(context.Background()); !matches(err, tc.readyErr) {
				t.Errorf("WaitReady: %v, want %q", err, tc.readyErr)
			}
			err := p.Stop(tc.grace)
			if !matches(err, tc.stopErr) || errors.Is(err, ErrKilled) != tc.killed {
				t.Errorf("Stop: %v, want %q (killed: %v)", err, tc.stopErr, tc.killed)
			}
			if err := p.Stop(tc.grace); !matches(err, tc.stopErr) && !tc.killed {
				t.Errorf("Stop again: %v, want %q", err, tc.stopErr)
			}
			select {
			case <-p.Done():
			default:
				t.Error("Done not closed after Stop")
			}
		})
	}
}

// matches reports whether err's message holds want, or err is nil if want
// is empty.
func matches(err error, want string) bool {
	if want == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), want)
}

// TestLinesAndExited checks that Line sees every line in order and Exited
// comes after the last, before Done.
func TestLinesAndExited(t *testing.T) {
	var (
		mu     sync.Mutex
		events []string
	)
	add := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s)
	}
	p := startChild(t, "lines", Options{
		Line:   func(line []byte) { add(string(line)) },
		Exited: func(err error) { add(fmt.Sprintf("exited %v", err)) },
	})
	<-p.Done()
	mu.Lock()
	got := slices.Clone(events)
	mu.Unlock()
	if want := []string{"one", "two", "three", "exited <nil>"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if err := p.WaitReady(context.Background()); err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("WaitReady of a child without a ready line: %v", err)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestWrite sends lines to a child's standard input and reads their echo.
func TestWrite(t *testing.T) {
	echoes := make(chan string, 2)
	p := startChild(t, "echo", Options{Line: func(line []byte) {
		if s, ok := strings.CutPrefix(string(line), "echo: "); ok {
			echoes <- s
		}
	}})
	for _, s := range []string{"hello", "world"} {
		if _, err := p.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
		if got := <-echoes; got != s {
			t.Errorf("echo %q, want %q", got, s)
		}
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := p.Write([]byte("late\n")); err == nil {
		t.Error("Write after Stop succeeded")
	}
}

// TestKill kills a child that would not exit: its end is no failure.
func TestKill(t *testing.T) {
	p := startChild(t, "linger", Options{})
	if err := p.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Err(); err != nil {
		t.Errorf("Err after Kill: %v", err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop after Kill: %v", err)
	}
}

// TestSignal interrupts a child that does not handle the signal: it dies
// of it.
func TestSignal(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("this system has no interrupt signal (os.Interrupt cannot be sent on Windows)")
	}
	p := startChild(t, "linger", Options{})
	if err := p.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Errorf("Err after an interrupt: %v", err)
	}
	if err := p.Signal(os.Interrupt); err != nil {
		t.Errorf("Signal after the end: %v", err)
	}
	_ = p.Stop(time.Second)
}

// TestWaitReadyContext gives up on a child that never reports ready.
func TestWaitReadyContext(t *testing.T) {
	p := startChild(t, "silent", Options{Name: "quiet one"})
	cause := errors.New("took too long")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, cause)
	defer cancel()
	if err := p.WaitReady(ctx); !errors.Is(err, cause) || !strings.Contains(err.Error(), "quiet one not ready") {
		t.Errorf("WaitReady: %v, want %v", err, cause)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestStopAll stops children at once and joins their errors.
func TestStopAll(t *testing.T) {
	ps := []*Proc{
		startChild(t, "echo", Options{Name: "a"}),
		startChild(t, "late", Options{Name: "b"}),
		startChild(t, "silent", Options{Name: "c"}),
	}
	for _, p := range ps[:2] {
		if err := p.WaitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	err := StopAll(10*time.Second, ps...)
	if err == nil || !strings.Contains(err.Error(), "b: exit status 1") || strings.Contains(err.Error(), "a:") || strings.Contains(err.Error(), "c:") {
		t.Errorf("StopAll: %v, want only b's failure", err)
	}
}

func TestCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("this system does not report a child's CPU time (/proc is Linux only)")
	}
	p := startChild(t, "burn", Options{})
	if err := p.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The child used at least 50ms; /proc counts in 10ms ticks.
	if cpu := p.CPU(); cpu < 40*time.Millisecond {
		t.Errorf("CPU %v, want at least 40ms", cpu)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if cpu := p.CPU(); cpu != 0 {
		t.Errorf("CPU %v after the child was reaped, want 0", cpu)
	}
}

func TestTailBuffer(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   string
	}{
		{nil, ""},
		{[]string{"  short\n"}, "short"},
		{[]string{"abc", "defgh"}, "cdefgh"},
		{[]string{"0123456789"}, "456789"},
	} {
		b := &tailBuffer{max: 6}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Errorf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := b.String(); got != tc.want {
			t.Errorf("after %q: %q, want %q", tc.writes, got, tc.want)
		}
	}
}
