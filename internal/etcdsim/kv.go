package etcdsim

import (
	"bytes"
	"cmp"
	"context"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The KV methods follow etcd's server (etcdserver/api/v3rpc/key.go for
// the checks of a request, etcdserver/txn for its execution), and return
// the gRPC status errors etcd's server sends, which a clientv3.KV turns
// into the rpctypes errors its callers compare with. Call options are
// ignored.

// Range reads the keys in [r.Key, r.RangeEnd) at r.Revision (0: now),
// with etcd's limit, sorting, revision filters, keys-only and count-only.
func (s *Server) Range(ctx context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	return s.checkedRangeLocked(r)
}

// checkedRangeLocked checks and runs a Range. REQUIRES: s.mu.
func (s *Server) checkedRangeLocked(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	if err := s.checkRevLocked(r.Revision); err != nil {
		return nil, err
	}
	resp := s.rangeLocked(r)
	resp.Header.RaftTerm = s.mu.term
	return resp, nil
}

// RangeStream is not simulated: it fails with codes.Unimplemented.
func (s *Server) RangeStream(context.Context, *pb.RangeRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	return nil, errRangeStream
}

var errRangeStream = status.Error(codes.Unimplemented, "etcdsim: RangeStream is not simulated")

// Put writes r.Key in a revision of its own. A lease that does not exist
// fails with rpctypes.ErrGRPCLeaseNotFound.
func (s *Server) Put(ctx context.Context, r *pb.PutRequest, _ ...grpc.CallOption) (*pb.PutResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	if err := checkPut(r); err != nil {
		return nil, err
	}
	if err := s.checkPutLocked(r); err != nil {
		return nil, err
	}
	resp := s.putLocked(r)
	s.mu.kv.endWrite()
	resp.Header.RaftTerm = s.mu.term
	return resp, nil
}

// DeleteRange deletes the keys in [r.Key, r.RangeEnd), in one revision
// if there are any.
func (s *Server) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest, _ ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	if len(r.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	resp := s.deleteLocked(r)
	s.mu.kv.endWrite()
	resp.Header.RaftTerm = s.mu.term
	return resp, nil
}

// Txn runs a transaction: every compare, nested transactions' included,
// is evaluated on the state before it, and the operations of the chosen
// branches run in order, each seeing the writes of the ones before. All
// its writes share one revision.
func (s *Server) Txn(ctx context.Context, r *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	return s.checkedTxnLocked(r)
}

// checkedTxnLocked checks and runs a Txn. REQUIRES: s.mu.
func (s *Server) checkedTxnLocked(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, s.cfg.MaxTxnOps); err != nil {
		return nil, err
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		if _, _, err := checkIntervals(ops); err != nil {
			return nil, err
		}
	}
	path := s.comparePathLocked(r)
	if _, err := s.checkPathLocked(r, path); err != nil {
		return nil, err
	}
	resp := &pb.TxnResponse{}
	s.runTxnLocked(r, path, resp)
	s.mu.kv.endWrite()
	resp.Header = s.headerLocked(s.mu.kv.rev)
	return resp, nil
}

// Compact forgets the history below r.Revision. It does not change the
// revision.
func (s *Server) Compact(ctx context.Context, r *pb.CompactionRequest, _ ...grpc.CallOption) (*pb.CompactionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enterLocked(ctx); err != nil {
		return nil, err
	}
	kv := s.mu.kv
	switch {
	case r.Revision <= kv.compacted:
		return nil, rpctypes.ErrGRPCCompacted
	case r.Revision > kv.rev:
		return nil, rpctypes.ErrGRPCFutureRev
	}
	kv.compact(r.Revision)
	return &pb.CompactionResponse{Header: s.headerLocked(kv.rev)}, nil
}

// checkRevLocked checks a Range's revision against the store, as etcd
// does before it reads (a transaction's ranges against the state before
// it). REQUIRES: s.mu.
func (s *Server) checkRevLocked(rev int64) error {
	switch kv := s.mu.kv; {
	case rev == 0:
		return nil
	case rev > kv.rev:
		return rpctypes.ErrGRPCFutureRev
	case rev < kv.compacted:
		return rpctypes.ErrGRPCCompacted
	}
	return nil
}

