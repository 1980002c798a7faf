package membership

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultPrefix is the key prefix of a store whose StoreConfig.Prefix is
// empty.
const DefaultPrefix = "/convoy/"

// DefaultLeaseTTL is the lease TTL of a store whose StoreConfig.LeaseTTL is
// zero.
const DefaultLeaseTTL = 5 * time.Second

// ErrStoreClosed is what Store.Err reports after Close.
var ErrStoreClosed = errors.New("membership: store closed")

// ErrMalformedRecord is what the Err of a RefusedJoin in State.Refused
// wraps when the record itself does not decode: a registration, a join
// request or a restart claim whose key names no member, whose value is
// not the JSON of one, or names another member (for a claim, or another
// epoch) than its key.
var ErrMalformedRecord = errors.New("membership: malformed record")

const (
	// maxReason bounds a suspicion's reason text.
	maxReason = 1024
	// maxAttempts bounds how often Install re-reads when only caught-up
	// marks changed under it, and State when the view did.
	maxAttempts = 16
	// revokeTimeout bounds the lease revocation in Close.
	revokeTimeout = time.Second
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Client is the etcd client. The store does not close it. NewStoreOn
	// takes none.
	Client *clientv3.Client
	// Prefix is put before every key; it must end in "/". Empty means
	// DefaultPrefix.
	Prefix string
	// LeaseTTL is the TTL of the store's lease, which carries its
	// registration and join request. Zero means DefaultLeaseTTL; etcd
	// counts whole seconds, so it is rounded up, to at least one second.
	// NewStoreOn, whose lease is its caller's, takes none.
	LeaseTTL time.Duration
	// Logger receives the store's messages. Nil means slog.Default().
	Logger *slog.Logger
	// JoinAuth, if set, proves the store's join requests (RequestJoin,
	// RequestJoinFrom), registrations (Register) and restart claims
	// (PutRecovery) and checks everyone's: State lists a request, a
	// registration or a claim that fails the check in State.Refused, not
	// in State.Joins, State.Registered or State.Recoveries, so that no
	// view admits it and no decision counts it. Every member of a
	// group whose members authenticate each other with TLS sets it, with
	// the same certificate authorities; nil, no proof is made or checked.
	JoinAuth *JoinAuth
}

// Store is the view store: the authoritative view sequence in etcd and
// the requests, reports, suspicions and marks a view change works from.
// The key layout is described in keys.go. A Store holds one etcd lease
// (see Lease) while it is open; its methods are safe for concurrent use.
type Store struct {
	kv    clientv3.KV
	cli   *clientv3.Client // for Watch; nil in a store from NewStoreOn
	k     keys
	lease Lease
	log   *slog.Logger
	auth  *JoinAuth // nil: join requests are not proved

	// verdicts caches JoinAuth's verdicts on the join requests and
	// registrations, by key, while the record stays the same (its mod
	// revision).
	vmu      sync.Mutex
	verdicts map[string]verdict

	closeOnce sync.Once
	mu        sync.Mutex
	// closed is why the store was closed: ErrStoreClosed, or the lease's
	// error if it was lost before. Nil while open.
	closed error
}

// NewStore grants the store's lease and keeps it alive. If the lease is
// lost (expired after etcd went unreachable for longer than its TTL, or
// revoked), Done is closed and Err says why.
func NewStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("membership: StoreConfig.Client is nil")
	}
	prefix, lg, err := cfg.common()
	if err != nil {
		return nil, err
	}
	ttl := cfg.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	if ttl < 0 {
		return nil, fmt.Errorf("membership: negative lease TTL %v", ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	lease, err := keepLease(ctx, cfg.Client, secs, lg)
	if err != nil {
		return nil, err
	}
	s := newStore(cfg.Client, lease, prefix, lg)
	s.cli = cfg.Client
	s.auth = cfg.JoinAuth
	return s, nil
}

// NewStoreOn returns a store that reads and writes through kv and puts
// its leased keys on lease, which its caller has granted and keeps alive
// (or lets expire): the store starts no goroutine and makes no lease
// call but lease.Revoke, from Close. It is meant for a deterministic
// simulation, whose kv is a simulated etcd and whose lease lives on its
// virtual clock. cfg.Client and cfg.LeaseTTL must be zero. Watch is not
// available on such a store (the simulation knows when etcd changed).
func NewStoreOn(kv clientv3.KV, lease Lease, cfg StoreConfig) (*Store, error) {
	switch {
	case kv == nil || lease == nil:
		return nil, errors.New("membership: NewStoreOn needs a KV and a lease")
	case cfg.Client != nil || cfg.LeaseTTL != 0:
		return nil, errors.New("membership: NewStoreOn takes no client and no lease TTL")
	}
	prefix, lg, err := cfg.common()
	if err != nil {
		return nil, err
	}
	s := newStore(kv, lease, prefix, lg)
	s.auth = cfg.JoinAuth
	return s, nil
}

// common checks and fills in what both constructors use.
func (cfg StoreConfig) common() (prefix string, lg *slog.Logger, err error) {
	prefix = cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		return "", nil, fmt.Errorf("membership: store prefix %q does not end in /", prefix)
	}
	lg = cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	return prefix, lg, nil
}

func newStore(kv clientv3.KV, lease Lease, prefix string, lg *slog.Logger) *Store {
	return &Store{
		kv:    kv,
		k:     keys{prefix},
		lease: lease,
		log:   lg.With("lease", fmt.Sprintf("%x", int64(lease.ID()))),
	}
}

// Done is closed when the store's lease is lost or the store is closed.
func (s *Store) Done() <-chan struct{} { return s.lease.Done() }

