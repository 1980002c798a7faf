package convoy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/convoy-gcs/convoy/internal/devcerts"
	"github.com/convoy-gcs/convoy/rdma"
)

// newCA returns a certificate authority made up for a test.
func newCA(t *testing.T, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// memberTLS returns the TLS configuration of a member whose certificate
// ca issued, naming the member ids given, and which trusts trust.
func memberTLS(t *testing.T, ca, trust *devcerts.CA, ids ...uint64) *tls.Config {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(devcerts.Leaf{Name: fmt.Sprint("member ", ids), Members: ids, Hosts: []string{"127.0.0.1"},
		Server: true, Client: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(trust.CertPEM())
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS13}
}

// observer records what one member delivers and the views it takes
// part in, and reads its metrics.
type observer struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider

	mu    sync.Mutex
	got   []Delivery
	views []View
}

func newObserver(t *testing.T) *observer {
	o := &observer{reader: sdkmetric.NewManualReader()}
	o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() { o.mp.Shutdown(context.Background()) })
	return o
}

func (o *observer) deliver(d Delivery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d.Payload = bytes.Clone(d.Payload)
	o.got = append(o.got, d)
}

func (o *observer) onView(v View) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.views = append(o.views, v)
}

func (o *observer) deliveries() []Delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

func (o *observer) seenViews() []View {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.views)
}

// has reports whether o delivered payload.
func (o *observer) has(payload string) bool {
	return slices.ContainsFunc(o.deliveries(), func(d Delivery) bool { return string(d.Payload) == payload })
}