// rangeLocked runs a checked Range at the revision reads see now.
// REQUIRES: s.mu.
func (s *Server) rangeLocked(r *pb.RangeRequest) *pb.RangeResponse {
	kv := s.mu.kv
	now := kv.readRev()
	rev := r.Revision
	if rev <= 0 {
		rev = now
	}
	kvs := kv.rangeKVs(r.Key, r.RangeEnd, rev)
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: now}, Count: int64(len(kvs))}
	if r.CountOnly {
		return resp
	}
	if r.Limit > 0 && r.Limit < int64(len(kvs)) && isDefaultOrder(r.SortTarget, r.SortOrder) && !hasRevisionFilters(r) {
		// etcd reads only the first Limit+1 keys when it need not sort
		// or filter, judging by the sort order asked for: a sort target
		// other than the key with order NONE is then sorted ascending,
		// but only among those keys.
		kvs = kvs[:r.Limit+1]
	}
	kvs = filterKVs(kvs, r)
	sortKVs(kvs, r)
	if r.Limit > 0 && len(kvs) > int(r.Limit) {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	if r.KeysOnly {
		// Unless it sorts by value, etcd answers a keys-only range from
		// its index, which holds no lease either.
		fromIndex := r.SortTarget != pb.RangeRequest_VALUE
		for _, kv := range kvs {
			kv.Value = nil
			if fromIndex {
				kv.Lease = 0
			}
		}
	}
	resp.Kvs = kvs
	return resp
}

func isDefaultOrder(target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) bool {
	return order == pb.RangeRequest_NONE || (target == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND)
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

// filterKVs applies a Range's revision filters. As in etcd, they do not
// change the count.
func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	keep := func(kv *mvccpb.KeyValue) bool {
		return (r.MaxModRevision == 0 || kv.ModRevision <= r.MaxModRevision) &&
			(r.MinModRevision == 0 || kv.ModRevision >= r.MinModRevision) &&
			(r.MaxCreateRevision == 0 || kv.CreateRevision <= r.MaxCreateRevision) &&
			(r.MinCreateRevision == 0 || kv.CreateRevision >= r.MinCreateRevision)
	}
	out := kvs[:0]
	for _, kv := range kvs {
		if keep(kv) {
			out = append(out, kv)
		}
	}
	return out
}

// sortKVs sorts as etcd does (with sort.Sort, so that even the order of
// equal elements is etcd's). kvs comes sorted by key.
func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if isDefaultOrder(r.SortTarget, order) {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	case pb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	}
	var sorter sort.Interface = kvSorter{kvs, less}
	if order == pb.RangeRequest_DESCEND {
		sorter = sort.Reverse(sorter)
	}
	sort.Sort(sorter)
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (k kvSorter) Len() int           { return len(k.kvs) }
func (k kvSorter) Less(i, j int) bool { return k.less(k.kvs[i], k.kvs[j]) }
func (k kvSorter) Swap(i, j int)      { k.kvs[i], k.kvs[j] = k.kvs[j], k.kvs[i] }

// checkPutLocked checks what a put needs of the store: its lease, and a
// previous value if it keeps the value or the lease. REQUIRES: s.mu.
func (s *Server) checkPutLocked(r *pb.PutRequest) error {
	if r.Lease != 0 {
		if _, ok := s.mu.leases[r.Lease]; !ok {
			return rpctypes.ErrGRPCLeaseNotFound
		}
	}
	if r.IgnoreValue || r.IgnoreLease {
		if _, ok := s.mu.kv.at(string(r.Key), s.mu.kv.readRev()); !ok {
			return rpctypes.ErrGRPCKeyNotFound
		}
	}
	return nil
}

