package etcdsim

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Observer returns a read-only client of the server that reads even
// while the server is down and leaves its state as it was: a simulation
// reads through it the state it let come about, to decide which faults
// to draw, without disturbing the run. clientv3.NewKVFromKVClient makes
// it a KV whose Get, and Txn whose branches only read, work as the
// server's; writes and compaction fail with codes.PermissionDenied.
func (s *Server) Observer() pb.KVClient { return observer{s} }

type observer struct{ s *Server }

var errObserverWrite = status.Error(codes.PermissionDenied, "etcdsim: an observer only reads")

// Range reads as Server.Range does, whether or not the server is up.
func (o observer) Range(ctx context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	if err := ctxError(ctx); err != nil {
		return nil, err
	}
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	return o.s.checkedRangeLocked(r)
}

// Txn runs a transaction whose branches hold only ranges, as Server.Txn
// does, whether or not the server is up; one that would write fails.
func (o observer) Txn(ctx context.Context, r *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	if err := ctxError(ctx); err != nil {
		return nil, err
	}
	if !readOnly(r) {
		return nil, errObserverWrite
	}
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	return o.s.checkedTxnLocked(r)
}

// readOnly reports whether every operation of r, in either branch and in
// nested transactions, is a range.
func readOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch req := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
			case *pb.RequestOp_RequestTxn:
				if !readOnly(req.RequestTxn) {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// RangeStream is not simulated: it fails with codes.Unimplemented.
func (observer) RangeStream(context.Context, *pb.RangeRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	return nil, errRangeStream
}

// Put fails: an observer only reads.
func (observer) Put(context.Context, *pb.PutRequest, ...grpc.CallOption) (*pb.PutResponse, error) {
	return nil, errObserverWrite
}

// DeleteRange fails: an observer only reads.
func (observer) DeleteRange(context.Context, *pb.DeleteRangeRequest, ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return nil, errObserverWrite
}

// Compact fails: an observer only reads.
func (observer) Compact(context.Context, *pb.CompactionRequest, ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return nil, errObserverWrite
}