// Err returns nil while Done is open, then why it closed (ErrStoreClosed
// after Close).
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return s.closed
	}
	return s.lease.Err()
}

// Close stops keeping the lease alive and revokes it (best effort, with a
// short timeout), which removes the store's registration and join
// request. It does not close the client. Calling it again, or after the
// lease was lost, only makes sure the keepalive has stopped.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		if s.closed = s.lease.Err(); s.closed == nil {
			s.closed = ErrStoreClosed
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		if rerr := s.lease.Revoke(ctx); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("membership: revoke lease: %w", rerr)
		}
	})
	return err
}

// Register records m as a live process, on the store's lease: the
// registration disappears when the store closes or loses its lease. It is
// a liveness hint, never membership; yet the first view is made of the
// registered members, and a registration of a newer incarnation ends a
// member's, so with a JoinAuth (StoreConfig) it carries its proof.
func (s *Store) Register(ctx context.Context, m Member) error {
	reg := registration{Member: m}
	if s.auth != nil {
		var err error
		if reg.Proof, err = s.auth.ProveRegistration(s.k.p, m); err != nil {
			return fmt.Errorf("membership: register: %w", err)
		}
	}
	return s.putLeased(ctx, "register", s.k.member(m.ID), reg)
}

// registration is the value of a registration: the member, and its proof
// (JoinAuth) if the group asks for one.
type registration struct {
	Member
	Proof []byte `json:"proof,omitempty"`
}

// RequestJoin asks to be admitted by a coming view, on the store's lease.
// Install removes the request when it admits m. With a JoinAuth
// (StoreConfig), the request carries its proof.
func (s *Store) RequestJoin(ctx context.Context, m Member) error {
	return s.requestJoin(ctx, m, nil)
}

// RequestJoinFrom asks, like RequestJoin, to be admitted by a coming
// view, for a member that restarted with its log: pos identifies the
// log's last entry, so that the leader may have the member receive only
// the messages after it (View.Suffixes).
func (s *Store) RequestJoinFrom(ctx context.Context, m Member, pos LogPos) error {
	return s.requestJoin(ctx, m, &pos)
}

func (s *Store) requestJoin(ctx context.Context, m Member, pos *LogPos) error {
	req := joinRequest{Member: m, Log: pos}
	if s.auth != nil {
		var err error
		if req.Proof, err = s.auth.Prove(s.k.p, m, pos); err != nil {
			return fmt.Errorf("membership: request join: %w", err)
		}
	}
	return s.putLeased(ctx, "request join", s.k.join(m.ID), req)
}

// joinRequest is the value of a join request: the member, its log's
// position if it restarted with one, and its proof (JoinAuth) if the
// group asks for one.
type joinRequest struct {
	Member
	Log   *LogPos `json:"log,omitempty"`
	Proof []byte  `json:"proof,omitempty"`
}

// RefusedJoin is a join request, a registration or a restart claim that
// the store refused, because it does not decode or because the store's
// JoinAuth refused its proof: it stays in etcd, on the lease of whoever
// wrote it, but no view admits it and no decision counts it. Whether a
// record is refused depends on its key and value only (and the
// JoinAuth's certificate authorities), so every member refuses the same
// ones.
type RefusedJoin struct {
	// Kind says whether it is a join request, a registration or a
	// restart claim.
	Kind RefusedKind
	// Member is the member the record names; for a record that does not
	// decode, only the ID its key names (zero if none).
	Member Member
	// Key is the record's etcd key and Revision its mod revision: a
	// record written again has a later one.
	Key      string
	Revision int64
	// Err says why; it wraps ErrMalformedRecord, or one of
	// ErrJoinProofMissing, ErrJoinProofMalformed, ErrJoinCertificate,
	// ErrJoinIdentity and ErrJoinSignature.
	Err error
}

// refuse returns the RefusedJoin of record kv, of kind, for err.
func refuse(kind RefusedKind, kv *mvccpb.KeyValue, m Member, err error) RefusedJoin {
	return RefusedJoin{Kind: kind, Member: m, Key: string(kv.Key), Revision: kv.ModRevision, Err: err}
}

// malformed returns the RefusedJoin of record kv, of kind, stored under
// dir/{id}, which failed to decode with err.
func malformed(kind RefusedKind, kv *mvccpb.KeyValue, dir string, err error) RefusedJoin {
	var m Member
	if parts, perr := splitKey(string(kv.Key), dir, 1); perr == nil {
		m.ID, _ = parseID(parts[0])
	}
	return refuse(kind, kv, m, fmt.Errorf("%w: %w", ErrMalformedRecord, err))
}

// RefusedKind is the kind of a record the store refused.
type RefusedKind uint8

const (
	// RefusedJoinRequest: a join request (RequestJoin, RequestJoinFrom).
	RefusedJoinRequest RefusedKind = iota
	// RefusedRegistration: a registration (Register).
	RefusedRegistration
	// RefusedRestart: a claim to restart the group from the members'
	// logs (PutRecovery).
	RefusedRestart
)

func (k RefusedKind) String() string {
	switch k {
	case RefusedJoinRequest:
		return "join"
	case RefusedRegistration:
		return "registration"
	case RefusedRestart:
		return "restart"
	}
	return fmt.Sprintf("RefusedKind(%d)", uint8(k))
}

// verdict is JoinAuth's verdict on a join request, a registration or a
// restart claim at one mod revision, with one set of certificate
// authorities.
type verdict struct {
	mod   int64
	roots *x509.CertPool
	err   error
}

