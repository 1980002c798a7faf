package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/etcddev"
)

const clusterUsage = `Usage:
  convoy cluster -app kv|log|pubsub -data DIR [-tls] [flags]

Runs a local cluster until interrupted: an embedded etcd (its data in
DIR/etcd, serving clients on -http's port itself: 127.0.0.1:7100 by
default) and -nodes member processes ("convoy node"), member i (from 1)
serving the application's HTTP API on the port of -http plus i
(127.0.0.1:7101, 7102, ... by default), keeping its durable log in
DIR/node-i and writing its log to DIR/node-i.log. Members talk to each
other over loopback TCP. Started again on the
same DIR, the cluster comes back with its data: the members restart the
group from their logs.

Once every member serves, it prints one JSON line on stdout:

  {"ready":true,"etcd":["http://127.0.0.1:..."],"prefix":"/convoy/","members":[{"id":1,"pid":4242,"http":"http://127.0.0.1:7101"},...]}

A member process that exits is restarted with -restart, and each restart
printed as a JSON line ({"restart":true,"id":2,"pid":4250,"exit":"signal:
killed"}); without it, its exit is printed ({"exited":true,...}) and the
others go on. SIGINT or SIGTERM stops the members with SIGTERM (each
closes its group), then etcd, and prints {"stopped":true}.

See the members with "convoy status -etcd http://127.0.0.1:7100", or in
a browser at any member's API (http://127.0.0.1:7101/ by default).

With -tls, the cluster is secured as a deployment would be: it writes
the certificates "convoy certs" makes into DIR/certs (renewing them,
from the same CA, at each start) and a bearer token into
DIR/certs/http-token (kept across starts). The members authenticate each
other with mutual TLS, serve their APIs over TLS (https://) behind the
token, and reach etcd over TLS (https://) with the client certificate,
which etcd requires. The ready line then names the directory
("certs":"DIR/certs"). For example:

  convoy status -etcd https://127.0.0.1:7100 -etcd-ca DIR/certs/ca.crt \
    -etcd-cert DIR/certs/client.crt -etcd-key DIR/certs/client.key \
    -http-ca DIR/certs/ca.crt -http-token-file DIR/certs/http-token

and open https://127.0.0.1:7101/#token=TOKEN in a browser that trusts
DIR/certs/ca.crt.
`

// Bounds of "convoy cluster".
const (
	// clusterReadyTimeout bounds the wait for every member to serve.
	clusterReadyTimeout = 2 * time.Minute
	// clusterRestartPause is the least time between two restarts of one
	// member, so that a member that cannot start does not spin.
	clusterRestartPause = time.Second
)

// clusterCmd is a parsed "convoy cluster" command line.
type clusterCmd struct {
	app        string
	nodes      int
	dir        string
	httpHost   string
	httpBase   int
	etcdListen string
	prefix     string
	restart    bool
	tls        bool
	verbose    bool
}

// clusterMember is one member in the ready line.
type clusterMember struct {
	ID   uint64 `json:"id"`
	PID  int    `json:"pid"`
	HTTP string `json:"http"`
}

// clusterReady is the line printed once every member serves.
type clusterReady struct {
	Ready   bool            `json:"ready"`
	Etcd    []string        `json:"etcd"`
	Prefix  string          `json:"prefix"`
	Members []clusterMember `json:"members"`
	// Certs is the directory of the certificates and the token, with
	// -tls.
	Certs string `json:"certs,omitempty"`
}

// clusterExit is the line printed when a member process exits: restarted
// (Restart, with the new PID) or not (Exited).
type clusterExit struct {
	Restart bool   `json:"restart,omitempty"`
	Exited  bool   `json:"exited,omitempty"`
	ID      uint64 `json:"id"`
	PID     int    `json:"pid"`
	OldPID  int    `json:"old_pid,omitempty"`
	Exit    string `json:"exit"`
}

func runCluster(ctx context.Context, args []string, c *cli) error {
	cl, err := parseCluster(args, c)
	if err != nil {
		return err
	}
	return cl.run(ctx, c)
}

func parseCluster(args []string, c *cli) (*clusterCmd, error) {
	fs := newFlagSet("cluster", clusterUsage, c)
	cl := &clusterCmd{}
	fs.StringVar(&cl.app, "app", "", "the service: kv (key-value store), log (shared log) or pubsub (pub/sub)")
	fs.IntVar(&cl.nodes, "nodes", 3, "member processes")
	fs.StringVar(&cl.dir, "data", "", "directory of etcd's and the members' data and logs (created if needed)")
	httpAddr := fs.String("http", "127.0.0.1:7100", "host and base port: member i serves on the base port plus i")
	fs.StringVar(&cl.etcdListen, "etcd-listen", "", "the embedded etcd's client `address` (default: -http's host and base port; port 0: a free one)")
	fs.StringVar(&cl.prefix, "prefix", "/convoy/", "etcd key prefix of the group")
	fs.BoolVar(&cl.restart, "restart", false, "restart member processes that exit")
	fs.BoolVar(&cl.tls, "tls", false, "secure the cluster: mutual TLS between members, TLS and a bearer token on the APIs, TLS with client certificates to etcd (files in DIR/certs)")
	fs.BoolVar(&cl.verbose, "v", false, "log debug messages (etcd's warnings too) to stderr")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(*httpAddr)
	if err != nil {
		return nil, usagef("cluster: -http: %v", err)
	}
	cl.httpHost = host
	if cl.httpBase, err = strconv.Atoi(port); err != nil {
		return nil, usagef("cluster: -http: bad port %q", port)
	}
	if cl.etcdListen == "" {
		cl.etcdListen = hostPort(host, cl.httpBase)
	}
	switch {
	case cl.app != appKV && cl.app != appLog && cl.app != appPubSub:
		return nil, usagef("cluster: -app must be %s, %s or %s", appKV, appLog, appPubSub)
	case cl.nodes < 1:
		return nil, usagef("cluster: -nodes must be positive")
	case cl.dir == "":
		return nil, usagef("cluster: -data is required")
	case cl.httpBase < 1 || cl.httpBase+cl.nodes > 65535:
		return nil, usagef("cluster: -http: the base port plus %d must be a port", cl.nodes)
	case !strings.HasSuffix(cl.prefix, "/"):
		return nil, usagef("cluster: -prefix must end in /")
	}
	return cl, nil
}

