package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/membership"
)

const statusUsage = `Usage:
  convoy status -etcd URL,... [-prefix P] [-json]

Shows a group as etcd and its members see it: the current view (epoch,
the delivery index it starts after, and its members in rank order with
their incarnation and transport address) and, for each member, the base
URL of its HTTP API (which "convoy node" records in etcd) and what the
member itself reports on GET /status: whether it serves, the view it is
in, the last delivery index it applied (its frontier; for the shared
log, its tail too) and, from the library (convoy.Group.Status), its
phase, the durable index, how far its delivery barrier trails its clock,
and whether it holds its etcd lease. Processes that recorded a URL but are not in the view
(starting, joining, or rejoining after an exclusion) are listed after the
members. Suspicions recorded in etcd against members of the view (during
a view change) follow the table, with the suspecting member and its
reason. API records that cannot be used (not JSON, naming another member
than their key, or without an http or https URL) are listed as ignored,
and the others reported as usual.

"convoy node" serves the same report, read by the member, at GET /group
on its HTTP API, and a page showing it at GET /.

With -json it prints one JSON object instead of a table. It reaches a
secured etcd as "convoy node" does: -etcd-ca, -etcd-cert and -etcd-key
for TLS, -etcd-username with -etcd-password-file (or -etcd-password) to
log in. It reaches members whose API serves over TLS (https URLs) with
-http-ca, the CA that signed their certificates (default: the system's),
and members that require a bearer token with the token in
CONVOY_HTTP_TOKEN or on the first line of -http-token-file. The URLs come
from records in etcd, so the token goes only over https or to a loopback
address: a member whose record names a plain http URL on another host is
reported with an error instead of being sent the token.
`

// statusReport is what "convoy status" prints.
type statusReport struct {
	Prefix string `json:"prefix"`
	// Epoch and Start describe the current view (Epoch 0: none yet).
	Epoch uint64 `json:"epoch"`
	Start uint64 `json:"start"`
	// Members lists the view's members in rank order, then the processes
	// that recorded an API URL without being in the view.
	Members []statusMember `json:"members"`
	// Problems describes the API records under the prefix that could not
	// be used (malformed, or naming another member than their key): the
	// report leaves them out and goes on with the others.
	Problems []string `json:"problems,omitempty"`
}

// statusMember is one member or process of a statusReport.
type statusMember struct {
	ID     uint64 `json:"id"`
	InView bool   `json:"in_view"`
	// Incarnation and Addr are the view's record of the member.
	Incarnation uint64 `json:"incarnation,omitempty"`
	Addr        string `json:"addr,omitempty"`
	// App and HTTP are what the member recorded of its API; PID its
	// process id.
	App  string `json:"app,omitempty"`
	HTTP string `json:"http,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// SuspectedBy holds the suspicions of the member recorded in etcd
	// for the current view: by the id of each member that suspects it,
	// the reason it gave.
	SuspectedBy map[uint64]string `json:"suspected_by,omitempty"`
	// Status is the member's own GET /status, if it answered; Error why
	// not.
	Status *memberStatus `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
}