// checkJoin returns JoinAuth's verdict on the join request kv of m,
// whose value decoded as req (or failed to, with decodeErr).
func (s *Store) checkJoin(kv *mvccpb.KeyValue, m Member, req *joinRequest, decodeErr error) error {
	return s.check(kv, decodeErr, func(roots *x509.CertPool, usage x509.ExtKeyUsage) error {
		return verifyProof(roots, usage, m.ID, JoinMessage(s.k.p, m, req.Log), req.Proof)
	})
}

// checkRegistration returns JoinAuth's verdict on the registration kv of
// m, whose value decoded as reg (or failed to, with decodeErr).
func (s *Store) checkRegistration(kv *mvccpb.KeyValue, m Member, reg *registration, decodeErr error) error {
	return s.check(kv, decodeErr, func(roots *x509.CertPool, usage x509.ExtKeyUsage) error {
		return verifyProof(roots, usage, m.ID, RegistrationMessage(s.k.p, m), reg.Proof)
	})
}

// checkRestart returns JoinAuth's verdict on the restart claim kv,
// whose value decoded as claim (or failed to, with decodeErr).
func (s *Store) checkRestart(kv *mvccpb.KeyValue, claim *restartClaim, decodeErr error) error {
	return s.check(kv, decodeErr, func(roots *x509.CertPool, usage x509.ExtKeyUsage) error {
		return verifyProof(roots, usage, claim.Member.ID, RestartMessage(s.k.p, claim.Recovery), claim.Proof)
	})
}

// check returns JoinAuth's verdict on record kv: verify's with the
// certificate authorities of the moment, cached while kv and the
// authorities stay the same, or a malformed proof if kv's value failed
// to decode with decodeErr.
func (s *Store) check(kv *mvccpb.KeyValue, decodeErr error, verify func(*x509.CertPool, x509.ExtKeyUsage) error) error {
	key := string(kv.Key)
	roots, usage := s.auth.trust()
	s.vmu.Lock()
	v, ok := s.verdicts[key]
	s.vmu.Unlock()
	if ok && v.mod == kv.ModRevision && v.roots == roots {
		return v.err
	}
	var err error
	if decodeErr != nil {
		err = fmt.Errorf("%w: %w", ErrJoinProofMalformed, decodeErr)
	} else {
		err = verify(roots, usage)
	}
	s.vmu.Lock()
	if s.verdicts == nil {
		s.verdicts = make(map[string]verdict)
	}
	s.verdicts[key] = verdict{mod: kv.ModRevision, roots: roots, err: err}
	s.vmu.Unlock()
	return err
}

// forgetVerdicts drops the cached verdicts on records not among those
// given (the join requests, registrations and restart claims of a
// state).
func (s *Store) forgetVerdicts(records ...[]*mvccpb.KeyValue) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	n := 0
	for _, kvs := range records {
		n += len(kvs)
	}
	if len(s.verdicts) <= n {
		return
	}
	keep := make(map[string]verdict, n)
	for _, kvs := range records {
		for _, kv := range kvs {
			if v, ok := s.verdicts[string(kv.Key)]; ok {
				keep[string(kv.Key)] = v
			}
		}
	}
	s.verdicts = keep
}

// decodeRegistrations decodes the registrations kvs: those that decode
// and, with a JoinAuth, that it admits, and the others apart. A record
// that does not decode is refused rather than failing the read: anyone
// who may write under the prefix could otherwise stop every member from
// reading the group's state.
func (s *Store) decodeRegistrations(kvs []*mvccpb.KeyValue) (map[ID]Member, []RefusedJoin) {
	regs := make(map[ID]Member, len(kvs))
	var refused []RefusedJoin
	for _, kv := range kvs {
		m, err := decodeMember(kv, s.k.members())
		if err != nil {
			refused = append(refused, malformed(RefusedRegistration, kv, s.k.members(), err))
			continue
		}
		if s.auth != nil {
			var reg registration
			err := json.Unmarshal(kv.Value, &reg)
			if err := s.checkRegistration(kv, m, &reg, err); err != nil {
				refused = append(refused, refuse(RefusedRegistration, kv, m, err))
				continue
			}
		}
		regs[m.ID] = m
	}
	return regs, refused
}

// RequestLeave asks for m to be left out of the coming view. The request
// is not on a lease: it stands if m exits. Install removes it when it
// leaves m out.
func (s *Store) RequestLeave(ctx context.Context, m Member) error {
	return s.putJSON(ctx, "request leave", s.k.leave(m.ID), m)
}

// PutTopicRequest records r, a member's standing wish about a topic: the
// next view change makes the group's topics agree with it (see
// TopicRequest). It replaces the member's earlier request about the same
// topic.
func (s *Store) PutTopicRequest(ctx context.Context, r TopicRequest) error {
	if err := checkTopicRequest(&r); err != nil {
		return err
	}
	return s.putJSON(ctx, "topic request", s.k.topic(r.Member.ID, r.Topic), r)
}

// MarkCaughtUp records that m, admitted by view epoch, has completed its
// state transfer: from now on it counts towards majorities (a joiner
// counts only once it holds the group's state).
func (s *Store) MarkCaughtUp(ctx context.Context, epoch uint64, m Member) error {
	return s.putJSON(ctx, "mark caught up", s.k.caughtUp(epoch, m.ID), m)
}

// PutRecovery records r, a restarted member's claim to restart view
// r.Epoch after most of that view failed (see DecideRecovery), on the
// store's lease. With a JoinAuth (StoreConfig), the claim carries its
// proof.
func (s *Store) PutRecovery(ctx context.Context, r Recovery) error {
	claim := restartClaim{Recovery: r}
	if s.auth != nil {
		var err error
		if claim.Proof, err = s.auth.ProveRestart(s.k.p, r); err != nil {
			return fmt.Errorf("membership: put recovery claim: %w", err)
		}
	}
	return s.putLeased(ctx, "put recovery claim", s.k.recovery(r.Epoch, r.Member.ID), claim)
}