// run runs the cluster until ctx ends.
func (cl *clusterCmd) run(ctx context.Context, c *cli) error {
	level := slog.LevelInfo
	if cl.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	if err := os.MkdirAll(cl.dir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	var sec *devTLS
	if cl.tls {
		var err error
		if sec, err = setUpDevTLS(filepath.Join(cl.dir, "certs"), cl.nodes); err != nil {
			return err
		}
	}
	etcdLog := slog.New(slog.DiscardHandler)
	if cl.verbose {
		etcdLog = log
	}
	srv, err := etcddev.Start(ctx, etcddev.Config{
		Dir:        filepath.Join(cl.dir, "etcd"),
		ClientAddr: cl.etcdListen,
		Logger:     etcdLog,
		TLS:        sec.etcdTLS(),
	})
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer srv.Close()
	log.Info("embedded etcd up", "endpoints", srv.Endpoints())

	hc := &http.Client{Transport: sec.transport(&http.Transport{})}
	defer hc.CloseIdleConnections()
	api := apiClient{hc: hc, token: sec.apiToken()}
	procs := make([]*memberProc, cl.nodes)
	defer func() { stopAll(procs, memberStopTimeout) }()

	exits := make(chan *memberProc, cl.nodes)
	start := func(i int) error {
		p, err := cl.startNode(c, srv.Endpoints(), sec, i)
		if err != nil {
			return err
		}
		procs[i] = p
		go func() {
			<-p.done
			exits <- p
		}()
		return nil
	}
	for i := range cl.nodes {
		if err := start(i); err != nil {
			return err
		}
	}

	// Ready once every member serves.
	rctx, cancel := context.WithTimeoutCause(ctx, clusterReadyTimeout,
		fmt.Errorf("the members did not all serve within %v (their logs: %s)", clusterReadyTimeout, filepath.Join(cl.dir, "node-*.log")))
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, cl.nodes)
	for i, p := range procs {
		wg.Go(func() {
			_, errs[i] = waitStatus(rctx, api, p, p.url, func(s memberStatus) bool { return s.Serving })
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
	ready := clusterReady{Ready: true, Etcd: srv.Endpoints(), Prefix: cl.prefix}
	if sec != nil {
		ready.Certs = sec.dir
	}
	for _, p := range procs {
		ready.Members = append(ready.Members, clusterMember{ID: p.id, PID: p.pid(), HTTP: p.url})
	}
	if err := printJSON(c.stdout, ready); err != nil {
		return err
	}
	log.Info("cluster ready", "app", cl.app, "members", cl.nodes, "etcd", srv.Endpoints())

	for {
		select {
		case <-ctx.Done():
			log.Info("stopping the members")
			stopAll(procs, memberStopTimeout)
			if err := srv.Close(); err != nil {
				log.Warn("stopping etcd", "err", err)
			}
			return printJSON(c.stdout, struct {
				Stopped bool `json:"stopped"`
			}{true})
		case p := <-exits:
			if ctx.Err() != nil {
				continue // stopping: the loop hears it next
			}
			i := int(p.id) - 1
			ev := clusterExit{ID: p.id, PID: p.pid(), Exit: p.exitStatus()}
			if !cl.restart {
				ev.Exited = true
				log.Warn("member exited", "id", p.id, "exit", ev.Exit)
				if err := printJSON(c.stdout, ev); err != nil {
					return err
				}
				continue
			}
			if wait := time.Until(p.startedAt.Add(clusterRestartPause)); wait > 0 {
				select {
				case <-ctx.Done():
					continue
				case <-time.After(wait):
				}
			}
			if err := start(i); err != nil {
				return err
			}
			ev.Restart, ev.OldPID, ev.PID = true, p.pid(), procs[i].pid()
			log.Warn("member exited; restarted", "id", p.id, "exit", ev.Exit, "pid", ev.PID)
			if err := printJSON(c.stdout, ev); err != nil {
				return err
			}
		}
	}
}

// startNode starts the process of member i (from 0), secured by sec if
// not nil.
func (cl *clusterCmd) startNode(c *cli, etcd []string, sec *devTLS, i int) (*memberProc, error) {
	id := uint64(i + 1)
	url := sec.scheme() + "://" + hostPort(cl.httpHost, cl.httpBase+i+1)
	args := []string{
		"-id", strconv.FormatUint(id, 10),
		"-app", cl.app,
		"-listen", "127.0.0.1:0",
		"-http", hostPort(cl.httpHost, cl.httpBase+i+1),
		"-http-url", url,
		"-etcd", strings.Join(etcd, ","),
		"-prefix", cl.prefix,
		"-data", filepath.Join(cl.dir, fmt.Sprintf("node-%d", id)),
		"-initial", strconv.Itoa(cl.nodes),
	}
	args = append(args, sec.nodeArgs(id)...)
	if cl.verbose {
		args = append(args, "-log-level", "debug")
	}
	return startMember(c.self, fmt.Sprintf("member %d", id), id, url, args, filepath.Join(cl.dir, fmt.Sprintf("node-%d.log", id)))
}

// printJSON writes v as one JSON line.
func printJSON(w io.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}
