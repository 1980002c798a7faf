package etcdsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/convoy-gcs/convoy/etcddev"
)

// TestAgainstEtcd runs the same random operations on a Server and on a
// real etcd, and requires the same responses and errors from both, down
// to revisions and versions. Lease IDs differ between the two and are
// mapped; response headers are compared on their revision only.
func TestAgainstEtcd(t *testing.T) {
	// No deadline of its own: a real etcd syncs every write, which a
	// loaded machine slows many times over; the test binary's timeout
	// catches a hang.
	ctx := t.Context()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			srv, err := etcddev.Start(ctx, etcddev.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := srv.Close(); err != nil {
					t.Error(err)
				}
			}()
			cli, err := srv.Client(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sim := New(Config{})
			b := [2]backend{{kv: cli}, {kv: clientv3.NewKVFromKVClient(sim, nil)}}
			for range 2 {
				g, err := cli.Grant(ctx, 1000)
				if err != nil {
					t.Fatal(err)
				}
				id, _, err := sim.Grant(1000)
				if err != nil {
					t.Fatal(err)
				}
				b[0].leases = append(b[0].leases, g.ID)
				b[1].leases = append(b[1].leases, id)
			}
			b[0].revoke = func(id clientv3.LeaseID) error { _, err := cli.Revoke(ctx, id); return err }
			b[1].revoke = sim.Revoke
			// A lease granted by neither.
			b[0].leases = append(b[0].leases, 0x7fff_0000)
			b[1].leases = append(b[1].leases, 0x7fff_0000)

			g := &opGen{rng: rand.New(rand.NewPCG(seed, 1))}
			for i := range 1000 {
				if g.rng.IntN(100) == 0 {
					l := g.rng.IntN(2)
					err0, err1 := b[0].revoke(b[0].leases[l]), b[1].revoke(b[1].leases[l])
					if fmt.Sprint(err0) != fmt.Sprint(err1) {
						t.Fatalf("op %d: revoke lease %d: etcd says %v, sim %v", i, l, err0, err1)
					}
					continue
				}
				if g.rng.IntN(100) == 0 {
					rev := g.rng.Int64N(g.rev + 2)
					_, err0 := b[0].kv.Compact(ctx, rev)
					_, err1 := b[1].kv.Compact(ctx, rev)
					if fmt.Sprint(err0) != fmt.Sprint(err1) {
						t.Fatalf("op %d: compact at %d: etcd says %v, sim %v", i, rev, err0, err1)
					}
					continue
				}
				op := g.op()
				var resp [2]proto.Message
				var errs [2]error
				for j := range b {
					resp[j], errs[j] = b[j].run(ctx, op)
				}
				if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) || !proto.Equal(resp[0], resp[1]) {
					t.Fatalf("op %d: %s\netcd: %v %v\nsim:  %v %v", i, g.describe(op), resp[0], errs[0], resp[1], errs[1])
				}
			}
		})
	}
}

// backend is one side of the comparison.
type backend struct {
	kv     clientv3.KV
	leases []clientv3.LeaseID // by index, the same on both sides
	revoke func(clientv3.LeaseID) error
}

// run runs op, with lease indexes made this backend's IDs, and returns
// the response with lease IDs made indexes again.
func (b *backend) run(ctx context.Context, op genOp) (proto.Message, error) {
	resp, err := b.kv.Do(ctx, op(b.leases))
	if err != nil {
		return nil, err
	}
	var m proto.Message
	switch {
	case resp.Put() != nil:
		m = (*pb.PutResponse)(resp.Put())
	case resp.Get() != nil:
		m = (*pb.RangeResponse)(resp.Get())
	case resp.Del() != nil:
		m = (*pb.DeleteRangeResponse)(resp.Del())
	case resp.Txn() != nil:
		m = (*pb.TxnResponse)(resp.Txn())
	}
	normalize(m, b.leases)
	return m, nil
}