// restartClaim is the value of a restart claim: the claim, and its proof
// (JoinAuth) if the group asks for one.
type restartClaim struct {
	Recovery
	Proof []byte `json:"proof,omitempty"`
}

// PutReport records r, a member's final report for view r.Epoch, unless
// the store holds a later write of the same incarnation's report (a
// higher Seq): of writes retried concurrently, the last one stands,
// whatever the order they land in. A report with Seq 0 replaces any.
func (s *Store) PutReport(ctx context.Context, r Report) error {
	key := s.k.report(r.Epoch, r.Member.ID)
	if r.Seq == 0 {
		return s.putJSON(ctx, "put report", key, r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("membership: put report: %w", err)
	}
	for range maxAttempts {
		resp, err := s.kv.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("membership: put report: %w", err)
		}
		var mod int64
		if len(resp.Kvs) > 0 {
			var old Report
			mod = resp.Kvs[0].ModRevision
			if json.Unmarshal(resp.Kvs[0].Value, &old) == nil && old.Member.Incarnation == r.Member.Incarnation && old.Seq >= r.Seq {
				return nil // a later write landed first
			}
		}
		txn, err := s.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, string(b))).
			Commit()
		if err != nil {
			return fmt.Errorf("membership: put report: %w", err)
		}
		if txn.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("membership: put report: %w", ErrConflict)
}

// Suspect records that member by suspects member suspect in view epoch.
// The reason is cut to 1 KiB.
func (s *Store) Suspect(ctx context.Context, epoch uint64, by, suspect ID, reason string) error {
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "")
	}
	if _, err := s.kv.Put(ctx, s.k.suspect(epoch, suspect, by), reason); err != nil {
		return fmt.Errorf("membership: suspect %d: %w", suspect, err)
	}
	return nil
}

func (s *Store) putLeased(ctx context.Context, what, key string, v any) error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("membership: %s: %w", what, err)
	}
	return s.putJSON(ctx, what, key, v, clientv3.WithLease(s.lease.ID()))
}

func (s *Store) putJSON(ctx context.Context, what, key string, v any, opts ...clientv3.OpOption) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("membership: %s: %w", what, err)
	}
	if _, err := s.kv.Put(ctx, key, string(b), opts...); err != nil {
		return fmt.Errorf("membership: %s: %w", what, err)
	}
	return nil
}

// Bootstrap commits v, the group's first view, if no view exists yet, and
// returns ErrConflict otherwise. v.Epoch must be 1.
func (s *Store) Bootstrap(ctx context.Context, v View) error {
	if v.Epoch != 1 {
		return fmt.Errorf("membership: bootstrap view has epoch %d, not 1", v.Epoch)
	}
	if err := validRecord(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("membership: bootstrap: %w", err)
	}
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.k.view()), "=", 0)).
		Then(clientv3.OpPut(s.k.view(), string(b)), clientv3.OpPut(s.k.viewAt(1), string(b))).
		Commit()
	if err != nil {
		return fmt.Errorf("membership: bootstrap: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("membership: bootstrap: a view exists already: %w", ErrConflict)
	}
	return nil
}

// Current returns the current view, or ErrNoView.
func (s *Store) Current(ctx context.Context) (View, error) {
	resp, err := s.kv.Get(ctx, s.k.view())
	if err != nil {
		return View{}, fmt.Errorf("membership: read current view: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return View{}, ErrNoView
	}
	return decodeView(resp.Kvs[0], 0)
}

// View returns the committed view of epoch, or ErrNoView if there is none
// (not yet, or trimmed).
func (s *Store) View(ctx context.Context, epoch uint64) (View, error) {
	resp, err := s.kv.Get(ctx, s.k.viewAt(epoch))
	if err != nil {
		return View{}, fmt.Errorf("membership: read view %d: %w", epoch, err)
	}
	if len(resp.Kvs) == 0 {
		return View{}, fmt.Errorf("membership: view %d: %w", epoch, ErrNoView)
	}
	return decodeView(resp.Kvs[0], epoch)
}

// Install commits v as view v.Epoch, in one transaction that requires
// view v.Epoch-1 to be current (else ErrConflict) and v to keep a majority
// of that view's caught-up members (else ErrNoMajority, see HasMajority).
// v.Cut must list the current view's members in rank order and v.Start
// must be the end of the current view under that cut. The transaction
// also removes the join requests of v.Joining and the leave requests of
// the members v leaves out. With no view yet it returns ErrNoView.
//
// An Install whose outcome the caller did not learn (a timeout) returns
// ErrConflict when retried after it succeeded; compare Current with v.
func (s *Store) Install(ctx context.Context, v View) error {
	if v.Epoch < 2 {
		return fmt.Errorf("membership: install view %d: epochs start at 1, use Bootstrap", v.Epoch)
	}
	if err := validRecord(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("membership: install view %d: %w", v.Epoch, err)
	}
	for range maxAttempts {
		resp, err := s.kv.Txn(ctx).Then(
			clientv3.OpGet(s.k.view()),
			clientv3.OpGet(s.k.caughtUps(), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return fmt.Errorf("membership: install view %d: %w", v.Epoch, err)
		}
		rev := resp.Header.Revision
		viewKVs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(viewKVs) == 0 {
			return fmt.Errorf("membership: install view %d: %w", v.Epoch, ErrNoView)
		}
		cur, err := decodeView(viewKVs[0], 0)
		if err != nil {
			return err
		}
		if cur.Epoch != v.Epoch-1 {
			return fmt.Errorf("membership: install view %d: view %d is current: %w", v.Epoch, cur.Epoch, ErrConflict)
		}
		if err := checkSuccessor(&cur, &v); err != nil {
			return err
		}
		marks, err := decodeCaughtUp(s.k, resp.Responses[1].GetResponseRange().GetKvs())
		if err != nil {
			return err
		}
		caught := caughtUpSet(&cur, marks)
		if !HasMajority(&cur, func(id ID) bool { return caught[id] }, v.Members) {
			return fmt.Errorf("membership: install view %d: %w", v.Epoch, ErrNoMajority)
		}

		ops := []clientv3.Op{
			clientv3.OpPut(s.k.view(), string(b)),
			clientv3.OpPut(s.k.viewAt(v.Epoch), string(b)),
		}
		for _, id := range v.Joining {
			ops = append(ops, clientv3.OpDelete(s.k.join(id)))
		}
		for _, m := range cur.Members {
			if v.Rank(m.ID) < 0 {
				ops = append(ops, clientv3.OpDelete(s.k.leave(m.ID)))
			}
		}
		commit, err := s.kv.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.k.view()), "=", viewKVs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(s.k.caughtUps()), "<", rev+1).WithPrefix(),
		).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("membership: install view %d: %w", v.Epoch, err)
		}
		if commit.Succeeded {
			return nil
		}
		// The view or a caught-up mark changed since the read: read again.
	}
	return fmt.Errorf("membership: install view %d: caught-up marks keep changing: %w", v.Epoch, ErrConflict)
}

