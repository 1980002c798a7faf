package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/convoy-gcs/convoy/internal/vsync"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/rdma"
)

// member is the membership runtime of a view-managed group: the etcd
// connection, this member's incarnation, and the goroutines that watch
// etcd and write to it on the loop's behalf.
type member struct {
	etcd etcdBackend
	// ready is closed once this member takes part in a view (with its
	// state), left once it has left the group on purpose.
	ready, left         chan struct{}
	readyOnce, leftOnce sync.Once
	// failed is closed when the group fails.
	failed     chan struct{}
	failedOnce sync.Once
	closeOnce  sync.Once
	wg         sync.WaitGroup
	// abandon, for tests, makes close leave the etcd lease to expire, as
	// when the process is killed.
	abandon bool
	// refusedSeen holds the refused join requests, registrations and
	// restart claims already logged and counted (refused), by kind,
	// member and incarnation, or by key and revision for a record that
	// does not decode; only the watch goroutine uses it.
	refusedSeen map[refusedKey]bool

	mu struct {
		sync.Mutex
		addrs   map[NodeID]string
		leaving bool
		// withdrawn: the group failed and its registration is gone for
		// good; no store replaces the last one.
		withdrawn bool
		self      membership.Member // the current incarnation
		store     *membership.Store // replaced when its lease is lost
	}
}

func (m *member) setSelf(self membership.Member) {
	m.mu.Lock()
	m.mu.self = self
	m.mu.Unlock()
}

// openDynamic is Open for a view-managed group.
func (g *Group) openDynamic(ctx context.Context) (_ *Group, err error) {
	c := g.cfg
	m := &member{ready: make(chan struct{}), left: make(chan struct{}), failed: make(chan struct{})}
	m.mu.addrs = make(map[NodeID]string)
	g.mem = m
	// Until the loop runs, failures release what is set up so far.
	started := false
	defer func() {
		if err != nil && !started {
			g.release()
		}
	}()
	etcd := g.cfg.test.etcd
	if etcd == nil {
		if etcd, err = dialEtcd(g); err != nil {
			return nil, err
		}
	}
	m.etcd = etcd
	addr := c.Addr
	if g.ep = c.Endpoint; g.ep == nil {
		if g.ep, err = g.listen(m.resolve); err != nil {
			return nil, err
		}
		g.ownEP = true
		if t, ok := g.ep.(*rdma.TCPEndpoint); ok {
			addr = t.Addr().String()
		}
	}
	// A durable member restarts from its log (see replay.go).
	var applied uint64
	if g.disk != nil {
		if applied, err = g.replayLog(ctx); err != nil {
			return nil, err
		}
	}
	self := membership.Member{ID: uint64(c.Self), Incarnation: g.newIncarnation(0), Addr: addr}
	store, err := m.register(ctx, g.log, self)
	if err != nil {
		return nil, fmt.Errorf("convoy: register in etcd: %w", err)
	}
	m.mu.store = store
	g.mu.out = ErrNotMember
	m.setSelf(self)
	started = true
	g.loopWG.Add(1)
	go g.loop(&runner{g: g, vs: vsync.NewCore(g.vsyncConfig(), self), applied: applied})
	m.wg.Add(1)
	go m.watch(g)
	select {
	case <-m.ready:
		return g, nil
	case <-ctx.Done():
		err = fmt.Errorf("convoy: waiting to take part in a view: %w", ctx.Err())
	case <-m.failed:
		err = g.Err()
	}
	g.Close()
	return nil, err
}

// vsyncConfig configures the member's view-change core.
func (g *Group) vsyncConfig() vsync.Config {
	c := g.cfg
	vcfg := vsync.Config{
		InitialMembers: c.InitialMembers, Durable: g.disk != nil, LeaseTTL: c.Etcd.LeaseTTL,
		SuspectTimeout: c.SuspectTimeout, HeartbeatInterval: c.HeartbeatInterval, Logger: g.log,
	}
	if c.Durable != nil {
		vcfg.RestartWait = c.Durable.RestartWait
	}
	return vcfg
}

