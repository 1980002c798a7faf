package vsync

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-gcs/convoy/internal/devcerts"
	"github.com/convoy-gcs/convoy/internal/etcdsim"
	"github.com/convoy-gcs/convoy/membership"
)

// TestForgedRegistrations: in a group whose members authenticate each
// other with TLS, processes with access to etcd but without a
// certificate of the group's for the id they use register, with their
// own certificates: one as member 4 before the group is founded, then,
// once it is, others over the registrations of members 2 and 3, as newer
// incarnations. The first view lists the three members and not the
// forger, founded only once the three registered; and the forged
// registrations make no member of the view suspected, at once or a
// lease period later.
func TestForgedRegistrations(t *testing.T) {
	ctx := context.Background()
	rig := newForgeryRig(t)
	ca, rogueCA, open, member := rig.ca, rig.rogueCA, rig.open, forgeryMember
	register := func(s *membership.Store, m membership.Member) {
		t.Helper()
		if err := s.Register(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	state := func(s *membership.Store) *membership.State {
		t.Helper()
		st, err := s.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return &st
	}
	const ttl = time.Second
	core := NewCore(Config{InitialMembers: 3, LeaseTTL: ttl, SuspectTimeout: ttl, HeartbeatInterval: ttl / 10}, member(1, 1))

	// Members 1 and 2, and the forger of member 4, register: two honest
	// registrations do not found the group.
	s1 := open(ca, 1)
	register(s1, member(1, 1))
	register(open(ca, 2), member(2, 1))
	register(open(rogueCA, 4), member(4, 1))
	if out := core.State(0, state(s1)); len(out) != 0 {
		t.Fatalf("with members 1 and 2 registered, and a forger as 4: %v", out)
	}
	register(open(ca, 3), member(3, 1))
	out := core.State(0, state(s1))
	if len(out) != 1 || out[0].Kind != Bootstrap {
		t.Fatalf("with members 1, 2 and 3 registered: %v, want a bootstrap", out)
	}
	first := *out[0].View
	if ids := memberIDs(first.Members); !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("first view lists %v, want members 1, 2 and 3", ids)
	}
	if err := s1.Bootstrap(ctx, first); err != nil {
		t.Fatal(err)
	}
	core.Entered(&first)

	// Newer incarnations of members 2 and 3 register over theirs: one
	// with a certificate of the group's for another member, one with
	// another CA's.
	register(open(ca, 5), member(2, 2))
	register(open(rogueCA, 3), member(3, 2))
	st := state(s1)
	if len(st.Refused) != 3 {
		t.Errorf("refused %v, want the registrations of members 2, 3 and 4", st.Refused)
	}
	for _, now := range []time.Duration{0, ttl, 3 * ttl} {
		if got := core.unregistered(int64(now), st); len(got) != 0 {
			t.Errorf("at %v: members %v suspected for their registrations", now, got)
		}
		for _, a := range core.State(int64(now), st) {
			t.Errorf("at %v: %v (%s)", now, a.Kind, a.Reason)
		}
	}
	if core.Phase() != Active {
		t.Errorf("phase %v, want %v", core.Phase(), Active)
	}
}

func memberIDs(ms []membership.Member) []uint64 {
	ids := make([]uint64, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

func newDevCA(t *testing.T, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// devTLS returns the TLS configuration of a member whose certificate
// issuer issued, naming id, and which trusts trust.
func devTLS(t *testing.T, issuer, trust *devcerts.CA, id uint64) *tls.Config {
	t.Helper()
	certPEM, keyPEM, err := issuer.Issue(devcerts.Leaf{Name: fmt.Sprint("member ", id), Members: []uint64{id}, Server: true, Client: true, Validity: time.Hour})
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

// TestForgedRestartClaims: in a group whose members authenticate each
// other with TLS, every member of the first view failed, and the
// restarted incarnations of members 1 and 2 claim their logs. A process
// with access to etcd, with a certificate another CA issued for member
// 3, writes a claim for member 3's restarted (registered) incarnation
// with a log far beyond the others'. The claim is refused: it neither
// completes the claims, which would restart the group at once, nor sets
// the position the group restarts from; the leader restarts it from the
// honest logs, once the others had their while to claim.
func TestForgedRestartClaims(t *testing.T) {
	ctx := context.Background()
	rig := newForgeryRig(t)
	ca, rogueCA, open, member := rig.ca, rig.rogueCA, rig.open, forgeryMember
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	s1, s2, s3 := open(ca, 1), open(ca, 2), open(ca, 3)
	first := membership.View{Epoch: 1, Members: []membership.Member{member(1, 1), member(2, 1), member(3, 1)}, Sent: make([]uint64, 3)}
	check(s1.Bootstrap(ctx, first))
	// The restarted incarnations register; 1 and 2 claim their logs.
	check(s1.Register(ctx, member(1, 2)))
	check(s2.Register(ctx, member(2, 2)))
	check(s3.Register(ctx, member(3, 2)))
	check(s1.PutRecovery(ctx, membership.Recovery{Epoch: 1, Member: member(1, 2), LogLast: 10, InView: true}))
	check(s2.PutRecovery(ctx, membership.Recovery{Epoch: 1, Member: member(2, 2), LogLast: 8, InView: true}))
	check(open(rogueCA, 3).PutRecovery(ctx, membership.Recovery{Epoch: 1, Member: member(3, 2), LogLast: 5000, InView: true}))

	st, err := s1.State(ctx)
	check(err)
	if ids := slices.Sorted(maps.Keys(st.Recoveries)); !slices.Equal(ids, []uint64{1, 2}) {
		t.Errorf("claims of members %v, want 1 and 2", ids)
	}
	if len(st.Refused) != 1 || st.Refused[0].Kind != membership.RefusedRestart || st.Refused[0].Member != member(3, 2) {
		t.Errorf("refused %v, want member 3's restart claim", st.Refused)
	}

	const ttl, wait = time.Second, 5 * time.Second
	core := NewCore(Config{InitialMembers: 3, LeaseTTL: ttl, SuspectTimeout: ttl, HeartbeatInterval: ttl / 10, Durable: true, RestartWait: wait}, member(1, 2))
	var recovered *membership.View
	for _, now := range []time.Duration{0, ttl, ttl + wait/2, ttl + wait} {
		for _, a := range core.State(int64(now), &st) {
			switch {
			case a.Kind == Recover && now < ttl+wait:
				t.Fatalf("at %v: restarts the group from %d, without waiting for member 3's claim", now, a.View.Start)
			case a.Kind == Recover:
				recovered = a.View
			default:
				t.Errorf("at %v: %v", now, a.Kind)
			}
		}
	}
	if recovered == nil {
		t.Fatal("the group did not restart")
	}
	if ids := memberIDs(recovered.Members); recovered.Start != 10 || !slices.Equal(ids, []uint64{1, 2}) {
		t.Errorf("restarted from %d with members %v, want from 10 with 1 and 2", recovered.Start, ids)
	}
	// The store agrees: the refused claim is not among those its
	// commit checks the view against.
	check(s1.Recover(ctx, *recovered))
}

// forgeryRig is what the forgery tests share: a simulated etcd, the
// group's CA and a rogue one.
type forgeryRig struct {
	t           *testing.T
	sim         *etcdsim.Server
	kv          clientv3.KV
	ca, rogueCA *devcerts.CA
}

func newForgeryRig(t *testing.T) *forgeryRig {
	sim := etcdsim.New(etcdsim.Config{})
	return &forgeryRig{t: t, sim: sim, kv: clientv3.NewKVFromKVClient(sim, nil),
		ca: newDevCA(t, "group CA"), rogueCA: newDevCA(t, "rogue CA")}
}

// open returns a store whose proofs are made with a certificate of
// issuer naming id, trusting the group's CA.
func (r *forgeryRig) open(issuer *devcerts.CA, id uint64) *membership.Store {
	t := r.t
	t.Helper()
	auth, err := membership.NewJoinAuth(devTLS(t, issuer, r.ca, id))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := r.sim.GrantClientLease(10)
	if err != nil {
		t.Fatal(err)
	}
	s, err := membership.NewStoreOn(r.kv, lease, membership.StoreConfig{Prefix: "/forged/", JoinAuth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// forgeryMember returns a member record for id's incarnation.
func forgeryMember(id, incarnation uint64) membership.Member {
	return membership.Member{ID: id, Incarnation: incarnation, Addr: fmt.Sprintf("h%d:%d", id, incarnation)}
}