// Recover commits v, a view that restarts the group after most of the
// current view failed, in one transaction that requires
// that DecideRecovery, on the store's state read in it, proposes exactly
// v: the current view is v.Epoch-1, none of its members lives on in its
// incarnation there, and a majority of its caught-up members claimed
// (else ErrConflict or ErrNoMajority). The commit is conditioned on the
// view, the registrations and the claims not changing since that read.
func (s *Store) Recover(ctx context.Context, v View) error {
	if !v.Recovered || v.Epoch < 2 {
		return fmt.Errorf("membership: recover view %d: not a recovered view", v.Epoch)
	}
	if err := validRecord(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("membership: recover view %d: %w", v.Epoch, err)
	}
	for range maxAttempts {
		resp, err := s.kv.Txn(ctx).Then(
			clientv3.OpGet(s.k.view()),
			clientv3.OpGet(s.k.members(), clientv3.WithPrefix()),
			clientv3.OpGet(s.k.caughtUps(), clientv3.WithPrefix()),
			clientv3.OpGet(s.k.recoveriesAt(v.Epoch-1), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return fmt.Errorf("membership: recover view %d: %w", v.Epoch, err)
		}
		rev := resp.Header.Revision
		r := func(i int) []*mvccpb.KeyValue { return resp.Responses[i].GetResponseRange().GetKvs() }
		if len(r(0)) == 0 {
			return fmt.Errorf("membership: recover view %d: %w", v.Epoch, ErrNoView)
		}
		var in RecoveryInput
		if in.Current, err = decodeView(r(0)[0], 0); err != nil {
			return err
		}
		if in.Current.Epoch != v.Epoch-1 {
			return fmt.Errorf("membership: recover view %d: view %d is current: %w", v.Epoch, in.Current.Epoch, ErrConflict)
		}
		in.Registered, _ = s.decodeRegistrations(r(1))
		marks, err := decodeCaughtUp(s.k, r(2))
		if err != nil {
			return err
		}
		in.CaughtUp = caughtUpSet(&in.Current, marks)
		in.Recoveries, _ = s.decodeRecoveries(r(3), in.Current.Epoch)
		if err := checkRecovered(in, &v); err != nil {
			return err
		}
		ops := []clientv3.Op{
			clientv3.OpPut(s.k.view(), string(b)),
			clientv3.OpPut(s.k.viewAt(v.Epoch), string(b)),
		}
		for _, m := range v.Members {
			ops = append(ops, clientv3.OpDelete(s.k.join(m.ID)))
		}
		commit, err := s.kv.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.k.view()), "=", r(0)[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(s.k.members()), "<", rev+1).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(s.k.caughtUps()), "<", rev+1).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(s.k.recoveriesAt(in.Current.Epoch)), "<", rev+1).WithPrefix(),
		).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("membership: recover view %d: %w", v.Epoch, err)
		}
		if commit.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("membership: recover view %d: the state keeps changing: %w", v.Epoch, ErrConflict)
}

// Trim deletes the views, reports and suspicions of epochs below before,
// never those of the current view.
func (s *Store) Trim(ctx context.Context, before uint64) error {
	cur, err := s.Current(ctx)
	if errors.Is(err, ErrNoView) {
		return nil
	}
	if err != nil {
		return err
	}
	// The current epoch only grows, so clamping to a stale one is safe.
	before = min(before, cur.Epoch)
	_, err = s.kv.Txn(ctx).Then(
		clientv3.OpDelete(s.k.viewAt(0), clientv3.WithRange(s.k.viewAt(before))),
		clientv3.OpDelete(s.k.reportsAt(0), clientv3.WithRange(s.k.reportsAt(before))),
		clientv3.OpDelete(s.k.suspectsAt(0), clientv3.WithRange(s.k.suspectsAt(before))),
		clientv3.OpDelete(s.k.recoveriesAt(0), clientv3.WithRange(s.k.recoveriesAt(before))),
	).Commit()
	if err != nil {
		return fmt.Errorf("membership: trim before %d: %w", before, err)
	}
	return nil
}