// etcdBackend is the etcd a member keeps its views in: it makes the
// member's view stores and tells it when they changed. dialEtcd's is a
// real etcd, the one Config.Etcd names; the package's simulation tests
// run on a simulated one.
type etcdBackend interface {
	// newStore returns a view store on a lease of its own.
	newStore(ctx context.Context) (*membership.Store, error)
	// watch reports changes to the group's keys in etcd until ctx ends
	// (as membership.Store.Watch does).
	watch(ctx context.Context, s *membership.Store) <-chan membership.Change
	// abandon, for tests, makes close leave the leases to expire, as
	// when the process is killed: it is called before the store closes.
	// (With the application's client, which stays open, the leases are
	// revoked all the same.)
	abandon()
	// close releases the backend once its last store is closed.
	close()
}

// clientEtcd is a real etcd cluster, the one Config.Etcd names, reached
// with an etcd client: one dialed for the group, which the group closes,
// or the application's (EtcdConfig.Client), which it never closes.
type clientEtcd struct {
	client *clientv3.Client
	// owned: the group dialed the client, and closes it.
	owned bool
	cfg   membership.StoreConfig
}

// dialEtcd connects to the etcd g's configuration names, or takes the
// application's client.
func dialEtcd(g *Group) (*clientEtcd, error) {
	c := g.cfg
	e := &clientEtcd{client: c.Etcd.Client}
	if e.client == nil {
		client, err := clientv3.New(clientv3.Config{
			Endpoints: c.Etcd.Endpoints, DialTimeout: c.Etcd.DialTimeout, TLS: c.Etcd.TLS,
			Username: c.Etcd.Username, Password: c.Etcd.Password,
			Logger: zap.NewNop(), Context: g.ctx,
			// Pings find a connection the network cut off while a request,
			// a watch or a lease's keepalive stream is open on it, so that
			// the client moves to another endpoint; etcd refuses pings more
			// often than every 5s (its --grpc-keepalive-min-time).
			DialKeepAliveTime: etcdKeepAliveTime, DialKeepAliveTimeout: etcdKeepAliveTimeout,
		})
		if err != nil {
			// A login etcd refused fails here: the client logs in as it
			// connects.
			return nil, fmt.Errorf("convoy: connect to etcd %v: %w", c.Etcd.Endpoints, err)
		}
		e.client, e.owned = client, true
	}
	e.cfg = membership.StoreConfig{Client: e.client, Prefix: c.Etcd.Prefix, LeaseTTL: c.Etcd.LeaseTTL, Logger: c.Logger}
	if c.TLS != nil {
		// With TLS, a join request, a registration or a restart claim
		// must prove that its member holds a certificate of the group's
		// for its id (membership.JoinAuth).
		auth, err := membership.NewJoinAuth(c.TLS)
		if err != nil {
			e.close()
			return nil, fmt.Errorf("%w: Config.TLS: %w", ErrInvalidConfig, err)
		}
		e.cfg.JoinAuth = auth
	}
	return e, nil
}

// The etcd client's keepalive pings: one after etcdKeepAliveTime without
// traffic on a connection with a stream open, the connection given up
// if no answer comes within etcdKeepAliveTimeout.
const (
	etcdKeepAliveTime    = 10 * time.Second
	etcdKeepAliveTimeout = 5 * time.Second
)

func (e *clientEtcd) newStore(ctx context.Context) (*membership.Store, error) {
	return membership.NewStore(ctx, e.cfg)
}

func (e *clientEtcd) watch(ctx context.Context, s *membership.Store) <-chan membership.Change {
	return s.Watch(ctx)
}

func (e *clientEtcd) abandon() {
	// Without its client, the store cannot revoke its lease. The
	// application's client stays open: its leases are revoked.
	if e.owned {
		e.client.Close()
	}
}

func (e *clientEtcd) close() {
	if e.owned {
		e.client.Close()
	}
}

