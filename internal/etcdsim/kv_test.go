package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newKV returns a server and a clientv3.KV on it.
func newKV(t *testing.T) (*Server, clientv3.KV) {
	t.Helper()
	s := New(Config{})
	return s, clientv3.NewKVFromKVClient(s, nil)
}

// mustPut puts key=value and returns the revision of the put.
func mustPut(t *testing.T, kv clientv3.KV, key, value string, opts ...clientv3.OpOption) int64 {
	t.Helper()
	resp, err := kv.Put(context.Background(), key, value, opts...)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// kvString describes a key-value: key=value@create/mod/version, and
// +lease if it has one.
func kvString(kv *mvccpb.KeyValue) string {
	s := fmt.Sprintf("%s=%s@%d/%d/%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
	if kv.Lease != 0 {
		s += fmt.Sprintf("+%d", kv.Lease)
	}
	return s
}

func kvsString(kvs []*mvccpb.KeyValue) string {
	var out []string
	for _, kv := range kvs {
		out = append(out, kvString(kv))
	}
	return strings.Join(out, " ")
}

// do runs op and returns its response's revision.
func do(t *testing.T, kv clientv3.KV, op clientv3.Op) (clientv3.OpResponse, int64, error) {
	t.Helper()
	resp, err := kv.Do(context.Background(), op)
	if err != nil {
		return resp, 0, err
	}
	switch {
	case resp.Put() != nil:
		return resp, resp.Put().Header.Revision, nil
	case resp.Get() != nil:
		return resp, resp.Get().Header.Revision, nil
	case resp.Del() != nil:
		return resp, resp.Del().Header.Revision, nil
	case resp.Txn() != nil:
		return resp, resp.Txn().Header.Revision, nil
	}
	t.Fatalf("empty response to %+v", op)
	return resp, 0, nil
}

// all returns every key, described by kvsString.
func all(t *testing.T, kv clientv3.KV, opts ...clientv3.OpOption) string {
	t.Helper()
	resp, err := kv.Get(context.Background(), "\x00", append([]clientv3.OpOption{clientv3.WithFromKey()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return kvsString(resp.Kvs)
}

// TestRevisions runs writes one after the other and checks the revision
// each returns and what the store holds after it.
func TestRevisions(t *testing.T) {
	s, kv := newKV(t)
	if got := s.Revision(); got != 1 {
		t.Fatalf("empty store at revision %d, want 1", got)
	}
	put, del := clientv3.OpPut, clientv3.OpDelete
	txn := func(ops ...clientv3.Op) clientv3.Op { return clientv3.OpTxn(nil, ops, nil) }
	for _, step := range []struct {
		name string
		op   clientv3.Op
		rev  int64  // of the response, and of the store after it
		all  string // every key after the step
	}{
		{"create a", put("a", "1"), 2, "a=1@2/2/1"},
		{"update a", put("a", "2"), 3, "a=2@2/3/2"},
		{"create b", put("b", "1"), 4, "a=2@2/3/2 b=1@4/4/1"},
		{"delete a", del("a"), 5, "b=1@4/4/1"},
		{"delete nothing", del("zz"), 5, "b=1@4/4/1"},
		{"recreate a", put("a", "3"), 6, "a=3@6/6/1 b=1@4/4/1"},
		{"txn writes share a revision", txn(put("c", "1"), put("b", "2"), del("a")), 7, "b=2@4/7/2 c=1@7/7/1"},
		{"read-only txn", txn(clientv3.OpGet("b")), 7, "b=2@4/7/2 c=1@7/7/1"},
		{"txn deleting nothing", txn(del("zz")), 7, "b=2@4/7/2 c=1@7/7/1"},
		{"delete a range", del("a", clientv3.WithRange("c")), 8, "c=1@7/7/1"},
		{"put the same value", put("c", "1"), 9, "c=1@7/9/2"},
		{"get", clientv3.OpGet("c"), 9, "c=1@7/9/2"},
	} {
		_, rev, err := do(t, kv, step.op)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if rev != step.rev {
			t.Errorf("%s: revision %d, want %d", step.name, rev, step.rev)
		}
		if got := s.Revision(); got != step.rev {
			t.Errorf("%s: store at revision %d, want %d", step.name, got, step.rev)
		}
		if got := all(t, kv); got != step.all {
			t.Errorf("%s: store holds %q, want %q", step.name, got, step.all)
		}
	}
	// Past revisions read as they were.
	for _, tc := range []struct {
		rev  int64
		want string
	}{
		{1, ""},
		{2, "a=1@2/2/1"},
		{3, "a=2@2/3/2"},
		{5, "b=1@4/4/1"},
		{7, "b=2@4/7/2 c=1@7/7/1"},
		{9, "c=1@7/9/2"},
	} {
		if got := all(t, kv, clientv3.WithRev(tc.rev)); got != tc.want {
			t.Errorf("at revision %d: %q, want %q", tc.rev, got, tc.want)
		}
	}
	ctx := context.Background()
	if _, err := kv.Get(ctx, "a", clientv3.WithRev(10)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Errorf("read at a future revision: %v, want ErrFutureRev", err)
	}
}

// fill puts keys a, b/1, b/2, b/3 and c, in that order (revisions 2 to
// 6); b/2 is put twice more (revisions 7 and 8).
func fill(t *testing.T, kv clientv3.KV) {
	t.Helper()
	for _, k := range []string{"a", "b/1", "b/2", "b/3", "c", "b/2", "b/2"} {
		mustPut(t, kv, k, "v"+k)
	}
}

func TestRange(t *testing.T) {
	_, kv := newKV(t)
	fill(t, kv)
	for _, tc := range []struct {
		name  string
		key   string
		opts  []clientv3.OpOption
		want  string
		count int64
		more  bool
	}{
		{"one key", "a", nil, "a=va@2/2/1", 1, false},
		{"missing key", "b", nil, "", 0, false},
		{"prefix", "b/", []clientv3.OpOption{clientv3.WithPrefix()}, "b/1=vb/1@3/3/1 b/2=vb/2@4/8/3 b/3=vb/3@5/5/1", 3, false},
		{"range", "a", []clientv3.OpOption{clientv3.WithRange("b/2")}, "a=va@2/2/1 b/1=vb/1@3/3/1", 2, false},
		{"empty range", "c", []clientv3.OpOption{clientv3.WithRange("a")}, "", 0, false},
		{"from key", "b/3", []clientv3.OpOption{clientv3.WithFromKey()}, "b/3=vb/3@5/5/1 c=vc@6/6/1", 2, false},
		{"limit", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(2)}, "b/1=vb/1@3/3/1 b/2=vb/2@4/8/3", 3, true},
		{"limit not reached", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(3)}, "b/1=vb/1@3/3/1 b/2=vb/2@4/8/3 b/3=vb/3@5/5/1", 3, false},
		{"count only", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}, "", 3, false},
		{"keys only", "b/1", []clientv3.OpOption{clientv3.WithKeysOnly()}, "b/1=@3/3/1", 1, false},
		{"sort by mod, descending", "\x00", []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(2)},
			"b/2=vb/2@4/8/3 c=vc@6/6/1", 5, true},
		{"sort by key, descending", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)},
			"b/3=vb/3@5/5/1 b/2=vb/2@4/8/3 b/1=vb/1@3/3/1", 3, false},
		{"sort by version", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByVersion, clientv3.SortNone)},
			"b/1=vb/1@3/3/1 b/3=vb/3@5/5/1 b/2=vb/2@4/8/3", 3, false},
		{"sort by value, descending, with a limit", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend), clientv3.WithLimit(1)},
			"b/3=vb/3@5/5/1", 3, true},
		{"min mod revision: count unchanged", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMinModRev(5)}, "b/2=vb/2@4/8/3 b/3=vb/3@5/5/1", 3, false},
		{"max create revision", "\x00", []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithMaxCreateRev(3)}, "a=va@2/2/1 b/1=vb/1@3/3/1", 5, false},
		{"at a past revision", "b/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(4)}, "b/1=vb/1@3/3/1 b/2=vb/2@4/4/1", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := kv.Get(context.Background(), tc.key, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := kvsString(resp.Kvs); got != tc.want || resp.Count != tc.count || resp.More != tc.more {
				t.Errorf("got %q count %d more %v, want %q count %d more %v", got, resp.Count, resp.More, tc.want, tc.count, tc.more)
			}
			if resp.Header.Revision != 8 {
				t.Errorf("header revision %d, want 8", resp.Header.Revision)
			}
		})
	}
	if _, err := kv.Get(context.Background(), ""); !errors.Is(err, rpctypes.ErrEmptyKey) {
		t.Errorf("empty key: %v, want ErrEmptyKey", err)
	}
}

