package membership

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/freeport"
)

// Environment of a re-executed test binary that runs only an etcd server
// (see runEtcdChild and startEtcdProcess).
const (
	etcdChildEnv     = "CONVOY_MEMBERSHIP_ETCD_CHILD" // "1" in the child
	etcdChildDirEnv  = "CONVOY_MEMBERSHIP_ETCD_DIR"
	etcdChildAddrEnv = "CONVOY_MEMBERSHIP_ETCD_ADDR"
)

func TestMain(m *testing.M) {
	if os.Getenv(etcdChildEnv) == "1" {
		os.Exit(runEtcdChild())
	}
	goleak.VerifyTestMain(m)
}

// runEtcdChild serves etcd as the environment says, prints "endpoint URL"
// on stdout, and runs until stdin closes or a SIGTERM/SIGINT arrives.
func runEtcdChild() int {
	srv, err := etcddev.Start(context.Background(), etcddev.Config{
		Dir:        os.Getenv(etcdChildDirEnv),
		ClientAddr: os.Getenv(etcdChildAddrEnv),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("endpoint %s\n", srv.Endpoints()[0])
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// etcdProcess is an etcd server in a child process.
type etcdProcess struct {
	cmd      *exec.Cmd
	endpoint string
}

// startEtcdProcess re-executes the test binary as an etcd server on dir
// and addr ("" for a free port) and waits for its endpoint. The process is
// killed at the end of the test if it still runs.
func startEtcdProcess(t *testing.T, dir, addr string) *etcdProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdChildEnv+"=1", etcdChildDirEnv+"="+dir, etcdChildAddrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil { // closes when we die
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &etcdProcess{cmd: cmd}
	t.Cleanup(p.kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("etcd child: %v", err)
	}
	ep, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint ")
	if !ok {
		t.Fatalf("etcd child said %q", line)
	}
	p.endpoint = ep
	return p
}

// kill ends the process at once, like a crash.
func (p *etcdProcess) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// testEtcd starts an in-process etcd for t and returns a client of it;
// both are closed when t ends.
func testEtcd(t *testing.T) (*etcddev.Server, *clientv3.Client) {
	t.Helper()
	ctx := testCtx(t)
	srv, err := etcddev.Start(ctx, etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// testCtx returns a context that ends with t, or after 20 s.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newTestStore(t *testing.T, cli *clientv3.Client, ttl time.Duration) *Store {
	t.Helper()
	s, err := NewStore(testCtx(t), StoreConfig{Client: cli, LeaseTTL: ttl, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testLogger logs to t's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func member(id ID) Member { return Member{ID: id, Incarnation: 1, Addr: fmt.Sprintf("h%d:1", id)} }

// firstView is view 1 with the given members.
func firstView(ids ...ID) View {
	v := View{Epoch: 1, Sent: make([]uint64, len(ids))}
	for _, id := range ids {
		v.Members = append(v.Members, member(id))
	}
	return v
}

// nextView is the view after cur with the given members, cutting every
// sender of cur at seq; ids not in cur join.
func nextView(cur View, seq uint64, ids ...ID) View {
	v := View{Epoch: cur.Epoch + 1}
	for _, m := range cur.Members {
		v.Cut = append(v.Cut, SenderCut{ID: m.ID, Seq: seq})
	}
	v.Start = End(&cur, v.Cut)
	for _, id := range ids {
		v.Sent = append(v.Sent, 0)
		if r := cur.Rank(id); r >= 0 {
			v.Members = append(v.Members, cur.Members[r])
			v.Sent[len(v.Sent)-1] = cur.Sent[r] + seq
			continue
		}
		v.Members = append(v.Members, member(id))
		v.Joining = append(v.Joining, id)
	}
	return v
}

func TestStoreConfig(t *testing.T) {
	_, cli := testEtcd(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		cfg  StoreConfig
		ok   bool
	}{
		{"defaults", StoreConfig{Client: cli}, true},
		{"sub-second TTL", StoreConfig{Client: cli, LeaseTTL: time.Millisecond, Prefix: "/x/"}, true},
		{"no client", StoreConfig{}, false},
		{"prefix without slash", StoreConfig{Client: cli, Prefix: "/x"}, false},
		{"negative TTL", StoreConfig{Client: cli, LeaseTTL: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewStore(ctx, tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewStore: %v, want ok=%v", err, tc.ok)
			}
			if err == nil {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
				if !errors.Is(s.Err(), ErrStoreClosed) {
					t.Errorf("Err after Close = %v", s.Err())
				}
			}
		})
	}
}

func TestBootstrap(t *testing.T) {
	eachBackend(t, testBootstrap)
}

func testBootstrap(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)

	if _, err := s.Current(ctx); !errors.Is(err, ErrNoView) {
		t.Fatalf("Current on an empty store: %v, want ErrNoView", err)
	}
	if st, err := s.State(ctx); err != nil || st.Current.Epoch != 0 {
		t.Fatalf("State on an empty store: %+v, %v", st.Current, err)
	}
	v1 := firstView(1, 2, 3)
	bad := firstView(1, 2)
	bad.Sent = nil
	for _, tc := range []struct {
		name string
		v    View
		want error // nil: success; errAny: some non-sentinel error
	}{
		{"epoch 2", func() View { v := firstView(1); v.Epoch = 2; return v }(), errAny},
		{"no members", View{Epoch: 1}, errAny},
		{"duplicate member", firstView(1, 1), errAny},
		{"Sent of the wrong size", bad, errAny},
		{"first", v1, nil},
		{"again", v1, ErrConflict},
		{"another", firstView(4, 5), ErrConflict},
	} {
		err := s.Bootstrap(ctx, tc.v)
		checkErr(t, tc.name, err, tc.want)
	}
	got, err := s.Current(ctx)
	if err != nil || !reflect.DeepEqual(got, v1) {
		t.Fatalf("Current = %+v, %v; want %+v", got, err, v1)
	}
	if got, err := s.View(ctx, 1); err != nil || !reflect.DeepEqual(got, v1) {
		t.Fatalf("View(1) = %+v, %v; want %+v", got, err, v1)
	}
	if _, err := s.View(ctx, 2); !errors.Is(err, ErrNoView) {
		t.Fatalf("View(2): %v, want ErrNoView", err)
	}
}

// errAny stands for "some error that is none of the sentinels".
var errAny = errors.New("any error")

func checkErr(t *testing.T, name string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: %v, want success", name, err)
	case want == errAny && err == nil:
		t.Errorf("%s: success, want an error", name)
	case want == errAny && (errors.Is(err, ErrConflict) || errors.Is(err, ErrNoMajority) || errors.Is(err, ErrNoView)):
		t.Errorf("%s: %v, want a plain error", name, err)
	case want != nil && want != errAny && !errors.Is(err, want):
		t.Errorf("%s: %v, want %v", name, err, want)
	}
}

func TestInstall(t *testing.T) {
	eachBackend(t, testInstall)
}

func testInstall(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)

	if err := s.Install(ctx, nextView(firstView(1, 2, 3), 0, 1, 2)); !errors.Is(err, ErrNoView) {
		t.Fatalf("Install before Bootstrap: %v, want ErrNoView", err)
	}
	v1 := firstView(1, 2, 3)
	if err := s.Bootstrap(ctx, v1); err != nil {
		t.Fatal(err)
	}
	// Requests that view 2 settles, and one it does not.
	for _, id := range []ID{4, 5} {
		if err := s.RequestJoin(ctx, member(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RequestLeave(ctx, member(3)); err != nil {
		t.Fatal(err)
	}
	v2 := nextView(v1, 7, 1, 2, 4)
	badCut := nextView(v1, 7, 1, 2, 4)
	badCut.Cut = badCut.Cut[1:]
	badStart := nextView(v1, 7, 1, 2, 4)
	badStart.Start++
	for _, tc := range []struct {
		name string
		v    View
		want error
	}{
		{"epoch 1", v1, errAny},
		{"skips an epoch", nextView(v2, 1, 1, 2, 4), ErrConflict},
		{"cut misses a sender", badCut, errAny},
		{"start is not the cut's end", badStart, errAny},
		{"joiner not a member", func() View { v := nextView(v1, 7, 1, 2); v.Joining = []ID{9}; return v }(), errAny},
		{"view 2", v2, nil},
		{"view 2 again", v2, ErrConflict},
		{"another view 2", nextView(v1, 3, 1, 2, 3), ErrConflict},
	} {
		checkErr(t, tc.name, s.Install(ctx, tc.v), tc.want)
	}
	if got, err := s.Current(ctx); err != nil || !reflect.DeepEqual(got, v2) {
		t.Fatalf("Current = %+v, %v; want %+v", got, err, v2)
	}
	if got, err := s.View(ctx, 1); err != nil || !reflect.DeepEqual(got, v1) {
		t.Fatalf("View(1) = %+v, %v; want %+v", got, err, v1)
	}
	st, err := s.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Joins) != 1 || st.Joins[0].ID != 5 {
		t.Errorf("joins after view 2: %v, want only 5", st.Joins)
	}
	if len(st.Leaves) != 0 {
		t.Errorf("leaves after view 2: %v, want none", st.Leaves)
	}
}

// TestInstallRace has several stores, each with its own client, race to
// install every epoch with different views: exactly one wins each round,
// and the loser gets ErrConflict.
func TestInstallRace(t *testing.T) {
	eachBackend(t, testInstallRace)
}

func testInstallRace(t *testing.T, b *testBackend) {
	ctx := testCtx(t)
	const racers, rounds = 3, 40
	stores := make([]*Store, racers)
	for i := range stores {
		stores[i] = b.open(t, 0, "", i > 0)
	}
	cur := firstView(1, 2, 3, 4, 5)
	if err := stores[0].Bootstrap(ctx, cur); err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		proposals := make([]View, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			// Different cuts, and racer 1 drops member 5.
			ids := []ID{1, 2, 3, 4, 5}
			if i == 1 {
				ids = ids[:4]
			}
			if cur.Rank(5) < 0 {
				ids = ids[:4]
			}
			proposals[i] = nextView(cur, uint64(i+1), ids...)
			wg.Go(func() { errs[i] = stores[i].Install(ctx, proposals[i]) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: racers %d and %d both installed view %d", round, winner, i, cur.Epoch+1)
			case err == nil:
				winner = i
			case !errors.Is(err, ErrConflict):
				t.Fatalf("round %d: racer %d: %v, want ErrConflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody installed view %d", round, cur.Epoch+1)
		}
		got, err := stores[0].Current(ctx)
		if err != nil || !reflect.DeepEqual(got, proposals[winner]) {
			t.Fatalf("round %d: Current = %+v, %v; want the winner's %+v", round, got, err, proposals[winner])
		}
		cur = got
	}
}

func TestInstallMajority(t *testing.T) {
	eachBackend(t, testInstallMajority)
}

func testInstallMajority(t *testing.T, b *testBackend) {
	// View 1: members 1..5, of which 4 and 5 are joining.
	base := firstView(1, 2, 3, 4, 5)
	base.Joining = []ID{4, 5}
	stale := member(4)
	stale.Incarnation = 0
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		marks  []Member // caught-up marks for view 1
		next   []ID
		want   error
		before bool // mark only after a first, failing Install
	}{
		{"joiners do not count: 2 of 3", nil, []ID{1, 2, 4, 5}, nil, false},
		{"joiners do not count: 1 of 3", nil, []ID{1, 4, 5}, ErrNoMajority, false},
		{"caught up: 3 of 5", []Member{member(4), member(5)}, []ID{1, 4, 5}, nil, false},
		{"caught up: 2 of 5", []Member{member(4), member(5)}, []ID{1, 4}, ErrNoMajority, false},
		{"half is not a majority", []Member{member(4)}, []ID{1, 4}, ErrNoMajority, false},
		{"mark of another incarnation", []Member{stale}, []ID{1, 2, 3, 5}, nil, false},
		{"mark of another incarnation: 2 of 3", []Member{stale}, []ID{1, 2}, nil, false},
		{"mark of another incarnation: 1 of 3", []Member{stale}, []ID{1, 4}, ErrNoMajority, false},
		{"marked after a refusal", []Member{member(4), member(5)}, []ID{1, 4, 5}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := b.prefixStore(t)
			if err := s.Bootstrap(ctx, base); err != nil {
				t.Fatal(err)
			}
			v := nextView(base, 0, tc.next...)
			if tc.before {
				if err := s.Install(ctx, v); !errors.Is(err, ErrNoMajority) {
					t.Fatalf("Install before the marks: %v, want ErrNoMajority", err)
				}
			}
			for _, m := range tc.marks {
				if err := s.MarkCaughtUp(ctx, 1, m); err != nil {
					t.Fatal(err)
				}
			}
			checkErr(t, "Install", s.Install(ctx, v), tc.want)
		})
	}
}

// TestInstallMarksRace marks joiners caught up while a view that drops
// them is installed. View 1 has member 1 and joiners 2 and 3; the
// proposal keeps only 1 (and admits 4 and 5), which is a majority (1 of
// 1) only while neither joiner is caught up (1 of 2 is not). Install
// must decide on the marks present when it commits, never on older ones.
func TestInstallMarksRace(t *testing.T) {
	eachBackend(t, testInstallMarksRace)
}

func testInstallMarksRace(t *testing.T, b *testBackend) {
	ctx := testCtx(t)
	var won, refused int
	for round := range 30 {
		s := b.open(t, 0, fmt.Sprintf("/round%d/", round), false)
		v1 := firstView(1, 2, 3)
		v1.Joining = []ID{2, 3}
		if err := s.Bootstrap(ctx, v1); err != nil {
			t.Fatal(err)
		}
		v2 := nextView(v1, 0, 1, 4, 5)
		var wg sync.WaitGroup
		markErrs := make([]error, 2)
		for i, m := range v1.Members[1:] {
			wg.Go(func() {
				time.Sleep(rand.N(2 * time.Millisecond))
				markErrs[i] = s.MarkCaughtUp(ctx, 1, m)
			})
		}
		err := s.Install(ctx, v2)
		wg.Wait()
		if err := errors.Join(markErrs...); err != nil {
			t.Fatal(err)
		}
		resp, gerr := b.kv.Txn(ctx).Then(
			clientv3.OpGet(s.k.view()),
			clientv3.OpGet(s.k.caughtUps(), clientv3.WithPrefix()),
		).Commit()
		if gerr != nil {
			t.Fatal(gerr)
		}
		viewRev := resp.Responses[0].GetResponseRange().Kvs[0].ModRevision
		firstMark := int64(-1)
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if firstMark < 0 || kv.ModRevision < firstMark {
				firstMark = kv.ModRevision
			}
		}
		switch {
		case err == nil:
			won++
			if firstMark < viewRev {
				t.Fatalf("round %d: view 2 committed at revision %d, after a caught-up mark at %d", round, viewRev, firstMark)
			}
		case errors.Is(err, ErrNoMajority):
			refused++
		default:
			t.Fatalf("round %d: %v", round, err)
		}
	}
	t.Logf("%d installed, %d refused", won, refused)
}

func TestState(t *testing.T) {
	eachBackend(t, testState)
}

func testState(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)
	other := b.open(t, 0, "", true)

	v1 := firstView(1, 2, 3)
	if err := s.Bootstrap(ctx, v1); err != nil {
		t.Fatal(err)
	}
	r1 := Report{Epoch: 1, Member: member(1), Held: []uint64{3, 4, 5}, Delivered: 9}
	steps := []error{
		s.Register(ctx, member(1)),
		other.Register(ctx, member(2)),
		other.RequestJoin(ctx, member(7)),
		s.RequestJoin(ctx, member(6)),
		s.RequestLeave(ctx, member(3)),
		s.Suspect(ctx, 1, 1, 2, "no heartbeat"),
		s.Suspect(ctx, 1, 3, 2, strings.Repeat("x", 5000)),
		s.Suspect(ctx, 0, 1, 3, "old epoch"),
		s.Suspect(ctx, 2, 1, 3, "future epoch"),
		s.PutReport(ctx, r1),
		s.PutReport(ctx, Report{Epoch: 2, Member: member(2)}),
		s.MarkCaughtUp(ctx, 1, member(6)),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	st, err := s.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Current, v1) {
		t.Errorf("Current = %+v", st.Current)
	}
	if want := map[ID]Member{1: member(1), 2: member(2)}; !reflect.DeepEqual(st.Registered, want) {
		t.Errorf("Registered = %v, want %v", st.Registered, want)
	}
	if want := []Member{member(6), member(7)}; !reflect.DeepEqual(st.Joins, want) {
		t.Errorf("Joins = %v, want %v", st.Joins, want)
	}
	if want := map[ID]bool{3: true}; !reflect.DeepEqual(st.Leaves, want) {
		t.Errorf("Leaves = %v, want %v", st.Leaves, want)
	}
	if got := st.Suspects[2]; len(got) != 2 || got[1] != "no heartbeat" || len(got[3]) != maxReason {
		t.Errorf("Suspects[2] = %.80v", got)
	}
	if len(st.Suspects) != 1 {
		t.Errorf("Suspects = %v, want only 2 (epoch 1)", st.Suspects)
	}
	if want := map[ID]Report{1: r1}; !reflect.DeepEqual(st.Reports, want) {
		t.Errorf("Reports = %v, want %v", st.Reports, want)
	}
	if want := map[ID]bool{6: true}; !reflect.DeepEqual(st.CaughtUp, want) {
		t.Errorf("CaughtUp = %v, want %v", st.CaughtUp, want)
	}
	if st.Revision <= 0 {
		t.Errorf("Revision = %d", st.Revision)
	}

	// The other store's lease ends with it: its registration and join
	// request go.
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Register(ctx, member(2)); err == nil {
		t.Error("Register on a closed store succeeded")
	}
	st, err = s.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Registered[2]; ok || len(st.Registered) != 1 {
		t.Errorf("Registered after Close = %v, want only 1", st.Registered)
	}
	if want := []Member{member(6)}; !reflect.DeepEqual(st.Joins, want) {
		t.Errorf("Joins after Close = %v, want %v", st.Joins, want)
	}
}

// TestPutReportOrder writes one member's report several times, out of
// order and concurrently: the write with the highest Seq stands; a
// report of another incarnation, and an unnumbered one, replace any.
func TestPutReportOrder(t *testing.T) {
	eachBackend(t, testPutReportOrder)
}

func testPutReportOrder(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)
	if err := s.Bootstrap(ctx, firstView(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	rep := func(m Member, seq uint64, hears ...ID) Report {
		return Report{Epoch: 1, Member: m, Held: []uint64{1, 2, 3}, Delivered: 4, Hears: hears, Seq: seq}
	}
	stored := func() Report {
		t.Helper()
		st, err := s.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Reports[1]
	}
	m1 := member(1)
	for i, step := range []struct {
		put, want Report
	}{
		{put: rep(m1, 1, 1, 2, 3), want: rep(m1, 1, 1, 2, 3)},
		{put: rep(m1, 3, 1, 2), want: rep(m1, 3, 1, 2)},
		{put: rep(m1, 2, 1), want: rep(m1, 3, 1, 2)}, // landed late: ignored
		{put: rep(m1, 3, 1), want: rep(m1, 3, 1, 2)}, // the same number again
		{put: rep(Member{ID: 1, Incarnation: 2}, 1), want: rep(Member{ID: 1, Incarnation: 2}, 1)},
		{put: rep(Member{ID: 1, Incarnation: 2}, 0, 3), want: rep(Member{ID: 1, Incarnation: 2}, 0, 3)}, // unnumbered
	} {
		if err := s.PutReport(ctx, step.put); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := stored(); !reflect.DeepEqual(got, step.want) {
			t.Errorf("step %d: stored %+v, want %+v", i, got, step.want)
		}
	}

	// Concurrent writers, from two stores: the highest Seq stands. (A
	// write tries again only when another landed in between, at most
	// writers-1 times: fewer than PutReport's attempts.)
	other := b.open(t, 0, "", true)
	m2 := member(2)
	const writers = 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for seq := uint64(1); seq <= writers; seq++ {
		st := s
		if seq%2 == 0 {
			st = other
		}
		wg.Go(func() { errs <- st.PutReport(ctx, rep(m2, seq, ID(seq))) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Reports[2], rep(m2, writers, writers); !reflect.DeepEqual(got, want) {
		t.Errorf("after concurrent writes: stored %+v, want %+v", got, want)
	}
}

// TestStateConsistent reads State while views are installed and reports
// filed: every snapshot must hold only reports of its own current view,
// and a report for every member of the previous view once the view moved.
func TestStateConsistent(t *testing.T) {
	t.Parallel()
	eachBackend(t, testStateConsistent)
}

func testStateConsistent(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)
	cur := firstView(1, 2, 3)
	if err := s.Bootstrap(ctx, cur); err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	done := make(chan struct{})
	var readErr error
	go func() {
		defer close(done)
		var last int64
		for {
			st, err := s.State(ctx)
			if err != nil {
				readErr = err
				return
			}
			if st.Revision < last {
				readErr = fmt.Errorf("revision went back from %d to %d", last, st.Revision)
				return
			}
			last = st.Revision
			for id, r := range st.Reports {
				if r.Epoch != st.Current.Epoch || r.Member.ID != id {
					readErr = fmt.Errorf("view %d holds report %+v", st.Current.Epoch, r)
					return
				}
			}
			if st.Current.Epoch > rounds {
				return
			}
		}
	}()
	for range rounds {
		for _, m := range cur.Members {
			if err := s.PutReport(ctx, Report{Epoch: cur.Epoch, Member: m, Held: []uint64{0, 0, 0}}); err != nil {
				t.Fatal(err)
			}
		}
		v := nextView(cur, 1, 1, 2, 3)
		if err := s.Install(ctx, v); err != nil {
			t.Fatal(err)
		}
		cur = v
	}
	<-done
	if readErr != nil {
		t.Fatal(readErr)
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	t.Run("expires without keepalive", func(t *testing.T) {
		t.Parallel()
		_, cli := testEtcd(t)
		s := newTestStore(t, cli, time.Second)
		watcher := newTestStore(t, cli, 0)
		ctx := testCtx(t)
		if err := s.Register(ctx, member(1)); err != nil {
			t.Fatal(err)
		}
		kl := s.lease.(*keptLease)
		kl.stop()
		<-kl.kaDone
		for {
			st, err := watcher.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Registered) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("registration outlived its lease")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		t.Parallel()
		_, cli := testEtcd(t)
		s := newTestStore(t, cli, time.Second)
		ctx := testCtx(t)
		if _, err := cli.Revoke(ctx, s.lease.ID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Done():
		case <-ctx.Done():
			t.Fatal("Done not closed after the lease was revoked")
		}
		if s.Err() == nil || errors.Is(s.Err(), ErrStoreClosed) {
			t.Errorf("Err = %v, want a lost lease", s.Err())
		}
		if err := s.RequestJoin(ctx, member(1)); err == nil {
			t.Error("RequestJoin without a lease succeeded")
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close after the lease was lost: %v", err)
		}
	})
}

func TestWatch(t *testing.T) {
	_, cli := testEtcd(t)
	s := newTestStore(t, cli, 0)
	ctx := testCtx(t)
	wctx, stop := context.WithCancel(ctx)
	ch := s.Watch(wctx)
	next := func(what string, after int64) int64 {
		t.Helper()
		for {
			select {
			case c, ok := <-ch:
				if !ok {
					t.Fatalf("%s: watch channel closed", what)
				}
				if c.Revision > after {
					return c.Revision
				}
			case <-ctx.Done():
				t.Fatalf("%s: no change", what)
			}
		}
	}
	rev := next("first change", 0)
	v1 := firstView(1, 2)
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"bootstrap", func() error { return s.Bootstrap(ctx, v1) }},
		{"report", func() error { return s.PutReport(ctx, Report{Epoch: 1, Member: member(1)}) }},
		{"suspicion", func() error { return s.Suspect(ctx, 1, 1, 2, "quiet") }},
		{"view", func() error { return s.Install(ctx, nextView(v1, 0, 1, 2, 3)) }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		rev = next(step.what, rev)
	}

	// A burst coalesces, and the last change is not lost.
	var last int64
	for i := range 50 {
		resp, err := cli.Put(ctx, s.k.p+"burst", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	for rev < last {
		rev = next("burst", rev)
	}
	if rev != last {
		t.Errorf("burst: last change at revision %d, want %d", rev, last)
	}

	// Keys outside the prefix do not count.
	if _, err := cli.Put(ctx, "/elsewhere", "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		t.Errorf("change %+v for a key outside the prefix", c)
	case <-time.After(100 * time.Millisecond):
	}

	stop()
	for range ch {
	}
}

// TestWatchClientClosed checks that the watch channel closes when the
// client does.
func TestWatchClientClosed(t *testing.T) {
	srv, _ := testEtcd(t)
	ctx := testCtx(t)
	cli, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, cli, 0)
	ch := s.Watch(ctx)
	<-ch
	cli.Close()
	for range ch { // closes although ctx is still live
	}
}

func TestTrim(t *testing.T) {
	eachBackend(t, testTrim)
}

func testTrim(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)
	if err := s.Trim(ctx, 5); err != nil {
		t.Fatalf("Trim with no view: %v", err)
	}
	cur := firstView(1, 2)
	if err := s.Bootstrap(ctx, cur); err != nil {
		t.Fatal(err)
	}
	for range 4 { // views 1..5
		for _, m := range cur.Members {
			if err := s.PutReport(ctx, Report{Epoch: cur.Epoch, Member: m}); err != nil {
				t.Fatal(err)
			}
			if err := s.Suspect(ctx, cur.Epoch, m.ID, 3-m.ID, "x"); err != nil {
				t.Fatal(err)
			}
		}
		v := nextView(cur, 1, 1, 2)
		if err := s.Install(ctx, v); err != nil {
			t.Fatal(err)
		}
		cur = v
	}
	if err := s.Suspect(ctx, 5, 1, 2, "current"); err != nil {
		t.Fatal(err)
	}
	count := func(prefix string) int64 {
		resp, err := b.kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if err := s.Trim(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, e := range []uint64{1, 2} {
		if _, err := s.View(ctx, e); !errors.Is(err, ErrNoView) {
			t.Errorf("view %d after Trim(3): %v", e, err)
		}
	}
	if _, err := s.View(ctx, 3); err != nil {
		t.Errorf("view 3 after Trim(3): %v", err)
	}
	if n := count(s.k.reports()); n != 4 { // epochs 3 and 4
		t.Errorf("%d reports after Trim(3), want 4", n)
	}
	if err := s.Trim(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if got, err := s.View(ctx, 5); err != nil || got.Epoch != 5 {
		t.Errorf("current view after Trim(100): %v", err)
	}
	if n := count(s.k.views()); n != 1 {
		t.Errorf("%d views after Trim(100), want 1", n)
	}
	if n := count(s.k.suspects()); n != 1 {
		t.Errorf("%d suspicions after Trim(100), want the current one", n)
	}
	if n := count(s.k.reports()); n != 0 {
		t.Errorf("%d reports after Trim(100), want 0", n)
	}
}

// TestCorrupt puts garbage under each kind of key: reads fail with an
// error naming the key, and nothing panics; except that a registration,
// a join request or a restart claim that does not decode is refused
// (State.Refused, naming its key) and the rest of the state read.
func TestCorrupt(t *testing.T) {
	eachBackend(t, testCorrupt)
}

func testCorrupt(t *testing.T, b *testBackend) {
	ctx := testCtx(t)
	k := keys{} // keys relative to the prefix
	good := `{"epoch":1,"members":[{"id":1,"incarnation":1,"addr":"a"}],"sent":[0]}`
	for _, tc := range []struct {
		name, key, value string
		refused          bool
	}{
		{"view not JSON", k.view(), "\x00garbage", false},
		{"view epoch 0", k.view(), `{"epoch":0,"members":[{"id":1}],"sent":[0]}`, false},
		{"view without members", k.view(), `{"epoch":1,"sent":[]}`, false},
		{"view with a huge epoch", k.view(), `{"epoch":1e40}`, false},
		{"member not JSON", k.member(1), "{", true},
		{"member under another id", k.member(1), `{"id":2}`, true},
		{"member key not a number", k.members() + "x", `{"id":2}`, true},
		{"member key nested", k.members() + "1/2", `{"id":1}`, true},
		{"join not JSON", k.join(1), "[]", true},
		{"leave with a negative id", k.leave(1), `{"id":-1}`, false},
		{"report not JSON", k.report(1, 1), "nope", false},
		{"report for another epoch", k.report(1, 1), `{"epoch":2,"member":{"id":1}}`, false},
		{"suspicion with a bad key", k.suspectsAt(1) + "1", "reason", false},
		{"suspicion by a bad id", k.suspectsAt(1) + "1/-2", "reason", false},
		{"caught-up mark with a short epoch", k.caughtUps() + "1/1", `{"id":1}`, false},
		{"caught-up mark not JSON", k.caughtUp(1, 1), `{"id":`, false},
		{"restart claim not JSON", k.recovery(1, 1), `{`, true},
		{"restart claim for another epoch", k.recovery(1, 1), `{"epoch":2,"member":{"id":1}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := b.prefixStore(t)
			key := s.k.p + tc.key
			if tc.key != k.view() {
				if _, err := b.kv.Put(ctx, s.k.view(), good); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.kv.Put(ctx, key, tc.value); err != nil {
				t.Fatal(err)
			}
			st, err := s.State(ctx)
			if tc.refused {
				if err != nil {
					t.Fatalf("State: %v", err)
				}
				if len(st.Refused) != 1 || st.Refused[0].Key != key || !errors.Is(st.Refused[0].Err, ErrMalformedRecord) ||
					!strings.Contains(st.Refused[0].Err.Error(), key) {
					t.Errorf("Refused %v, want the record at %q, malformed, its error naming its key", st.Refused, key)
				}
				return
			}
			if err == nil {
				t.Fatal("State succeeded")
			}
			if !strings.Contains(err.Error(), key) {
				t.Errorf("error %q does not name key %q", err, key)
			}
		})
	}
	t.Run("view record", func(t *testing.T) {
		s := b.prefixStore(t)
		if _, err := b.kv.Put(ctx, s.k.viewAt(3), good); err != nil { // epoch 1 under 3
			t.Fatal(err)
		}
		if _, err := s.View(ctx, 3); err == nil {
			t.Error("View(3) returned view 1")
		}
		if _, err := b.kv.Put(ctx, s.k.view(), "]"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Current(ctx); err == nil || errors.Is(err, ErrNoView) {
			t.Errorf("Current: %v", err)
		}
		if err := s.Install(ctx, nextView(firstView(1), 0, 1)); err == nil {
			t.Error("Install over a corrupt view succeeded")
		}
	})
}

// TestSeparateProcess runs the store against etcd in another process,
// which crashes and comes back on the same directory and port: the store
// loses its lease, and the committed views survive.
func TestSeparateProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A port below the ephemeral range: one from it may be taken, while
	// etcd is down, by any connection of the test run, and etcd could not
	// come back on it.
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	p := startEtcdProcess(t, dir, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{p.endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Reconnect quickly once etcd is back.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() }) // after the stores' cleanups
	s := newTestStore(t, cli, time.Second)
	ctx := testCtx(t)
	start := time.Now()
	v1 := firstView(1, 2, 3)
	v2 := nextView(v1, 4, 1, 2)
	for _, err := range []error{
		s.Bootstrap(ctx, v1),
		s.Register(ctx, member(1)),
		s.Install(ctx, v2),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	p.kill()
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("store kept its lease with etcd down")
	}
	t.Logf("lease lost %v after the start", time.Since(start))
	u, err := url.Parse(p.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	startEtcdProcess(t, dir, u.Host)
	t.Logf("etcd back %v after the start", time.Since(start))

	// The old client reconnects; a new store works.
	s2 := newTestStore(t, cli, time.Second)
	if got, err := s2.Current(ctx); err != nil || !reflect.DeepEqual(got, v2) {
		t.Fatalf("Current after the crash = %+v, %v; want %+v", got, err, v2)
	}
	t.Logf("read back %v after the start", time.Since(start))
	if err := s2.Install(ctx, nextView(v2, 1, 1, 2)); err != nil {
		t.Fatal(err)
	}
}

// TestRecover: a recovered view commits only when no member of the
// current view lives on in its incarnation and a majority of its caught-up
// members claimed, and only as DecideRecovery proposes it on the store's
// state at commit time.
func TestRecover(t *testing.T) {
	eachBackend(t, testRecover)
}

func testRecover(t *testing.T, b *testBackend) {
	s := b.store(t)
	ctx := testCtx(t)
	v1 := firstView(1, 2, 3)
	if err := s.Bootstrap(ctx, v1); err != nil {
		t.Fatal(err)
	}
	fresh := func(id ID) Member { return Member{ID: id, Incarnation: 2, Addr: fmt.Sprintf("h%d:2", id)} }
	register := func(ms ...Member) {
		t.Helper()
		for _, m := range ms {
			if err := s.Register(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim := func(id ID, last uint64) {
		t.Helper()
		if err := s.PutRecovery(ctx, Recovery{Epoch: 1, Member: fresh(id), LogEpoch: 1, LogLast: last, InView: true}); err != nil {
			t.Fatal(err)
		}
	}
	propose := func() (*View, RecoveryDecision) {
		t.Helper()
		st, err := s.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecideRecovery(RecoveryInput{Current: st.Current, Registered: st.Registered, CaughtUp: st.CaughtUp, Recoveries: st.Recoveries})
		if err != nil {
			t.Fatal(err)
		}
		return d.Propose, d
	}

	// 1 restarted and claims; 2 and 3 live on: no restart.
	register(member(1), member(2), member(3), fresh(1))
	claim(1, 10)
	if p, d := propose(); p != nil || d.Needed {
		t.Fatalf("a majority lives on, yet a restart is proposed: %+v %+v", p, d)
	}
	forged := View{Epoch: 2, Recovered: true, Start: 10, Members: []Member{fresh(1)}, Cut: []SenderCut{{ID: 1}, {ID: 2}, {ID: 3}}, Sent: []uint64{0}}
	checkErr(t, "recover while a majority lives", s.Recover(ctx, forged), ErrConflict)

	// 2 restarts too: a restart is needed, but 3 lives on.
	register(fresh(2))
	claim(2, 12)
	if p, d := propose(); p != nil || !d.Needed || d.Dead {
		t.Fatalf("3 lives on: %+v %+v", p, d)
	}
	// 3 gives way: the restart goes on from 2's log.
	register(fresh(3))
	p, _ := propose()
	if p == nil || p.Start != 12 || !reflect.DeepEqual(p.Joining, []ID{1}) {
		t.Fatalf("proposal %+v, want start 12 with 1 joining", p)
	}
	// A claim arriving meanwhile makes the proposal stale.
	claim(3, 15)
	checkErr(t, "stale proposal", s.Recover(ctx, *p), ErrConflict)
	p, _ = propose()
	if p == nil || p.Start != 15 {
		t.Fatalf("proposal %+v, want start 15", p)
	}
	checkErr(t, "recover", s.Recover(ctx, *p), nil)
	if cur, err := s.Current(ctx); err != nil || !reflect.DeepEqual(cur, *p) {
		t.Fatalf("Current = %+v, %v; want %+v", cur, err, *p)
	}
	checkErr(t, "recover again", s.Recover(ctx, *p), ErrConflict)
	checkErr(t, "not a recovered view", s.Recover(ctx, nextView(*p, 0, 1, 2, 3)), errAny)

	// A restarted member asks to join with its log's position.
	pos := LogPos{Last: 15, Epoch: 1, Sender: 3, Seq: 4}
	if err := s.RequestJoinFrom(ctx, member(4), pos); err != nil {
		t.Fatal(err)
	}
	st, err := s.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Joins) != 1 || st.Joins[0] != member(4) || st.JoinLogs[4] != pos {
		t.Fatalf("join request: %v %v", st.Joins, st.JoinLogs)
	}
}

// A registration or join request that does not decode is refused, listed
// with its key and revision, and the rest of the state is read: one bad
// record under the prefix must not stop every member from reading the
// group's state. The outcome depends on the bytes only, so every member
// reads the same.
func TestStateSkipsMalformedRecords(t *testing.T) {
	k := keys{testPrefix}
	rec := func(key, value string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), ModRevision: 9}
	}
	good := func(key string, m Member) *mvccpb.KeyValue {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return rec(key, string(b))
	}
	for _, tc := range []struct {
		name string
		bad  *mvccpb.KeyValue
		kind RefusedKind
		id   ID // the ID the bad record's key names
	}{
		{"registration not JSON", rec(k.member(3), "{not json"), RefusedRegistration, 3},
		{"registration of a string", rec(k.member(3), `"3"`), RefusedRegistration, 3},
		{"registration of another member", rec(k.member(3), `{"id":4,"incarnation":1}`), RefusedRegistration, 3},
		{"registration with a bad field", rec(k.member(3), `{"id":3,"incarnation":"x"}`), RefusedRegistration, 3},
		{"registration under a bad key", rec(k.members()+"x", `{"id":3}`), RefusedRegistration, 0},
		{"registration under a nested key", rec(k.members()+"3/4", `{"id":3}`), RefusedRegistration, 0},
		{"empty registration", rec(k.member(3), ""), RefusedRegistration, 3},
		{"join request not JSON", rec(k.join(3), "\xff\x00"), RefusedJoinRequest, 3},
		{"join request of another member", rec(k.join(3), `{"id":5}`), RefusedJoinRequest, 3},
		{"join request under a bad key", rec(k.joins()+"-1", `{"id":3}`), RefusedJoinRequest, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			members := []*mvccpb.KeyValue{good(k.member(1), member(1))}
			joins := []*mvccpb.KeyValue{good(k.join(2), member(2))}
			if tc.kind == RefusedRegistration {
				members = append(members, tc.bad)
			} else {
				joins = append(joins, tc.bad)
			}
			var states []State
			for range 2 { // two members read the same records
				st, err := (&Store{k: k}).decodeState(1, View{}, members, joins, nil, nil, nil, nil)
				if err != nil {
					t.Fatalf("decodeState: %v", err)
				}
				states = append(states, st)
			}
			st := states[0]
			if want := map[ID]Member{1: member(1)}; !reflect.DeepEqual(st.Registered, want) {
				t.Errorf("Registered = %v, want %v", st.Registered, want)
			}
			if want := []Member{member(2)}; !reflect.DeepEqual(st.Joins, want) {
				t.Errorf("Joins = %v, want %v", st.Joins, want)
			}
			if len(st.Refused) != 1 {
				t.Fatalf("Refused = %v, want the bad record", st.Refused)
			}
			r := st.Refused[0]
			if r.Kind != tc.kind || r.Member != (Member{ID: tc.id}) || r.Key != string(tc.bad.Key) || r.Revision != 9 || !errors.Is(r.Err, ErrMalformedRecord) {
				t.Errorf("Refused[0] = %+v, want the %v at %q, naming member %d, for ErrMalformedRecord", r, tc.kind, tc.bad.Key, tc.id)
			}
			if a, b := fmt.Sprint(states[0]), fmt.Sprint(states[1]); a != b {
				t.Errorf("two reads of the same records differ:\n%s\n%s", a, b)
			}
		})
	}
}

// State reads past a malformed registration and join request in etcd.
func TestStateMalformedRegistration(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		s := b.store(t)
		ctx := testCtx(t)
		if err := s.Bootstrap(ctx, firstView(1, 2)); err != nil {
			t.Fatal(err)
		}
		if err := s.Register(ctx, member(1)); err != nil {
			t.Fatal(err)
		}
		k := keys{DefaultPrefix}
		if _, err := b.kv.Put(ctx, k.member(2), "not json"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.kv.Put(ctx, k.join(9), `{"id":8}`); err != nil {
			t.Fatal(err)
		}
		st, err := s.State(ctx)
		if err != nil {
			t.Fatalf("State with a malformed registration: %v", err)
		}
		if want := map[ID]Member{1: member(1)}; !reflect.DeepEqual(st.Registered, want) {
			t.Errorf("Registered = %v, want %v", st.Registered, want)
		}
		if len(st.Refused) != 2 || !errors.Is(st.Refused[0].Err, ErrMalformedRecord) || st.Refused[0].Member.ID != 2 ||
			!errors.Is(st.Refused[1].Err, ErrMalformedRecord) || st.Refused[1].Member.ID != 9 || st.Refused[0].Revision == 0 {
			t.Errorf("Refused = %+v, want member 2's registration and member 9's join request, malformed", st.Refused)
		}
	})
}