// normalize clears what differs between two etcd servers: the cluster
// and member IDs and the term in headers, and lease IDs (made indexes
// into leases).
func normalize(m proto.Message, leases []clientv3.LeaseID) {
	switch m := m.(type) {
	case *pb.ResponseHeader:
		if m != nil {
			m.ClusterId, m.MemberId, m.RaftTerm = 0, 0, 0
		}
	case *mvccpb.KeyValue:
		if m != nil {
			for i, id := range leases {
				if m.Lease == int64(id) {
					m.Lease = int64(i + 1)
				}
			}
		}
	case *pb.PutResponse:
		normalize(m.Header, leases)
		normalize(m.PrevKv, leases)
	case *pb.RangeResponse:
		normalize(m.Header, leases)
		for _, kv := range m.Kvs {
			normalize(kv, leases)
		}
	case *pb.DeleteRangeResponse:
		normalize(m.Header, leases)
		for _, kv := range m.PrevKvs {
			normalize(kv, leases)
		}
	case *pb.TxnResponse:
		normalize(m.Header, leases)
		for _, r := range m.Responses {
			switch {
			case r.GetResponsePut() != nil:
				normalize(r.GetResponsePut(), leases)
			case r.GetResponseRange() != nil:
				normalize(r.GetResponseRange(), leases)
			case r.GetResponseDeleteRange() != nil:
				normalize(r.GetResponseDeleteRange(), leases)
			case r.GetResponseTxn() != nil:
				normalize(r.GetResponseTxn(), leases)
			}
		}
	}
}

// genOp builds an operation given the lease IDs of a backend.
type genOp func(leases []clientv3.LeaseID) clientv3.Op

// opGen draws random operations over a handful of keys, so that they
// collide often.
type opGen struct {
	rng *rand.Rand
	rev int64 // an upper bound of the revision, for reads in the past
}

var genKeys = []string{"a", "b", "b/1", "b/2", "b/3", "c", "c/x"}

func (g *opGen) key() string { return genKeys[g.rng.IntN(len(genKeys))] }

func (g *opGen) op() genOp {
	switch n := g.rng.IntN(10); {
	case n < 3:
		return g.put()
	case n < 4:
		return g.del()
	case n < 7:
		return g.get()
	default:
		return g.txn(true)
	}
}

func (g *opGen) put() genOp {
	key, val := g.key(), fmt.Sprint(g.rng.IntN(4))
	lease := g.rng.IntN(5) - 2 // <0: none, else an index
	prev := g.rng.IntN(2) == 0
	g.rev++
	return func(leases []clientv3.LeaseID) clientv3.Op {
		var opts []clientv3.OpOption
		if lease >= 0 {
			opts = append(opts, clientv3.WithLease(leases[lease]))
		}
		if prev {
			opts = append(opts, clientv3.WithPrevKV())
		}
		return clientv3.OpPut(key, val, opts...)
	}
}

// rangeOpts draws how a key names a range: itself, a prefix, a range or
// every key from it.
func (g *opGen) rangeOpts() []clientv3.OpOption {
	switch g.rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return []clientv3.OpOption{clientv3.WithPrefix()}
	case 2:
		return []clientv3.OpOption{clientv3.WithRange(g.key())}
	default:
		return []clientv3.OpOption{clientv3.WithFromKey()}
	}
}

func (g *opGen) del() genOp {
	key, opts := g.key(), g.rangeOpts()
	if g.rng.IntN(2) == 0 {
		opts = append(opts, clientv3.WithPrevKV())
	}
	g.rev++
	return func([]clientv3.LeaseID) clientv3.Op { return clientv3.OpDelete(key, opts...) }
}

func (g *opGen) get() genOp {
	key, opts := g.key(), g.rangeOpts()
	for _, extra := range []func() clientv3.OpOption{
		func() clientv3.OpOption { return clientv3.WithLimit(int64(g.rng.IntN(3))) },
		func() clientv3.OpOption {
			targets := []clientv3.SortTarget{clientv3.SortByKey, clientv3.SortByVersion, clientv3.SortByCreateRevision, clientv3.SortByModRevision, clientv3.SortByValue}
			orders := []clientv3.SortOrder{clientv3.SortNone, clientv3.SortAscend, clientv3.SortDescend}
			return clientv3.WithSort(targets[g.rng.IntN(len(targets))], orders[g.rng.IntN(len(orders))])
		},
		clientv3.WithCountOnly,
		clientv3.WithKeysOnly,
		func() clientv3.OpOption { return clientv3.WithRev(g.rng.Int64N(g.rev + 3)) },
		func() clientv3.OpOption { return clientv3.WithMinModRev(g.rng.Int64N(g.rev + 2)) },
		func() clientv3.OpOption { return clientv3.WithMaxCreateRev(g.rng.Int64N(g.rev + 2)) },
	} {
		if g.rng.IntN(4) == 0 {
			opts = append(opts, extra())
		}
	}
	return func([]clientv3.LeaseID) clientv3.Op { return clientv3.OpGet(key, opts...) }
}