// newIncarnation returns a number that grows from one incarnation of a
// member to the next, after after (the incarnation it replaces, or 0):
// the time on the group's clock.
func (g *Group) newIncarnation(after uint64) uint64 { return max(uint64(g.cfg.Clock()), after+1) }

// resolve gives the tcp transport a member's address.
func (m *member) resolve(id NodeID) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.mu.addrs[id]; ok && a != "" {
		return a, nil
	}
	return "", fmt.Errorf("convoy: no address known for member %d", id)
}

// refusedKey identifies a refused record once per incarnation, or, for
// a record that does not decode, once per key and revision.
type refusedKey struct {
	kind            membership.RefusedKind
	id, incarnation uint64
	key             string
	revision        int64
}

// refused logs and counts the join requests, registrations and restart
// claims refused, for their proof once per incarnation, for not decoding
// once per key and revision: they stay in etcd, on the leases of
// whoever wrote them, and every state read lists them again. It runs on
// the watch goroutine.
func (m *member) refused(g *Group, refused []membership.RefusedJoin) {
	if len(refused) == 0 && len(m.refusedSeen) == 0 {
		return
	}
	m.mu.Lock()
	self := m.mu.self
	m.mu.Unlock()
	seen := make(map[refusedKey]bool, len(refused))
	for _, r := range refused {
		bad := errors.Is(r.Err, membership.ErrMalformedRecord)
		key := refusedKey{kind: r.Kind, id: r.Member.ID, incarnation: r.Member.Incarnation}
		if bad {
			key = refusedKey{kind: r.Kind, key: r.Key, revision: r.Revision}
		}
		seen[key] = true
		if m.refusedSeen[key] {
			continue
		}
		for reason, a := range g.m.refusedReasons {
			if errors.Is(r.Err, reason) && int(r.Kind) < len(a) {
				g.m.refusedJoins.Add(context.Background(), 1, a[r.Kind].add...)
				break
			}
		}
		what := "join request"
		switch r.Kind {
		case membership.RefusedRegistration:
			what = "registration"
		case membership.RefusedRestart:
			what = "restart claim"
		}
		switch {
		case bad:
			g.log.Warn("ignored a "+what+" that does not decode", "key", r.Key, "revision", r.Revision, "err", r.Err)
		case r.Member == self:
			g.log.Error("this member's "+what+" fails its own check", "incarnation", r.Member.Incarnation, "err", r.Err)
		default:
			g.log.Warn("refused a "+what, "member", r.Member.ID, "incarnation", r.Member.Incarnation, "addr", r.Member.Addr, "err", r.Err)
		}
	}
	// Forget the requests gone, so that the set stays small.
	m.refusedSeen = seen
}

// learn records the members' addresses from st.
func (m *member) learn(st *membership.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mb := range st.Current.Members {
		m.mu.addrs[NodeID(mb.ID)] = mb.Addr
	}
	for _, mb := range st.Joins {
		m.mu.addrs[NodeID(mb.ID)] = mb.Addr
	}
	for id, mb := range st.Registered {
		m.mu.addrs[NodeID(id)] = mb.Addr
	}
}

// watch reads the store's state whenever it changes (and at least once
// per lease period) and hands it to the loop.
func (m *member) watch(g *Group) {
	defer m.wg.Done()
	resync := max(g.cfg.Etcd.LeaseTTL/2, 100*time.Millisecond)
	for g.ctx.Err() == nil {
		store := m.current()
		ctx, cancel := context.WithCancel(g.ctx)
		changes := m.etcd.watch(ctx, store)
		m.follow(g, store, changes, resync)
		cancel()
		if g.ctx.Err() != nil {
			return
		}
		// The lease is gone (etcd was out of reach for longer than its
		// TTL, or this process was paused): register again on a new one.
		// The others may have excluded this member meanwhile; the state
		// then says so, and it rejoins.
		g.log.Warn("etcd registration lost: registering again", "err", store.Err())
		m.renew(g)
	}
}