// putLocked runs a checked put in the running write. REQUIRES: s.mu.
func (s *Server) putLocked(r *pb.PutRequest) *pb.PutResponse {
	kv := s.mu.kv
	key := string(r.Key)
	resp := &pb.PutResponse{}
	value, lease := r.Value, r.Lease
	if prev, ok := kv.at(key, kv.readRev()); ok {
		if r.IgnoreValue {
			value = prev.value
		}
		if r.IgnoreLease {
			lease = prev.lease
		}
		if r.PrevKv {
			resp.PrevKv = prev.kv(key)
		}
	}
	kv.put(key, value, lease)
	resp.Header = &pb.ResponseHeader{Revision: kv.readRev()}
	return resp
}

// deleteLocked runs a checked delete in the running write. REQUIRES:
// s.mu.
func (s *Server) deleteLocked(r *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	kv := s.mu.kv
	resp := &pb.DeleteRangeResponse{}
	if r.PrevKv {
		resp.PrevKvs = kv.rangeKVs(r.Key, r.RangeEnd, kv.readRev())
	}
	resp.Deleted = kv.deleteRange(r.Key, r.RangeEnd)
	resp.Header = &pb.ResponseHeader{Revision: kv.readRev()}
	return resp
}

// comparePathLocked evaluates the compares of r and, depth first, of the
// nested transactions in the branches they choose, all on the state
// before r: path[0] is r's outcome, then come those of its nested
// transactions, in order. REQUIRES: s.mu.
func (s *Server) comparePathLocked(r *pb.TxnRequest) []bool {
	ok := true
	for _, c := range r.Compare {
		if !s.compareLocked(c) {
			ok = false
			break
		}
	}
	path := []bool{ok}
	for _, op := range branch(r, ok) {
		if t := op.GetRequestTxn(); t != nil {
			path = append(path, s.comparePathLocked(t)...)
		}
	}
	return path
}

func branch(r *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return r.Success
	}
	return r.Failure
}

// compareLocked evaluates c: over a range, it holds if it holds for
// every key in it; on no key at all, a VALUE compare fails and any other
// compares against the zero of its target. REQUIRES: s.mu.
func (s *Server) compareLocked(c *pb.Compare) bool {
	kvs := s.mu.kv.rangeKVs(c.Key, c.RangeEnd, s.mu.kv.readRev())
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = cmp.Compare(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmp.Compare(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmp.Compare(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmp.Compare(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

// checkPathLocked checks, before anything runs, the operations of the
// branches path chose: ranges' revisions, puts' leases and previous
// values. It returns how many nested transactions it went through.
// REQUIRES: s.mu.
func (s *Server) checkPathLocked(r *pb.TxnRequest, path []bool) (int, error) {
	n := 0
	for _, op := range branch(r, path[0]) {
		var err error
		switch {
		case op.GetRequestRange() != nil:
			err = s.checkRevLocked(op.GetRequestRange().Revision)
		case op.GetRequestPut() != nil:
			err = s.checkPutLocked(op.GetRequestPut())
		case op.GetRequestTxn() != nil:
			var m int
			m, err = s.checkPathLocked(op.GetRequestTxn(), path[1+n:])
			n += m + 1
		}
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// runTxnLocked runs the branches path chose into resp and returns how
// many nested transactions it ran. REQUIRES: s.mu.
func (s *Server) runTxnLocked(r *pb.TxnRequest, path []bool, resp *pb.TxnResponse) int {
	resp.Succeeded = path[0]
	n := 0
	for _, op := range branch(r, path[0]) {
		var out pb.ResponseOp
		switch {
		case op.GetRequestRange() != nil:
			out.Response = &pb.ResponseOp_ResponseRange{ResponseRange: s.rangeLocked(op.GetRequestRange())}
		case op.GetRequestPut() != nil:
			out.Response = &pb.ResponseOp_ResponsePut{ResponsePut: s.putLocked(op.GetRequestPut())}
		case op.GetRequestDeleteRange() != nil:
			out.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: s.deleteLocked(op.GetRequestDeleteRange())}
		case op.GetRequestTxn() != nil:
			sub := &pb.TxnResponse{}
			m := s.runTxnLocked(op.GetRequestTxn(), path[1+n:], sub)
			sub.Header = &pb.ResponseHeader{} // etcd fills only the outer header
			out.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}
			n += m + 1
		}
		resp.Responses = append(resp.Responses, &out)
	}
	return n
}