// TestRangeSortLimit: with a sort target but order NONE, etcd sorts
// ascending, but only among the first limit+1 keys.
func TestRangeSortLimit(t *testing.T) {
	_, kv := newKV(t)
	mustPut(t, kv, "z1", "3")
	mustPut(t, kv, "z2", "2")
	mustPut(t, kv, "z3", "1")
	for _, tc := range []struct {
		order clientv3.SortOrder
		want  string
	}{
		{clientv3.SortNone, "z2=2@3/3/1"},
		{clientv3.SortAscend, "z3=1@4/4/1"},
	} {
		resp, err := kv.Get(context.Background(), "z", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, tc.order), clientv3.WithLimit(1))
		if err != nil {
			t.Fatal(err)
		}
		if got := kvsString(resp.Kvs); got != tc.want || resp.Count != 3 || !resp.More {
			t.Errorf("order %v: %q count %d more %v, want %q count 3 more", tc.order, got, resp.Count, resp.More, tc.want)
		}
	}
}

func TestCompare(t *testing.T) {
	s, kv := newKV(t)
	fill(t, kv)
	id, _, err := s.Grant(10)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, kv, "l", "x", clientv3.WithLease(id)) // revision 9
	C := clientv3.Compare
	V, Ver, Cr, Mod, L := clientv3.Value, clientv3.Version, clientv3.CreateRevision, clientv3.ModRevision, clientv3.LeaseValue
	for _, tc := range []struct {
		name string
		cmp  clientv3.Cmp
		want bool
	}{
		{"value equal", C(V("a"), "=", "va"), true},
		{"value not equal", C(V("a"), "!=", "va"), false},
		{"value greater", C(V("a"), ">", "v"), true},
		{"value less", C(V("a"), "<", "vb"), true},
		{"value of a missing key", C(V("zz"), "!=", "x"), false},
		{"value of a missing key, empty", C(V("zz"), "=", ""), false},
		{"version", C(Ver("b/2"), "=", 3), true},
		{"version greater", C(Ver("b/2"), ">", 3), false},
		{"version of a missing key", C(Ver("zz"), "=", 0), true},
		{"create revision", C(Cr("b/2"), "=", 4), true},
		{"create revision of a missing key", C(Cr("zz"), "=", 0), true},
		{"create revision of a missing key, not 0", C(Cr("zz"), "!=", 0), false},
		{"mod revision less", C(Mod("b/2"), "<", 8), false},
		{"mod revision not equal", C(Mod("b/2"), "!=", 4), true},
		{"lease", C(L("l"), "=", id), true},
		{"no lease", C(L("a"), "=", 0), true},
		{"prefix: every mod revision below 9", C(Mod("b/"), "<", 9).WithPrefix(), true},
		{"prefix: one mod revision not below 8", C(Mod("b/"), "<", 8).WithPrefix(), false},
		{"prefix: every version above 0", C(Ver("b/"), ">", 0).WithPrefix(), true},
		{"prefix: values differ", C(V("b/"), "=", "vb/1").WithPrefix(), false},
		{"empty prefix compares as a missing key", C(Mod("q/"), "<", 1).WithPrefix(), true},
		{"empty prefix: value", C(V("q/"), "=", "").WithPrefix(), false},
		{"range", C(Cr("a"), "<", 4).WithRange("b/2"), true},
		{"range: not every key", C(Cr("a"), "<", 3).WithRange("b/2"), false},
		{"from key", C(Mod("b/3"), ">", 4).WithRange("\x00"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := kv.Txn(context.Background()).If(tc.cmp).Commit()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded != tc.want {
				t.Errorf("succeeded = %v, want %v", resp.Succeeded, tc.want)
			}
		})
	}
}