func runStatus(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("status", statusUsage, c)
	endpoints := fs.String("etcd", "", "etcd endpoints, comma-separated (required)")
	prefix := fs.String("prefix", "/convoy/", "etcd key prefix of the group")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	timeout := fs.Duration("timeout", 5*time.Second, "give up on etcd after this long")
	var access nodeSettings // how to reach etcd, as "convoy node" does
	fs.StringVar(&access.EtcdCA, "etcd-ca", "", "PEM file of the CA that signed etcd's certificate")
	fs.StringVar(&access.EtcdCert, "etcd-cert", "", "PEM file of a client certificate for etcd")
	fs.StringVar(&access.EtcdKey, "etcd-key", "", "PEM file of -etcd-cert's private key")
	fs.StringVar(&access.EtcdUsername, "etcd-username", "", "user to log in to etcd as, when etcd has authentication enabled")
	fs.StringVar(&access.EtcdPassword, "etcd-password", "", "password of -etcd-username (visible in the process list: prefer -etcd-password-file)")
	fs.StringVar(&access.EtcdPasswordFile, "etcd-password-file", "", "file whose first line is the password of -etcd-username")
	httpCA := fs.String("http-ca", "", "PEM file of the CA that signed the members' HTTP API certificates (default: the system's CAs)")
	fs.StringVar(&access.HTTPTokenFile, "http-token-file", "", "file whose first line is the bearer token the members' APIs require (or set "+settingEnv(httpTokenKey)+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if access.HTTPTokenFile == "" {
		access.HTTPToken = os.Getenv(settingEnv(httpTokenKey))
	}
	switch {
	case len(splitList(*endpoints)) == 0:
		return usagef("status: -etcd is required")
	case !strings.HasSuffix(*prefix, "/"):
		return usagef("status: -prefix must end in /")
	}
	if err := access.checkEtcdAccess("status"); err != nil {
		return err
	}
	etcdTLS, err := access.etcdTLS()
	if err != nil {
		return err
	}
	user, password, err := access.etcdLogin()
	if err != nil {
		return err
	}
	token, err := access.httpToken()
	if err != nil {
		return err
	}
	transport := &http.Transport{}
	if *httpCA != "" {
		pool, err := loadCertPool(*httpCA)
		if err != nil {
			return fmt.Errorf("HTTP CA: %w", err)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cli, err := dialEtcd(splitList(*endpoints), etcdTLS, user, password)
	if err != nil {
		return err
	}
	defer cli.Close()
	hc := &http.Client{Transport: transport}
	defer hc.CloseIdleConnections()
	r, err := readStatus(ctx, cli, apiClient{hc: hc, token: token}, *prefix)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(c.stdout, r)
	}
	return r.print(c.stdout)
}

// readStatus reads the group's view and API records under prefix and
// asks every member found for its status.
func readStatus(ctx context.Context, cli *clientv3.Client, api apiClient, prefix string) (statusReport, error) {
	store, err := membership.NewStore(ctx, membership.StoreConfig{
		Client: cli, Prefix: prefix, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return statusReport{}, fmt.Errorf("reading etcd at %s: %w", strings.Join(cli.Endpoints(), ","), err)
	}
	st, err := store.State(ctx)
	if cerr := store.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return statusReport{}, fmt.Errorf("reading the view: %w", err)
	}
	records, problems, err := readHTTPRecords(ctx, cli, prefix)
	if err != nil {
		return statusReport{}, err
	}

	r := statusReport{Prefix: prefix, Epoch: st.Current.Epoch, Start: st.Current.Start, Members: []statusMember{}, Problems: problems}
	for _, m := range st.Current.Members {
		r.Members = append(r.Members, statusMember{
			ID: m.ID, InView: true, Incarnation: m.Incarnation, Addr: m.Addr, SuspectedBy: st.Suspects[m.ID],
		})
	}
	for _, id := range slices.Sorted(maps.Keys(records)) {
		if st.Current.Rank(id) < 0 {
			r.Members = append(r.Members, statusMember{ID: id})
		}
	}
	var wg sync.WaitGroup
	for i := range r.Members {
		m := &r.Members[i]
		rec, ok := records[m.ID]
		if !ok {
			m.Error = "no API URL recorded"
			continue
		}
		m.App, m.HTTP, m.PID = rec.App, rec.URL, rec.PID
		wg.Go(func() {
			s, err := fetchStatus(ctx, api, m.HTTP)
			if err != nil {
				m.Error = shortError(err)
				return
			}
			m.Status = &s
		})
	}
	wg.Wait()
	return r, nil
}

// readHTTPRecords reads the API records under prefix, by member id, and
// describes those it could not use (see decodeHTTPRecords).
func readHTTPRecords(ctx context.Context, cli *clientv3.Client, prefix string) (map[uint64]httpRecord, []string, error) {
	resp, err := cli.Get(ctx, httpKeys(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("reading the members' API URLs: %w", err)
	}
	recs, problems := decodeHTTPRecords(resp.Kvs, prefix)
	return recs, problems, nil
}

// decodeHTTPRecords decodes the API records kvs read under prefix, by
// member id. Any process with access to the prefix can write there, so a
// record that is not JSON, names another member than its key, or whose
// URL is not an absolute http or https URL is left out and described in
// problems, one line each: the others are still used.
func decodeHTTPRecords(kvs []*mvccpb.KeyValue, prefix string) (recs map[uint64]httpRecord, problems []string) {
	recs = make(map[uint64]httpRecord, len(kvs))
	for _, kv := range kvs {
		rec, err := decodeHTTPRecord(kv, prefix)
		if err != nil {
			problems = append(problems, fmt.Sprintf("API record %q: %v", kv.Key, err))
			continue
		}
		recs[rec.ID] = rec
	}
	return recs, problems
}

// decodeHTTPRecord decodes one API record (see decodeHTTPRecords).
func decodeHTTPRecord(kv *mvccpb.KeyValue, prefix string) (httpRecord, error) {
	var rec httpRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return httpRecord{}, err
	}
	id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), httpKeys(prefix)), 10, 64)
	if err != nil || id != rec.ID {
		return httpRecord{}, fmt.Errorf("the key does not name member %d", rec.ID)
	}
	u, err := url.Parse(rec.URL)
	if err != nil {
		return httpRecord{}, fmt.Errorf("URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil {
		return httpRecord{}, fmt.Errorf("URL %q is not an http or https URL of a host", rec.URL)
	}
	return rec, nil
}