// follow hands the store's state to the loop on every change until the
// store's lease is lost or the group closes.
func (m *member) follow(g *Group, store *membership.Store, changes <-chan membership.Change, resync time.Duration) {
	for {
		// A read etcd's client sent on a connection the network cut off
		// gets no answer until TCP gives up on it, which takes minutes:
		// bounded, it is made again, on the next endpoint (the client
		// takes turns among them).
		ctx, cancel := context.WithTimeout(g.ctx, stateReadTimeout(g))
		st, err := store.State(ctx)
		cancel()
		switch {
		case g.ctx.Err() != nil:
			return
		case err != nil:
			g.log.Warn("reading the group's state from etcd", "err", err)
		default:
			m.refused(g, st.Refused)
			m.learn(&st)
			g.post(event{kind: evState, state: &st})
		}
		select {
		case <-changes:
		case <-time.After(resync):
		case <-store.Done():
			return
		case <-g.ctx.Done():
			return
		}
	}
}

// stateReadTimeout bounds one read of the group's state from etcd: a
// lease period, and at least a second.
func stateReadTimeout(g *Group) time.Duration { return max(g.cfg.Etcd.LeaseTTL, time.Second) }

// renew replaces a store whose lease was lost, retrying until it works or
// the group closes: an error that register does not retry (credentials
// refused, say) is logged and tried again a registerTimeout later, since
// an operator may fix it.
func (m *member) renew(g *Group) {
	m.mu.Lock()
	self := m.mu.self
	m.mu.Unlock()
	var store *membership.Store
	for {
		var err error
		if store, err = m.register(g.ctx, g.log, self); err == nil {
			break
		}
		if g.ctx.Err() != nil {
			return
		}
		g.log.Error("cannot register in etcd again", "err", err)
		select {
		case <-time.After(registerTimeout):
		case <-g.ctx.Done():
			return
		}
	}
	m.mu.Lock()
	if m.mu.withdrawn {
		m.mu.Unlock()
		store.Close()
		return
	}
	old := m.mu.store
	m.mu.store = store
	m.mu.Unlock()
	old.Close()
}

// registerTimeout bounds one attempt at registering in etcd.
const registerTimeout = 10 * time.Second

// register makes a view store on a lease of its own and registers self
// in it. While etcd cannot do it (unreachable, without a leader, its
// request timed out, the lease expired meanwhile) it tries again after
// growing, randomized pauses, so that a member started or cut off while
// etcd is down or electing waits for it instead of failing. It gives up
// when ctx ends, or on an error that trying again cannot cure (bad
// credentials, a request etcd refuses as invalid).
func (m *member) register(ctx context.Context, log *slog.Logger, self membership.Member) (*membership.Store, error) {
	return backoff.Retry(ctx, func() (*membership.Store, error) {
		actx, cancel := context.WithTimeout(ctx, registerTimeout)
		defer cancel()
		store, err := m.etcd.newStore(actx)
		if err == nil {
			if err = store.Register(actx, self); err == nil {
				return store, nil
			}
			store.Close()
		}
		if ctx.Err() != nil || !retryableEtcd(err) {
			return nil, backoff.Permanent(err)
		}
		log.Warn("registering in etcd: trying again", "err", err)
		return nil, err
	}, backoff.WithBackOff(registerBackOff()), backoff.WithMaxElapsedTime(0))
}

// registerBackOff returns the pauses between attempts to register: from
// 50 ms, growing by half each time up to 2 s, jittered by half either
// way.
func registerBackOff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, 2*time.Second
	return b
}

// retryableEtcd reports whether an etcd request that failed with err may
// succeed if made again: every failure but a refusal of the request
// itself.
func retryableEtcd(err error) bool {
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return false
	}
	return true
}

// current returns the store in use.
func (m *member) current() *membership.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.store
}

// async runs an etcd write for the loop, bounded in time; failures are
// logged (the next state read shows what happened).
func (r *runner) async(what string, fn func(ctx context.Context, s *membership.Store) error) {
	r.asyncAfter(0, what, fn)
}