func TestTxn(t *testing.T) {
	ctx := context.Background()
	C, Mod := clientv3.Compare, clientv3.ModRevision
	get, put, del := clientv3.OpGet, clientv3.OpPut, clientv3.OpDelete
	for _, tc := range []struct {
		name      string
		txn       clientv3.Op
		err       error  // want
		succeeded bool   // want
		resps     string // want: each response described
		all       string // want: every key after
	}{
		{"then", clientv3.OpTxn([]clientv3.Cmp{C(Mod("a"), "=", 2)}, []clientv3.Op{put("a", "then")}, []clientv3.Op{put("a", "else")}),
			nil, true, "put@9", "a=then@2/9/2 b=vb@3/3/1"},
		{"else", clientv3.OpTxn([]clientv3.Cmp{C(Mod("a"), "=", 3)}, []clientv3.Op{put("a", "then")}, []clientv3.Op{put("a", "else")}),
			nil, false, "put@9", "a=else@2/9/2 b=vb@3/3/1"},
		{"every compare must hold", clientv3.OpTxn([]clientv3.Cmp{C(Mod("a"), "=", 2), C(Mod("b"), "=", 2)}, []clientv3.Op{put("a", "then")}, nil),
			nil, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"reads see the writes before them", clientv3.OpTxn(nil, []clientv3.Op{get("a"), put("a", "new"), get("a"), del("b"), get("b")}, nil),
			nil, true, "get@8[a=va@2/2/1] put@9 get@9[a=new@2/9/2] del@9(1) get@9[]", "a=new@2/9/2"},
		{"prev kv", clientv3.OpTxn(nil, []clientv3.Op{put("a", "new", clientv3.WithPrevKV()), del("b", clientv3.WithPrevKV())}, nil),
			nil, true, "put@9<a=va@2/2/1> del@9(1)<b=vb@3/3/1>", "a=new@2/9/2"},
		{"nested", clientv3.OpTxn(nil, []clientv3.Op{
			clientv3.OpTxn([]clientv3.Cmp{C(Mod("a"), "=", 99)}, []clientv3.Op{put("x", "no")}, []clientv3.Op{put("x", "yes")}),
			clientv3.OpTxn([]clientv3.Cmp{C(Mod("x"), "=", 0)}, []clientv3.Op{put("y", "x was absent")}, nil),
		}, nil),
			nil, true, "txn(false: put@9) txn(true: put@9)", "a=va@2/2/1 b=vb@3/3/1 x=yes@9/9/1 y=x was absent@9/9/1"},
		{"nested branches may put one key", clientv3.OpTxn(nil, []clientv3.Op{
			clientv3.OpTxn([]clientv3.Cmp{C(Mod("a"), "=", 2)}, []clientv3.Op{put("x", "then")}, []clientv3.Op{put("x", "else")}),
		}, nil),
			nil, true, "txn(true: put@9)", "a=va@2/2/1 b=vb@3/3/1 x=then@9/9/1"},
		{"put twice", clientv3.OpTxn(nil, []clientv3.Op{put("a", "1"), put("a", "2")}, nil),
			rpctypes.ErrDuplicateKey, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"put and delete", clientv3.OpTxn(nil, []clientv3.Op{del("a", clientv3.WithPrefix()), put("ab", "2")}, nil),
			rpctypes.ErrDuplicateKey, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"put in a nested txn and outside", clientv3.OpTxn(nil, []clientv3.Op{put("a", "1"), clientv3.OpTxn(nil, []clientv3.Op{put("a", "2")}, nil)}, nil),
			rpctypes.ErrDuplicateKey, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"overlapping deletes", clientv3.OpTxn(nil, []clientv3.Op{del("a", clientv3.WithFromKey()), del("b")}, nil),
			nil, true, "del@9(2) del@9(0)", ""},
		{"a lease that does not exist fails it all", clientv3.OpTxn(nil, []clientv3.Op{put("a", "1"), put("b", "1", clientv3.WithLease(42))}, nil),
			rpctypes.ErrLeaseNotFound, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"not on the branch taken", clientv3.OpTxn([]clientv3.Cmp{C(Mod("a"), "=", 2)}, []clientv3.Op{put("a", "1")}, []clientv3.Op{put("b", "1", clientv3.WithLease(42))}),
			nil, true, "put@9", "a=1@2/9/2 b=vb@3/3/1"},
		{"ignore value of a missing key", clientv3.OpTxn(nil, []clientv3.Op{put("zz", "", clientv3.WithIgnoreValue())}, nil),
			rpctypes.ErrKeyNotFound, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"future revision", clientv3.OpTxn(nil, []clientv3.Op{put("a", "1"), get("a", clientv3.WithRev(9))}, nil),
			rpctypes.ErrFutureRev, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"too many operations", clientv3.OpTxn(nil, manyPuts(129), nil),
			rpctypes.ErrTooManyOps, false, "", "a=va@2/2/1 b=vb@3/3/1"},
		{"as many operations as allowed", clientv3.OpTxn(nil, manyPuts(128)[:128], nil),
			nil, true, strings.TrimSpace(strings.Repeat("put@9 ", 128)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, kv := newKV(t)
			mustPut(t, kv, "a", "va")
			mustPut(t, kv, "b", "vb")
			for range 4 { // then a delete: revision 8
				mustPut(t, kv, "tmp", "x")
			}
			if _, err := kv.Delete(ctx, "tmp"); err != nil {
				t.Fatal(err)
			}
			resp, err := kv.Do(ctx, tc.txn)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err == nil {
				if got := resp.Txn().Succeeded; got != tc.succeeded {
					t.Errorf("succeeded = %v, want %v", got, tc.succeeded)
				}
				if got := respsString(resp.Txn().Responses); got != tc.resps {
					t.Errorf("responses %q, want %q", got, tc.resps)
				}
			}
			want := tc.all
			if tc.name == "as many operations as allowed" {
				want = "a=va@2/2/1 b=vb@3/3/1 " + kvsString(manyKVs(128, 9))
			}
			if got := all(t, kv); got != want {
				t.Errorf("store holds %q, want %q", got, want)
			}
		})
	}
}

