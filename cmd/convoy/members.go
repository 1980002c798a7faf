package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy"
	logclient "github.com/convoy-gcs/convoy/examples/log/client"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/internal/childproc"
)

// Timing of member processes started by "convoy cluster" and "convoy
// demo".
const (
	// memberStopTimeout is how long a member gets to close after SIGTERM
	// before it is killed.
	memberStopTimeout = 10 * time.Second
	// statusTimeout bounds one GET /status.
	statusTimeout = 2 * time.Second
	// pollInterval is how often a member's status is polled while
	// waiting for it.
	pollInterval = 50 * time.Millisecond
)

// memberProc is a "convoy node" process started by this one, its output
// (both streams) appended to a log file.
type memberProc struct {
	// name labels the member in messages ("kv-2"); id is its member id
	// and url its API's base URL.
	name string
	id   uint64
	url  string

	cmd       *exec.Cmd
	startedAt time.Time
	done      chan struct{} // closed once the process exited and was reaped
	err       error         // how it exited; read after done
}

// startMember starts "convoy node args..." with env added to this
// process's environment, its output appended to logPath. A goroutine
// reaps it when it exits.
func startMember(self selfExec, name string, id uint64, url string, args []string, logPath string) (*memberProc, error) {
	exe := self.path
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding this program to run members: %w", err)
		}
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(exe, append([]string{"node"}, args...)...)
	cmd.Env = append(os.Environ(), self.env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childproc.SysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	p := &memberProc{name: name, id: id, url: url, cmd: cmd, startedAt: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *memberProc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *memberProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitStatus describes how the process exited (after done).
func (p *memberProc) exitStatus() string {
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// kill kills the process with SIGKILL and waits until it is reaped.
func (p *memberProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to close with SIGTERM and kills it if it has not
// exited within timeout. It returns once the process is reaped.
func (p *memberProc) stop(timeout time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// stopAll stops every process in procs at once (see stop).
func stopAll(procs []*memberProc, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p != nil {
			wg.Go(func() { p.stop(timeout) })
		}
	}
	wg.Wait()
}

// memberStatus is a member's GET /status, common to both services (Trim
// and Tail only in the shared log's).
type memberStatus struct {
	ID      uint64   `json:"id"`
	Epoch   uint64   `json:"epoch"`
	Members []uint64 `json:"members"`
	Serving bool     `json:"serving"`
	// Applied is the last delivery index applied: the member's frontier.
	Applied uint64  `json:"applied"`
	Trim    *uint64 `json:"trim,omitempty"`
	Tail    *uint64 `json:"tail,omitempty"`
	// Group is the library's account of the member (convoy.Group.Status).
	Group *convoy.Status `json:"group,omitempty"`
}

// has reports whether the member's view holds id.
func (s memberStatus) has(id uint64) bool { return slices.Contains(s.Members, id) }

// errStarting is a member's answer before it takes part in a view.
var errStarting = errors.New("starting")

// apiClient reaches members' HTTP APIs.
type apiClient struct {
	hc *http.Client
	// token, if not empty, goes with every request as a bearer token.
	token string
}

// errTokenInPlainText refuses to send a bearer token over plain HTTP to
// a host that is not this machine.
var errTokenInPlainText = errors.New("refusing to send the bearer token over plain HTTP to another host")

// authorize adds the bearer token, if any, to req. The URLs of the
// members' APIs come from records in etcd, which any process with access
// to the group's prefix can write: the token goes only over TLS (where
// the member's certificate must verify) or to a loopback address, never
// in plain text across a network to whatever host a record names.
func (a apiClient) authorize(req *http.Request) error {
	if a.token == "" {
		return nil
	}
	if req.URL.Scheme != "https" && !loopbackHost(req.URL.Hostname()) {
		return fmt.Errorf("%w: %s", errTokenInPlainText, req.URL.Redacted())
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	return nil
}

// loopbackHost reports whether host (from a URL, without its port) is
// this machine: "localhost" or a loopback address.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// kv returns a client of the key-value store at urls.
func (a apiClient) kv(urls []string, opts ...kvclient.Option) *kvclient.Client {
	return kvclient.New(urls, append([]kvclient.Option{kvclient.WithHTTPClient(a.hc), kvclient.WithToken(a.token)}, opts...)...)
}

// log returns a client of the shared log at urls.
func (a apiClient) log(urls []string) *logclient.Client {
	return logclient.New(urls, logclient.WithHTTPClient(a.hc), logclient.WithToken(a.token))
}

// fetchStatus returns the status of the member at base URL url, or
// errStarting if it answers 503.
func fetchStatus(ctx context.Context, api apiClient, url string) (memberStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/status", nil)
	if err != nil {
		return memberStatus{}, err
	}
	if err := api.authorize(req); err != nil {
		return memberStatus{}, err
	}
	resp, err := api.hc.Do(req)
	if err != nil {
		return memberStatus{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return memberStatus{}, fmt.Errorf("GET %s/status: %w", url, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusServiceUnavailable:
		return memberStatus{}, errStarting
	default:
		return memberStatus{}, fmt.Errorf("GET %s/status: HTTP %d: %s", url, resp.StatusCode, quoteBody(body))
	}
	var s memberStatus
	if err := json.Unmarshal(body, &s); err != nil {
		return memberStatus{}, fmt.Errorf("GET %s/status: %w", url, err)
	}
	return s, nil
}

// maxQuotedBody bounds how much of an answer's body an error quotes.
const maxQuotedBody = 256

// quoteBody returns body for an error message: quoted as a Go string, so
// that bytes that are not UTF-8 or not printable show escaped, and cut
// after maxQuotedBody bytes.
func quoteBody(body []byte) string {
	if len(body) > maxQuotedBody {
		return strconv.Quote(string(body[:maxQuotedBody])) + "…"
	}
	return strconv.Quote(string(body))
}

// waitStatus polls the member at url until ok accepts its status, ctx
// ends, or p (if not nil) exits.
func waitStatus(ctx context.Context, api apiClient, p *memberProc, url string, ok func(memberStatus) bool) (memberStatus, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		s, err := fetchStatus(ctx, api, url)
		if err == nil && ok(s) {
			return s, nil
		}
		last = err
		if p != nil && p.exited() {
			return s, fmt.Errorf("%s exited (%s)", p.name, p.exitStatus())
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = fmt.Errorf("status %+v", s)
			}
			return s, fmt.Errorf("%w (last: %w)", context.Cause(ctx), last)
		case <-p.doneChan():
		case <-tick.C:
		}
	}
}

// doneChan returns p.done, or nil (never ready) for no process.
func (p *memberProc) doneChan() <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.done
}

// hostPort joins host and port.
func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