// State is a consistent snapshot of the store, read at one etcd revision.
type State struct {
	// Revision is the etcd revision the snapshot was read at.
	Revision int64
	// Current is the current view; the zero View (Epoch 0) if none yet.
	Current View
	// Registered holds the live registrations; with a JoinAuth
	// (StoreConfig), only those it admits.
	Registered map[ID]Member
	// Joins lists the pending join requests, sorted by ID; JoinLogs holds
	// the log positions given with them (RequestJoinFrom). With a
	// JoinAuth (StoreConfig), only the requests it admits.
	Joins    []Member
	JoinLogs map[ID]LogPos
	// Refused lists the join requests, registrations and restart claims
	// the store refused, sorted by ID, then kind, then key: those that do
	// not decode (ErrMalformedRecord) and, with a JoinAuth, those whose
	// proof it refused.
	Refused []RefusedJoin
	// Leaves holds the pending leave requests.
	Leaves map[ID]bool
	// Suspects holds the suspicions recorded for Current.Epoch: per
	// suspect, the reason given by each member that suspects it.
	Suspects map[ID]map[ID]string
	// Reports holds the final reports for Current.Epoch.
	Reports map[ID]Report
	// CaughtUp holds the members whose state transfer is complete: those
	// with a caught-up mark of any epoch, except that for a member of
	// Current the mark must name its incarnation there.
	CaughtUp map[ID]bool
	// Recoveries holds the claims to restart Current (see
	// DecideRecovery); with a JoinAuth (StoreConfig), only those it
	// admits.
	Recoveries map[ID]Recovery
	// Topics holds the topic requests (PutTopicRequest), by member ID
	// and topic.
	Topics []TopicRequest
}

// State reads a consistent snapshot of the store: every part is read in
// one etcd transaction, at one revision.
func (s *Store) State(ctx context.Context) (State, error) {
	for range maxAttempts {
		// Learn the current epoch, then read everything at once on the
		// condition that the view has not moved since.
		resp, err := s.kv.Get(ctx, s.k.view())
		if err != nil {
			return State{}, fmt.Errorf("membership: read state: %w", err)
		}
		var cur View
		var mod int64
		if len(resp.Kvs) > 0 {
			if cur, err = decodeView(resp.Kvs[0], 0); err != nil {
				return State{}, err
			}
			mod = resp.Kvs[0].ModRevision
		}
		epoch := cur.Epoch
		// The view is the one just read (the condition says so), so the
		// transaction reads the rest.
		txn, err := s.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(s.k.view()), "=", mod)).
			Then(
				clientv3.OpGet(s.k.members(), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.joins(), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.leaves(), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.suspectsAt(epoch), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.reportsAt(epoch), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.caughtUps(), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.recoveriesAt(epoch), clientv3.WithPrefix()),
				clientv3.OpGet(s.k.topics(), clientv3.WithPrefix()),
			).Commit()
		if err != nil {
			return State{}, fmt.Errorf("membership: read state: %w", err)
		}
		if !txn.Succeeded {
			continue // a view was installed in between
		}
		r := func(i int) []*mvccpb.KeyValue { return txn.Responses[i].GetResponseRange().GetKvs() }
		st, err := s.decodeState(txn.Header.Revision, cur, r(0), r(1), r(2), r(3), r(4), r(5))
		if err != nil {
			return State{}, err
		}
		var refused []RefusedJoin
		st.Recoveries, refused = s.decodeRecoveries(r(6), epoch)
		if len(refused) > 0 {
			st.Refused = append(st.Refused, refused...)
			sortRefused(st.Refused)
		}
		if s.auth != nil {
			s.forgetVerdicts(r(0), r(1), r(6))
		}
		if st.Topics, err = decodeTopicRequests(r(7), s.k.topics()); err != nil {
			return State{}, err
		}
		return st, nil
	}
	return State{}, errors.New("membership: read state: the view keeps changing")
}