// manyPuts returns n puts of keys k000, k001…
func manyPuts(n int) []clientv3.Op {
	var ops []clientv3.Op
	for i := range n {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("k%03d", i), "v"))
	}
	return ops
}

// manyKVs returns what manyPuts(n) creates at revision rev.
func manyKVs(n int, rev int64) []*mvccpb.KeyValue {
	var kvs []*mvccpb.KeyValue
	for i := range n {
		kvs = append(kvs, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%03d", i), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1})
	}
	return kvs
}

// respsString describes a transaction's responses: op@revision, with
// the keys read in [], the number deleted in (), previous key-values in
// <>, and nested transactions' responses in txn(succeeded: …).
func respsString(resps []*pb.ResponseOp) string {
	var out []string
	for _, r := range resps {
		switch {
		case r.GetResponseRange() != nil:
			g := r.GetResponseRange()
			out = append(out, fmt.Sprintf("get@%d[%s]", g.Header.Revision, kvsString(g.Kvs)))
		case r.GetResponsePut() != nil:
			p := r.GetResponsePut()
			s := fmt.Sprintf("put@%d", p.Header.Revision)
			if p.PrevKv != nil {
				s += "<" + kvString(p.PrevKv) + ">"
			}
			out = append(out, s)
		case r.GetResponseDeleteRange() != nil:
			d := r.GetResponseDeleteRange()
			s := fmt.Sprintf("del@%d(%d)", d.Header.Revision, d.Deleted)
			if len(d.PrevKvs) > 0 {
				s += "<" + kvsString(d.PrevKvs) + ">"
			}
			out = append(out, s)
		case r.GetResponseTxn() != nil:
			x := r.GetResponseTxn()
			out = append(out, fmt.Sprintf("txn(%v: %s)", x.Succeeded, respsString(x.Responses)))
		}
	}
	return strings.Join(out, " ")
}

func TestCompact(t *testing.T) {
	s, kv := newKV(t)
	ctx := context.Background()
	mustPut(t, kv, "a", "1")                       // 2
	mustPut(t, kv, "b", "1")                       // 3
	mustPut(t, kv, "a", "2")                       // 4
	if _, err := kv.Delete(ctx, "b"); err != nil { // 5
		t.Fatal(err)
	}
	mustPut(t, kv, "c", "1") // 6
	if _, err := kv.Compact(ctx, 7); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Errorf("compact at a future revision: %v", err)
	}
	resp, err := kv.Compact(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != 6 || s.Revision() != 6 {
		t.Errorf("compaction at revision %d, store at %d, want 6", resp.Header.Revision, s.Revision())
	}
	for _, tc := range []struct {
		rev  int64
		want string
		err  error
	}{
		{3, "", rpctypes.ErrCompacted},
		{4, "a=2@2/4/2 b=1@3/3/1", nil},
		{5, "a=2@2/4/2", nil},
		{0, "a=2@2/4/2 c=1@6/6/1", nil},
	} {
		resp, err := kv.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(tc.rev))
		if !errors.Is(err, tc.err) {
			t.Errorf("at %d: %v, want %v", tc.rev, err, tc.err)
			continue
		}
		if err == nil && kvsString(resp.Kvs) != tc.want {
			t.Errorf("at %d: %q, want %q", tc.rev, kvsString(resp.Kvs), tc.want)
		}
	}
	if _, err := kv.Compact(ctx, 4); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("compact again: %v", err)
	}
	if _, err := kv.Compact(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if got := all(t, kv); got != "a=2@2/4/2 c=1@6/6/1" {
		t.Errorf("after compacting everything: %q", got)
	}
}

