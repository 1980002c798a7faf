package etcdsim

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The checks of a request that etcd makes before it reaches the store
// (etcdserver/api/v3rpc/key.go).

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

// checkTxn bounds the size of r and checks its compares and operations,
// nested transactions' included.
func checkTxn(r *pb.TxnRequest, maxOps int) error {
	n := max(len(r.Compare), len(r.Success), len(r.Failure))
	if n > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, op := range append(r.Success[:len(r.Success):len(r.Success)], r.Failure...) {
		var err error
		switch {
		case op.GetRequestRange() != nil:
			err = checkRange(op.GetRequestRange())
		case op.GetRequestPut() != nil:
			err = checkPut(op.GetRequestPut())
		case op.GetRequestDeleteRange() != nil:
			if len(op.GetRequestDeleteRange().Key) == 0 {
				err = rpctypes.ErrGRPCEmptyKey
			}
		case op.GetRequestTxn() != nil:
			// etcd passes the nested transaction what is left of the
			// bound, which only its own size is compared with.
			err = checkTxn(op.GetRequestTxn(), maxOps-n)
		default:
			err = rpctypes.ErrGRPCKeyNotFound // an empty operation
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// interval is a key range [begin, end) as etcd's checkIntervals sees a
// delete: a point is [k, k+"\x00"); an end of "\x00" (every key from
// begin on) makes, as in etcd, an interval that holds no key.
type interval struct{ begin, end string }

func (iv interval) holds(k string) bool { return iv.begin <= k && k < iv.end }

// checkIntervals rejects the operations of one branch (and, depth first,
// of its nested transactions) that write a key twice: two puts, or a put
// and a delete, of one key, except that the two branches of a nested
// transaction may put the same key. It returns the keys put and the
// ranges deleted.
func checkIntervals(ops []*pb.RequestOp) (map[string]bool, []interval, error) {
	var dels []interval
	for _, op := range ops {
		d := op.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		iv := interval{string(d.Key), string(d.Key) + "\x00"}
		if len(d.RangeEnd) != 0 {
			iv.end = string(d.RangeEnd)
		}
		dels = append(dels, iv)
	}
	deleted := func(k string) bool {
		for _, iv := range dels {
			if iv.holds(k) {
				return true
			}
		}
		return false
	}

	puts := make(map[string]bool)
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range putsThen {
			if puts[k] || deleted(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
		for k := range putsElse {
			if (puts[k] && !putsThen[k]) || deleted(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}

	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if puts[k] || deleted(k) {
			return nil, nil, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = true
	}
	return puts, dels, nil
}