// decodeState decodes the parts of a State read at revision rev, whose
// current view is cur.
func (s *Store) decodeState(rev int64, cur View, members, joins, leaves, suspects, reports, caughtUp []*mvccpb.KeyValue) (State, error) {
	epoch := cur.Epoch
	st := State{
		Revision: rev,
		Current:  cur,
		Leaves:   make(map[ID]bool, len(leaves)),
		Suspects: make(map[ID]map[ID]string),
		Reports:  make(map[ID]Report, len(reports)),
	}
	st.Registered, st.Refused = s.decodeRegistrations(members)
	st.JoinLogs = make(map[ID]LogPos)
	for _, kv := range joins {
		m, err := decodeMember(kv, s.k.joins())
		if err != nil {
			st.Refused = append(st.Refused, malformed(RefusedJoinRequest, kv, s.k.joins(), err))
			continue
		}
		var req joinRequest
		err = json.Unmarshal(kv.Value, &req)
		if s.auth != nil {
			if err := s.checkJoin(kv, m, &req, err); err != nil {
				st.Refused = append(st.Refused, refuse(RefusedJoinRequest, kv, m, err))
				continue
			}
		}
		st.Joins = append(st.Joins, m)
		if err == nil && req.Log != nil {
			st.JoinLogs[m.ID] = *req.Log
		}
	}
	slices.SortFunc(st.Joins, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	sortRefused(st.Refused)
	for _, kv := range leaves {
		m, err := decodeMember(kv, s.k.leaves())
		if err != nil {
			return State{}, err
		}
		st.Leaves[m.ID] = true
	}
	for _, kv := range suspects {
		parts, err := splitKey(string(kv.Key), s.k.suspectsAt(epoch), 2)
		if err != nil {
			return State{}, fmt.Errorf("membership: %w", err)
		}
		suspect, err1 := parseID(parts[0])
		by, err2 := parseID(parts[1])
		if err := errors.Join(err1, err2); err != nil {
			return State{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
		}
		reason := string(kv.Value)
		if len(reason) > maxReason {
			reason = strings.ToValidUTF8(reason[:maxReason], "")
		}
		if st.Suspects[suspect] == nil {
			st.Suspects[suspect] = make(map[ID]string)
		}
		st.Suspects[suspect][by] = reason
	}
	for _, kv := range reports {
		r, err := decodeReport(kv, s.k.reportsAt(epoch), epoch)
		if err != nil {
			return State{}, err
		}
		st.Reports[r.Member.ID] = r
	}
	marks, err := decodeCaughtUp(s.k, caughtUp)
	if err != nil {
		return State{}, err
	}
	st.CaughtUp = caughtUpSet(&st.Current, marks)
	return st, nil
}

// sortRefused sorts refused records as State.Refused lists them.
func sortRefused(refused []RefusedJoin) {
	slices.SortFunc(refused, func(a, b RefusedJoin) int {
		return cmp.Or(cmp.Compare(a.Member.ID, b.Member.ID), cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Key, b.Key))
	})
}

// Change says that something under the store's prefix changed at
// Revision (or may have: see Watch). The receiver reads State.
type Change struct{ Revision int64 }

// Watch reports changes under the store's prefix until ctx ends (or the
// client is closed), then closes the channel. A first Change comes at once, so a caller can do all
// its reading in its receive loop and miss nothing. Bursts are coalesced:
// the channel holds at most one Change, the latest. If the watch fails
// (for instance because etcd compacted the revision it was at), Watch logs
// it, watches again from the current revision and sends a Change so that
// the receiver reads the state afresh. On a store from NewStoreOn, which
// has no client to watch with, the channel is closed at once.
func (s *Store) Watch(ctx context.Context) <-chan Change {
	out := make(chan Change, 1)
	if s.cli == nil {
		close(out)
		return out
	}
	go s.watch(ctx, out)
	return out
}

func (s *Store) watch(ctx context.Context, out chan Change) {
	defer close(out)
	send := func(rev int64) {
		c := Change{Revision: rev}
		select {
		case out <- c:
		default:
			// Replace the pending Change with this later one. Only this
			// goroutine sends, so the second send cannot block.
			select {
			case <-out:
			default:
			}
			out <- c
		}
	}
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil && s.cli.Ctx().Err() == nil {
		// Start at the revision of a fresh read, and tell the receiver to
		// read: nothing after that revision can be missed.
		resp, err := s.cli.Get(ctx, s.k.view())
		if err != nil {
			if ctx.Err() == nil && s.cli.Ctx().Err() == nil {
				s.log.Warn("view store watch: read revision", "err", err)
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		rev := resp.Header.Revision
		send(rev)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.cli.Watch(wctx, s.k.p, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if err := wr.Err(); err != nil {
				if ctx.Err() == nil && s.cli.Ctx().Err() == nil {
					s.log.Warn("view store watch failed; watching again", "err", err)
				}
				break
			}
			backoff = minBackoff
			if len(wr.Events) > 0 {
				send(wr.Header.Revision)
			}
		}
		cancel()
		if ctx.Err() == nil && s.cli.Ctx().Err() == nil {
			sleep(ctx, backoff)
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// validRecord checks what any committed view record must satisfy.
func validRecord(v *View) error {
	if len(v.Members) == 0 {
		return fmt.Errorf("membership: view %d has no members", v.Epoch)
	}
	seen := make(map[ID]bool, len(v.Members))
	for _, m := range v.Members {
		if seen[m.ID] {
			return fmt.Errorf("membership: view %d lists member %d twice", v.Epoch, m.ID)
		}
		seen[m.ID] = true
	}
	if len(v.Sent) != len(v.Members) {
		return fmt.Errorf("membership: view %d has %d Sent entries for %d members", v.Epoch, len(v.Sent), len(v.Members))
	}
	joining := make(map[ID]bool, len(v.Joining))
	for _, id := range v.Joining {
		if !seen[id] {
			return fmt.Errorf("membership: view %d: joiner %d is not a member", v.Epoch, id)
		}
		joining[id] = true
	}
	for _, sf := range v.Suffixes {
		if !joining[sf.ID] || !seen[sf.Donor] || joining[sf.Donor] || sf.From == 0 || sf.From > v.Start+1 {
			return fmt.Errorf("membership: view %d: bad suffix transfer %+v", v.Epoch, sf)
		}
	}
	return nil
}

// checkSuccessor checks that next's cut ends cur: one entry per member
// of cur in rank order, and next.Start the end of cur under that cut.
func checkSuccessor(cur, next *View) error {
	if len(next.Cut) != len(cur.Members) {
		return fmt.Errorf("membership: view %d: cut has %d entries for the %d members of view %d",
			next.Epoch, len(next.Cut), len(cur.Members), cur.Epoch)
	}
	for i, c := range next.Cut {
		if c.ID != cur.Members[i].ID {
			return fmt.Errorf("membership: view %d: cut entry %d is member %d, not %d",
				next.Epoch, i, c.ID, cur.Members[i].ID)
		}
	}
	if end := End(cur, next.Cut); next.Start != end {
		return fmt.Errorf("membership: view %d: start %d, but view %d ends at %d under its cut",
			next.Epoch, next.Start, cur.Epoch, end)
	}
	return nil
}

// decodeView decodes a view record; epoch, if not zero, is the epoch its
// key names.
func decodeView(kv *mvccpb.KeyValue, epoch uint64) (View, error) {
	var v View
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return View{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	if epoch != 0 && v.Epoch != epoch {
		return View{}, fmt.Errorf("membership: key %q holds view %d", kv.Key, v.Epoch)
	}
	if v.Epoch == 0 {
		return View{}, fmt.Errorf("membership: key %q holds a view of epoch 0", kv.Key)
	}
	if err := validRecord(&v); err != nil {
		return View{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	return v, nil
}

// decodeMember decodes a Member stored under dir/{id}.
func decodeMember(kv *mvccpb.KeyValue, dir string) (Member, error) {
	parts, err := splitKey(string(kv.Key), dir, 1)
	if err != nil {
		return Member{}, fmt.Errorf("membership: %w", err)
	}
	id, err := parseID(parts[0])
	if err != nil {
		return Member{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	var m Member
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return Member{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	if m.ID != id {
		return Member{}, fmt.Errorf("membership: key %q holds member %d", kv.Key, m.ID)
	}
	return m, nil
}

// decodeTopicRequests decodes the topic requests stored under
// dir/{id}/{hex name}.
func decodeTopicRequests(kvs []*mvccpb.KeyValue, dir string) ([]TopicRequest, error) {
	var out []TopicRequest
	for _, kv := range kvs {
		parts, err := splitKey(string(kv.Key), dir, 2)
		if err != nil {
			return nil, fmt.Errorf("membership: %w", err)
		}
		id, err := parseID(parts[0])
		if err != nil {
			return nil, fmt.Errorf("membership: key %q: %w", kv.Key, err)
		}
		var r TopicRequest
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("membership: key %q: %w", kv.Key, err)
		}
		if r.Member.ID != id || hex.EncodeToString([]byte(r.Topic)) != parts[1] {
			return nil, fmt.Errorf("membership: key %q holds member %d's request about topic %q", kv.Key, r.Member.ID, r.Topic)
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeReport decodes the report stored under dir/{id} for epoch.
func decodeReport(kv *mvccpb.KeyValue, dir string, epoch uint64) (Report, error) {
	parts, err := splitKey(string(kv.Key), dir, 1)
	if err != nil {
		return Report{}, fmt.Errorf("membership: %w", err)
	}
	id, err := parseID(parts[0])
	if err != nil {
		return Report{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	var r Report
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return Report{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	if r.Member.ID != id || r.Epoch != epoch {
		return Report{}, fmt.Errorf("membership: key %q holds a report of member %d for epoch %d", kv.Key, r.Member.ID, r.Epoch)
	}
	return r, nil
}

// decodeRecoveries decodes the restart claims kvs of view epoch: those
// that decode and, with a JoinAuth, that it admits, and the others
// apart, as decodeRegistrations does.
func (s *Store) decodeRecoveries(kvs []*mvccpb.KeyValue, epoch uint64) (map[ID]Recovery, []RefusedJoin) {
	dir := s.k.recoveriesAt(epoch)
	out := make(map[ID]Recovery, len(kvs))
	var refused []RefusedJoin
	for _, kv := range kvs {
		rc, err := decodeRecovery(kv, dir, epoch)
		if err != nil {
			refused = append(refused, malformed(RefusedRestart, kv, dir, err))
			continue
		}
		if s.auth != nil {
			var claim restartClaim
			err := json.Unmarshal(kv.Value, &claim)
			if err := s.checkRestart(kv, &claim, err); err != nil {
				refused = append(refused, refuse(RefusedRestart, kv, rc.Member, err))
				continue
			}
		}
		out[rc.Member.ID] = rc
	}
	return out, refused
}

// decodeRecovery decodes the claim stored under dir/{id} for epoch.
func decodeRecovery(kv *mvccpb.KeyValue, dir string, epoch uint64) (Recovery, error) {
	parts, err := splitKey(string(kv.Key), dir, 1)
	if err != nil {
		return Recovery{}, fmt.Errorf("membership: %w", err)
	}
	id, err := parseID(parts[0])
	if err != nil {
		return Recovery{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	var rc Recovery
	if err := json.Unmarshal(kv.Value, &rc); err != nil {
		return Recovery{}, fmt.Errorf("membership: key %q: %w", kv.Key, err)
	}
	if rc.Member.ID != id || rc.Epoch != epoch {
		return Recovery{}, fmt.Errorf("membership: key %q holds a claim of member %d for epoch %d", kv.Key, rc.Member.ID, rc.Epoch)
	}
	return rc, nil
}

// caughtUpMark is one decoded caught-up mark.
type caughtUpMark struct {
	epoch  uint64
	member Member
}

func decodeCaughtUp(k keys, kvs []*mvccpb.KeyValue) ([]caughtUpMark, error) {
	marks := make([]caughtUpMark, 0, len(kvs))
	for _, kv := range kvs {
		parts, err := splitKey(string(kv.Key), k.caughtUps(), 2)
		if err != nil {
			return nil, fmt.Errorf("membership: %w", err)
		}
		epoch, err := parseEpoch(parts[0])
		if err != nil {
			return nil, fmt.Errorf("membership: key %q: %w", kv.Key, err)
		}
		m, err := decodeMember(kv, k.caughtUps()+parts[0]+"/")
		if err != nil {
			return nil, err
		}
		marks = append(marks, caughtUpMark{epoch, m})
	}
	return marks, nil
}

// caughtUpSet says which members are caught up as far as cur is
// concerned: a member of cur needs a mark of its incarnation in cur from
// an epoch no later than cur's; anyone else, any mark.
func caughtUpSet(cur *View, marks []caughtUpMark) map[ID]bool {
	inc := make(map[ID]uint64, len(cur.Members))
	for _, m := range cur.Members {
		inc[m.ID] = m.Incarnation
	}
	set := make(map[ID]bool, len(marks))
	for _, mk := range marks {
		if i, ok := inc[mk.member.ID]; ok && (i != mk.member.Incarnation || mk.epoch > cur.Epoch) {
			continue
		}
		set[mk.member.ID] = true
	}
	return set
}