func TestChangedSince(t *testing.T) {
	s, kv := newKV(t)
	ctx := context.Background()
	mustPut(t, kv, "p/a", "1")                       // 2
	mustPut(t, kv, "q", "1")                         // 3
	if _, err := kv.Delete(ctx, "p/a"); err != nil { // 4
		t.Fatal(err)
	}
	mustPut(t, kv, "q", "2")   // 5
	mustPut(t, kv, "p/b", "1") // 6
	for _, tc := range []struct {
		prefix string
		rev    int64
		want   bool
	}{
		{"p/", 1, true},
		{"p/", 3, true},  // the deletion at 4
		{"p/", 4, true},  // p/b at 6
		{"p/", 6, false}, // nothing after
		{"q", 3, true},
		{"q", 5, false},
		{"r", 0, false},
		{"", 5, true},
	} {
		if got := s.ChangedSince(tc.prefix, tc.rev); got != tc.want {
			t.Errorf("ChangedSince(%q, %d) = %v, want %v", tc.prefix, tc.rev, got, tc.want)
		}
	}
	if _, err := kv.Compact(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if !s.ChangedSince("r", 4) {
		t.Error("ChangedSince below the compaction = false")
	}
	if s.ChangedSince("p/", 6) {
		t.Error("ChangedSince(p/, 6) after a compaction = true")
	}
}

// TestObserver reads keys and ranges through an observer, also while
// the server is down, when a client's Get fails, and leaves the
// revision where it was; it refuses writes.
func TestObserver(t *testing.T) {
	ctx := context.Background()
	s, kv := newKV(t)
	mustPut(t, kv, "p/a", "1")
	mustPut(t, kv, "p/b", "2")
	rev := mustPut(t, kv, "q", "3")
	s.Down()
	if _, err := kv.Get(ctx, "q"); err == nil {
		t.Fatal("Get while down succeeded")
	}
	obs := clientv3.NewKVFromKVClient(s.Observer(), nil)
	keys := func(kvs []*mvccpb.KeyValue) string {
		var out []string
		for _, kv := range kvs {
			out = append(out, string(kv.Key)+"="+string(kv.Value))
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		key  string
		opts []clientv3.OpOption
		want string
	}{
		{"q", nil, "q=3"},
		{"r", nil, ""},
		{"p/", []clientv3.OpOption{clientv3.WithPrefix()}, "p/a=1 p/b=2"},
		{"p/b", []clientv3.OpOption{clientv3.WithRange("q")}, "p/b=2"},
		{"p/c", []clientv3.OpOption{clientv3.WithRange("q")}, ""},
	} {
		resp, err := obs.Get(ctx, tc.key, tc.opts...)
		if err != nil {
			t.Fatalf("observer Get(%q): %v", tc.key, err)
		}
		if g := keys(resp.Kvs); g != tc.want || resp.Header.Revision != rev {
			t.Errorf("observer Get(%q) = %q at %d, want %q at %d", tc.key, g, resp.Header.Revision, tc.want, rev)
		}
	}
	for _, tc := range []struct {
		cmp  clientv3.Cmp
		want string
	}{
		{clientv3.Compare(clientv3.ModRevision("q"), "=", rev), "p/a=1 p/b=2"},
		{clientv3.Compare(clientv3.ModRevision("q"), "<", rev), "q=3"},
	} {
		resp, err := obs.Txn(ctx).If(tc.cmp).
			Then(clientv3.OpGet("p/", clientv3.WithPrefix())).
			Else(clientv3.OpGet("q")).Commit()
		if err != nil {
			t.Fatalf("observer Txn: %v", err)
		}
		if g := keys(resp.Responses[0].GetResponseRange().Kvs); g != tc.want || resp.Header.Revision != rev {
			t.Errorf("observer Txn = %q at %d, want %q at %d", g, resp.Header.Revision, tc.want, rev)
		}
	}
	for name, write := range map[string]func() error{
		"Put":    func() error { _, err := obs.Put(ctx, "q", "4"); return err },
		"Delete": func() error { _, err := obs.Delete(ctx, "q"); return err },
		"Txn put": func() error {
			_, err := obs.Txn(ctx).Then(clientv3.OpGet("q"), clientv3.OpPut("q", "4")).Commit()
			return err
		},
		"nested Txn put": func() error {
			_, err := obs.Txn(ctx).Else(clientv3.OpTxn(nil, nil, []clientv3.Op{clientv3.OpPut("q", "4")})).Commit()
			return err
		},
		"Compact": func() error { _, err := obs.Compact(ctx, rev); return err },
	} {
		if err := write(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("observer %s: %v, want PermissionDenied", name, err)
		}
	}
	s.Up()
	if resp, err := kv.Get(ctx, "q"); err != nil || keys(resp.Kvs) != "q=3" || resp.Header.Revision != rev {
		t.Errorf("Get after the observer's writes: %v, %v; want q=3 at %d", resp, err, rev)
	}
}

func TestContext(t *testing.T) {
	_, kv := newKV(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := kv.Put(ctx, "a", "1"); !errors.Is(err, context.Canceled) {
		t.Errorf("put with a canceled context: %v", err)
	}
	if got := all(t, kv); got != "" {
		t.Errorf("store holds %q", got)
	}
}