// asyncAfter is async, the write made after wait.
func (r *runner) asyncAfter(wait time.Duration, what string, fn func(ctx context.Context, s *membership.Store) error) {
	r.asyncThen(wait, what, fn, nil)
}

// asyncThen is asyncAfter, with done (if not nil) called, from another
// goroutine, once the write is made (nil) or given up (its last error).
func (r *runner) asyncThen(wait time.Duration, what string, fn func(ctx context.Context, s *membership.Store) error, done func(error)) {
	g, m := r.g, r.g.mem
	if done == nil {
		done = func(error) {}
	}
	if g.host != nil {
		g.host.etcdWrite(g, wait, what, fn, done)
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := g.ctx.Err()
		defer func() { done(err) }()
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-g.ctx.Done():
				err = g.ctx.Err()
				return
			}
		}
		// Retry while etcd is out of reach or the store is being renewed
		// (a lost report would stall the view change); a refusal on the
		// merits (another view won, no majority) is final.
		ctx, cancel := context.WithTimeout(g.ctx, asyncTimeout)
		defer cancel()
		for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			err = fn(ctx, m.current())
			if !asyncRetry(g, what, err, ctx.Err()) {
				return
			}
			g.log.Debug("etcd: "+what+": retrying", "err", err, "after", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
		}
	}()
}

// asyncRetry reports whether an etcd write for the loop that failed with
// err is tried again; deadline is the error of its bound, if it passed.
// A refusal on the merits (another view won, no majority) is final.
func asyncRetry(g *Group, what string, err, deadline error) bool {
	switch {
	case err == nil || g.ctx.Err() != nil:
		return false
	case errors.Is(err, membership.ErrConflict), errors.Is(err, membership.ErrNoMajority), errors.Is(err, membership.ErrNoView),
		errors.Is(err, membership.ErrBadRecovery):
		g.log.Info("etcd: "+what, "err", err)
		return false
	case deadline != nil:
		g.log.Warn("etcd: "+what+": giving up", "err", err)
		return false
	}
	return true
}

// asyncTimeout bounds how long an etcd write for the loop is retried.
const asyncTimeout = 30 * time.Second

func (m *member) markReady() { m.readyOnce.Do(func() { close(m.ready) }) }

// withdraw takes a member whose group failed out of etcd: the watcher
// and the loop's writes stop, and its registration goes with its
// lease. Until the application closes the group, a registration left
// behind would vouch for a member that is gone: the others could then
// exclude it only on suspicions, which count once the final reports of a
// majority show that they hear each other, and a report that misses a
// heartbeat under load does not.
func (m *member) withdraw(g *Group) {
	m.mu.Lock()
	m.mu.withdrawn = true
	store := m.mu.store
	m.mu.Unlock()
	// A client the group dialed ends with g.ctx: revoke first.
	if err := store.Close(); err != nil {
		g.log.Warn("withdrawing from etcd", "err", err)
	}
	g.cancel()
	m.wg.Wait()
}

// close releases what openDynamic set up, after the loop has stopped.
func (m *member) close() {
	m.closeOnce.Do(func() {
		m.wg.Wait()
		if m.etcd == nil {
			return // Open failed before it reached etcd
		}
		if m.abandon {
			m.etcd.abandon()
		}
		if store := m.current(); store != nil {
			store.Close()
		}
		m.etcd.close()
	})
}

// Leave takes this member out of the group gracefully: it asks for a view
// without it, waits until that view is installed (its messages sent so
// far are then delivered or reported lost), and closes the group.
func (g *Group) Leave(ctx context.Context) error {
	if g.mem == nil {
		return g.Close()
	}
	m := g.mem
	m.mu.Lock()
	m.mu.leaving = true
	m.mu.Unlock()
	m.mu.Lock()
	self := m.mu.self
	m.mu.Unlock()
	if err := m.current().RequestLeave(ctx, self); err != nil {
		return fmt.Errorf("convoy: leave: %w", err)
	}
	select {
	case <-m.left:
	case <-g.stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Close()
}