func (g *opGen) cmp() func([]clientv3.LeaseID) clientv3.Cmp {
	key := g.key()
	results := []string{"=", "!=", "<", ">"}
	result := results[g.rng.IntN(len(results))]
	prefix := g.rng.IntN(3) == 0
	target := g.rng.IntN(5)
	n := g.rng.Int64N(g.rev + 3)
	val := fmt.Sprint(g.rng.IntN(4))
	lease := g.rng.IntN(3)
	return func(leases []clientv3.LeaseID) clientv3.Cmp {
		var c clientv3.Cmp
		switch target {
		case 0:
			c = clientv3.Compare(clientv3.Value(key), result, val)
		case 1:
			c = clientv3.Compare(clientv3.Version(key), result, n%4)
		case 2:
			c = clientv3.Compare(clientv3.CreateRevision(key), result, n)
		case 3:
			c = clientv3.Compare(clientv3.ModRevision(key), result, n)
		default:
			// Lease IDs differ between the two, so only equality
			// compares the same way on both.
			c = clientv3.Compare(clientv3.LeaseValue(key), results[n%2], leases[lease])
		}
		if prefix {
			c = c.WithPrefix()
		}
		return c
	}
}

func (g *opGen) txn(nest bool) genOp {
	cmps := make([]func([]clientv3.LeaseID) clientv3.Cmp, g.rng.IntN(3))
	for i := range cmps {
		cmps[i] = g.cmp()
	}
	branch := func() []genOp {
		ops := make([]genOp, g.rng.IntN(4))
		for i := range ops {
			switch n := g.rng.IntN(10); {
			case n < 4:
				ops[i] = g.put()
			case n < 5:
				ops[i] = g.del()
			case n < 8 || !nest:
				ops[i] = g.get()
			default:
				ops[i] = g.txn(false)
			}
		}
		return ops
	}
	then, els := branch(), branch()
	return func(leases []clientv3.LeaseID) clientv3.Op {
		var cs []clientv3.Cmp
		for _, c := range cmps {
			cs = append(cs, c(leases))
		}
		build := func(gs []genOp) []clientv3.Op {
			var ops []clientv3.Op
			for _, o := range gs {
				ops = append(ops, o(leases))
			}
			return ops
		}
		return clientv3.OpTxn(cs, build(then), build(els))
	}
}

// describe prints op as a request, for a failure message.
func (g *opGen) describe(op genOp) string {
	return describeOp(op([]clientv3.LeaseID{1, 2, 3}))
}

func describeOp(o clientv3.Op) string {
	switch {
	case o.IsTxn():
		cmps, then, els := o.Txn()
		var b strings.Builder
		fmt.Fprint(&b, "txn if")
		for _, c := range cmps {
			fmt.Fprintf(&b, " %v", c.GetCompare())
		}
		for _, branch := range []struct {
			name string
			ops  []clientv3.Op
		}{{"then", then}, {"else", els}} {
			fmt.Fprintf(&b, " %s {", branch.name)
			for _, o := range branch.ops {
				fmt.Fprintf(&b, " %s;", describeOp(o))
			}
			fmt.Fprint(&b, " }")
		}
		return b.String()
	case o.IsGet():
		return fmt.Sprintf("get [%q, %q) rev %d", o.KeyBytes(), o.RangeBytes(), o.Rev())
	case o.IsPut():
		return fmt.Sprintf("put %q=%q", o.KeyBytes(), o.ValueBytes())
	default:
		return fmt.Sprintf("delete [%q, %q)", o.KeyBytes(), o.RangeBytes())
	}
}