// counter returns the sum of the counter name's series whose attribute
// key (if not empty) is value.
func (o *observer) counter(t *testing.T, name, key, value string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if v, _ := dp.Attributes.Value(attribute.Key(key)); key == "" || v.AsString() == value {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openTLSGroup opens members ids of a view-managed group, each on the
// etcd etcdOf gives it, with mutual TLS under ca, and returns their
// groups and observers.
func openTLSGroup(t *testing.T, etcdOf func(id uint64) *EtcdConfig, ca *devcerts.CA, ids ...uint64) ([]*Group, []*observer) {
	return openTLSGroupWith(t, etcdOf, ca, nil, ids...)
}

// openTLSGroupWith is openTLSGroup with configure, if not nil, called on
// each member's configuration before it opens.
func openTLSGroupWith(t *testing.T, etcdOf func(id uint64) *EtcdConfig, ca *devcerts.CA, configure func(*Config), ids ...uint64) ([]*Group, []*observer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	groups := make([]*Group, len(ids))
	obs := make([]*observer, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		obs[i] = newObserver(t)
		cfg := Config{Self: NodeID(id), Addr: "127.0.0.1:0", Etcd: etcdOf(id), InitialMembers: len(ids),
			TLS: memberTLS(t, ca, ca, id), MeterProvider: obs[i].mp, OnView: obs[i].onView}
		if configure != nil {
			configure(&cfg)
		}
		wg.Go(func() { groups[i], errs[i] = Open(ctx, cfg, obs[i].deliver) })
	}
	wg.Wait()
	cancel()
	for i, g := range groups {
		if g != nil {
			t.Cleanup(func() { g.Close() })
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	return groups, obs
}

// TestForeignCertificatesKeptOut: a process whose certificate another CA
// issued, and one whose certificate the group's CA issued for another
// member's id, open members of a view-managed group with TLS, with
// access to its etcd, and ask to join for as long as the test runs. The
// members refuse their join requests and their registrations and count
// them, by kind and reason: no view
// lists them, no view comes of their asking, and their Opens wait
// until their context ends. Their transports, dialing members directly
// under a member's id, are refused too, and counted by reason. The group
// goes on delivering the same sequence at every member.
func TestForeignCertificatesKeptOut(t *testing.T) {
	srv := startEtcd(t)
	etcd := &EtcdConfig{Endpoints: srv.Endpoints(), Prefix: "/foreign/"}
	ca, rogueCA := newCA(t, "group CA"), newCA(t, "rogue CA")
	groups, obs := openTLSGroup(t, func(uint64) *EtcdConfig { return etcd }, ca, 1, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := groups[0].Send(ctx, []byte("before"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	before, _ := groups[0].View()

	// Member 4 with a certificate from another CA; member 5 with one of
	// the group's CA for member 2.
	rogues := []Config{
		{Self: 4, TLS: memberTLS(t, rogueCA, ca, 4)},
		{Self: 5, TLS: memberTLS(t, ca, ca, 2)},
	}
	var opens sync.WaitGroup
	for _, cfg := range rogues {
		cfg.Addr, cfg.Etcd = "127.0.0.1:0", etcd
		cfg.OnView = func(v View) {
			t.Errorf("member %d, whose certificate does not certify it, takes part in %v", cfg.Self, v)
		}
		opens.Go(func() {
			g, err := Open(ctx, cfg, func(d Delivery) {
				t.Errorf("member %d, whose certificate does not certify it, got %q delivered", cfg.Self, d.Payload)
			})
			if err == nil {
				g.Close()
				t.Errorf("member %d, whose certificate does not certify it, opened", cfg.Self)
			} else if !errors.Is(err, context.Canceled) {
				t.Errorf("member %d: Open: %v, want it to wait until its context ends", cfg.Self, err)
			}
		})
	}
	for i, o := range obs {
		waitFor(t, fmt.Sprintf("member %d to refuse both join requests and both registrations", i+1), func() bool {
			return o.counter(t, "convoy.membership.refused.joins", "reason", "certificate") >= 2 &&
				o.counter(t, "convoy.membership.refused.joins", "reason", "identity") >= 2 &&
				o.counter(t, "convoy.membership.refused.joins", "kind", "join") >= 2 &&
				o.counter(t, "convoy.membership.refused.joins", "kind", "registration") >= 2
		})
	}

	// The rogues' transports dial members 2 and 3 as member 1.
	addrs := map[NodeID]string{}
	for _, m := range before.Members {
		addrs[m.ID] = m.Addr
	}
	for _, cfg := range rogues {
		// Each presents its certificate even when the member asks for
		// another CA's.
		tc := cfg.TLS.Clone()
		cert := tc.Certificates[0]
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: 1, TLS: tc, Resolve: func(id NodeID) (string, error) { return addrs[id], nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		for _, peer := range []NodeID{2, 3} {
			if _, err := ep.Open(ctx, peer, 1, nopHandler{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, o := range obs[1:] {
		waitFor(t, fmt.Sprintf("member %d to refuse both connections", i+2), func() bool {
			return o.counter(t, "convoy.rdma.rejected.frames", "reason", "certificate") > 0 &&
				o.counter(t, "convoy.rdma.rejected.frames", "reason", "identity") > 0
		})
	}

	// The rogues keep asking (their requests stand, on their leases),
	// while the group goes on.
	time.Sleep(2 * time.Second)
	if _, err := groups[1].Send(ctx, []byte("after"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	for i, o := range obs {
		waitFor(t, fmt.Sprintf("member %d to deliver", i+1), func() bool { return o.has("after") })
	}
	cancel()
	opens.Wait()

	// What every member delivered: the same sequence, from the members
	// only, in the one view.
	var want []string
	for _, d := range obs[0].deliveries() {
		want = append(want, string(d.Payload))
	}
	for i, o := range obs {
		for _, v := range o.seenViews() {
			// A view the members cause changes them; one that lists the
			// same members as before, a rogue's request made.
			if v.Epoch > before.Epoch && slices.Equal(v.Members, before.Members) {
				t.Errorf("member %d took part in view %d after view %d, with the same members", i+1, v.Epoch, before.Epoch)
			}
			for _, m := range v.Members {
				if m.ID == 4 || m.ID == 5 {
					t.Errorf("member %d: view %d lists member %d", i+1, v.Epoch, m.ID)
				}
			}
		}
		var got []string
		for _, d := range o.deliveries() {
			if d.Sender == 4 || d.Sender == 5 || bytes.HasPrefix(d.Payload, []byte("forged")) {
				t.Errorf("member %d delivered %q from %d", i+1, d.Payload, d.Sender)
			}
			got = append(got, string(d.Payload))
		}
		if !slices.Equal(got, want) {
			t.Errorf("member %d delivered %q, member 1 %q", i+1, got, want)
		}
		v, _ := groups[i].View()
		t.Logf("member %d: at epoch %d, from %d; refused joins: %d certificate, %d identity; rejected connections: %d certificate, %d identity", i+1, v.Epoch, before.Epoch,
			o.counter(t, "convoy.membership.refused.joins", "reason", "certificate"), o.counter(t, "convoy.membership.refused.joins", "reason", "identity"),
			o.counter(t, "convoy.rdma.rejected.frames", "reason", "certificate"), o.counter(t, "convoy.rdma.rejected.frames", "reason", "identity"))
	}
}

// TestTLSGroupRestartsFromLogs: every member of a durable group whose
// members authenticate each other with TLS closes (its registration
// goes, and no leave request stands), then opens again on its data
// directory. The members restart the group from their logs, on their
// restart claims, which carry proofs that every member admits: none is
// refused, and what was reported durable is delivered again.
func TestTLSGroupRestartsFromLogs(t *testing.T) {
	srv := startEtcd(t)
	etcd := &EtcdConfig{Endpoints: srv.Endpoints(), Prefix: "/tlsrestart/"}
	ca := newCA(t, "group CA")
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	durable := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self], RestartWait: 200 * time.Millisecond}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups, _ := openTLSGroupWith(t, func(uint64) *EtcdConfig { return etcd }, ca, durable, 1, 2, 3)
	if _, err := groups[0].Send(ctx, []byte("before"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		g.Close()
	}
	groups, obs := openTLSGroupWith(t, func(uint64) *EtcdConfig { return etcd }, ca, durable, 1, 2, 3)
	if _, err := groups[1].Send(ctx, []byte("after"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	for i, o := range obs {
		waitFor(t, fmt.Sprintf("member %d to deliver", i+1), func() bool { return o.has("before") && o.has("after") })
		if n := o.counter(t, "convoy.membership.refused.joins", "", ""); n != 0 {
			t.Errorf("member %d refused %d records of its own group's members", i+1, n)
		}
	}
}

// nopHandler ignores what happens on a queue pair.
type nopHandler struct{}

func (nopHandler) RecvComplete(uint64, int, uint64) {}
func (nopHandler) SendComplete(uint64)              {}
func (nopHandler) Signal(uint64)                    {}
func (nopHandler) Failed(error)                     {}

// etcdProxy forwards connections to an etcd until cutOff, which closes
// them and refuses new ones: a member behind it loses etcd, and nothing
// else.
type etcdProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	cut   bool
	wg    sync.WaitGroup
}

func newEtcdProxy(t *testing.T, endpoint string) *etcdProxy {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &etcdProxy{ln: ln, target: u.Host}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *etcdProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *etcdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			u.Close()
			continue
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Go(func() { io.Copy(u, c); u.Close() })
		p.wg.Go(func() { io.Copy(c, u); c.Close() })
	}
}

// cutOff closes every connection and refuses new ones.
func (p *etcdProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *etcdProxy) close() {
	p.cutOff()
	p.ln.Close()
	p.wg.Wait()
}

// TestOldIncarnationFenced: member 3 loses etcd while it goes on
// sending; the others exclude it (its registration lapses) and it never
// learns, so its incarnation goes on sending in the view they ended.
// Then member 3 is started again, as a new incarnation, while the old
// one still runs. The others drop what the old incarnation sent once
// they had left its view, and count it (convoy.fenced.messages); they
// deliver the same sequence, in which the old incarnation's messages are
// a prefix of what it sent, all in its last view; and the new
// incarnation joins, though the others' connections to member 3 still
// reach the old one, and its messages are delivered only in views that
// list it.
func TestOldIncarnationFenced(t *testing.T) {
	srv := startEtcd(t)
	proxy := newEtcdProxy(t, srv.Endpoints()[0])
	const prefix = "/incarnations/"
	ca := newCA(t, "group CA")
	groups, obs := openTLSGroup(t, func(id uint64) *EtcdConfig {
		e := &EtcdConfig{Endpoints: srv.Endpoints(), Prefix: prefix, LeaseTTL: time.Second}
		if id == 3 {
			e.Endpoints = []string{proxy.endpoint()}
		}
		return e
	}, ca, 1, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := groups[2].Send(ctx, []byte("old 3: first"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	v, _ := groups[2].View()
	oldEpoch := v.Epoch

	// The old incarnation sends a message every millisecond from now on.
	var sent []string
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			p := fmt.Sprintf("old 3: #%d", n)
			if _, err := groups[2].Send(ctx, []byte(p)); err == nil {
				sent = append(sent, p)
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	proxy.cutOff()
	for i := range 2 {
		waitFor(t, fmt.Sprintf("member %d to leave member 3 out", i+1), func() bool {
			v, ok := groups[i].View()
			return ok && v.Epoch > oldEpoch && len(v.Members) == 2
		})
	}

	// The new incarnation.
	newObs := newObserver(t)
	g3, err := Open(context.Background(), Config{Self: 3, Addr: "127.0.0.1:0", Etcd: &EtcdConfig{Endpoints: srv.Endpoints(), Prefix: prefix},
		TLS: memberTLS(t, ca, ca, 3), MeterProvider: newObs.mp, OnView: newObs.onView}, newObs.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	if _, err := g3.Send(ctx, []byte("new 3"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	if _, err := groups[0].Send(ctx, []byte("after"), WaitDelivered()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		waitFor(t, fmt.Sprintf("member %d to deliver", i+1), func() bool { return obs[i].has("after") })
	}
	cancel()
	<-sending

	var want []string
	for _, d := range obs[0].deliveries() {
		want = append(want, string(d.Payload))
	}
	for i := range 2 {
		o := obs[i]
		newIn := map[uint64]bool{}
		for _, v := range o.seenViews() {
			newIn[v.Epoch] = slices.ContainsFunc(v.Members, func(m Member) bool { return m.ID == 3 }) && v.Epoch > oldEpoch
		}
		var got, old []string
		for _, d := range o.deliveries() {
			got = append(got, string(d.Payload))
			switch p := string(d.Payload); {
			case strings.HasPrefix(p, "old 3: #"):
				old = append(old, p)
				if d.Epoch != oldEpoch {
					t.Errorf("member %d delivered %q in view %d, not in view %d, the old incarnation's last", i+1, p, d.Epoch, oldEpoch)
				}
			case p == "new 3" && !newIn[d.Epoch]:
				t.Errorf("member %d delivered %q in view %d, which does not list the new incarnation", i+1, p, d.Epoch)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("member %d delivered %q, member 1 %q", i+1, got, want)
		}
		if len(old) > len(sent) || !slices.Equal(old, sent[:len(old)]) {
			t.Errorf("member %d delivered %d of the old incarnation's messages, not a prefix of the %d it sent", i+1, len(old), len(sent))
		}
		late, cut := o.counter(t, "convoy.fenced.messages", "reason", "late"), o.counter(t, "convoy.fenced.messages", "reason", "cut")
		t.Logf("member %d: delivered %d of the %d messages the old incarnation sent; dropped %d that came after it left its view, %d beyond the cut",
			i+1, len(old), len(sent), late, cut)
		if late+cut == 0 {
			t.Errorf("member %d counted none of the old incarnation's messages as dropped", i+1)
		}
	}
}