// print writes r as a table.
func (r statusReport) print(w io.Writer) error {
	var b strings.Builder
	if r.Epoch == 0 {
		fmt.Fprintf(&b, "prefix %s: no view yet\n", r.Prefix)
	} else {
		fmt.Fprintf(&b, "prefix %s: view %d, %d members, starts after delivery %d\n", r.Prefix, r.Epoch, r.inView(), r.Start)
	}
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tINC\tTRANSPORT\tHTTP\tPID\tSERVING\tEPOCH\tAPPLIED\tTAIL\tPHASE\tDURABLE\tLAG\tLEASE\t")
	for _, m := range r.Members {
		inc, addr := "-", "(not in the view)"
		if m.InView {
			inc, addr = strconv.FormatUint(m.Incarnation, 10), m.Addr
		}
		pid := "-"
		if m.PID != 0 {
			pid = strconv.Itoa(m.PID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t", m.ID, inc, addr, orDash(m.HTTP), pid)
		switch s := m.Status; {
		case s != nil:
			tail := "-"
			if s.Tail != nil {
				tail = strconv.FormatUint(*s.Tail, 10)
			}
			phase, durable, lag, lease := "-", "-", "-", "-"
			if g := s.Group; g != nil {
				phase, durable, lag, lease = g.Phase, strconv.FormatUint(g.Durable, 10), g.Lag.Round(time.Millisecond).String(), orDash(g.Lease)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", yesNo(s.Serving), s.Epoch, s.Applied, tail, phase, durable, lag, lease)
		case m.Error == errStarting.Error():
			fmt.Fprintf(tw, "starting\t-\t-\t-\t-\t-\t-\t-\t\n")
		default:
			fmt.Fprintf(tw, "no: %s\t\t\t\t\t\t\t\t\n", m.Error)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.Members {
		if len(m.SuspectedBy) == 0 {
			continue
		}
		var by []string
		for _, id := range slices.Sorted(maps.Keys(m.SuspectedBy)) {
			by = append(by, fmt.Sprintf("%d (%s)", id, m.SuspectedBy[id]))
		}
		fmt.Fprintf(&b, "member %d is suspected by %s\n", m.ID, strings.Join(by, ", "))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "ignored: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// inView counts the members in the view.
func (r statusReport) inView() int {
	n := 0
	for _, m := range r.Members {
		if m.InView {
			n++
		}
	}
	return n
}

// shortError describes a failed request: for a network error, only what
// happened ("unreachable: connect: connection refused").
func shortError(err error) string {
	if oe := (*net.OpError)(nil); errors.As(err, &oe) {
		return "unreachable: " + oe.Err.Error()
	}
	return err.Error()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
