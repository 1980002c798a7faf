// Package etcdsim is a deterministic, in-memory etcd server for whole-group
// simulations: the real clients of etcd (clientv3.KV, and through it the
// view store) run against it, and a simulation drives its clock, its
// leases and its outages from one seed. It starts no goroutine, reads no
// clock and draws no random number.
//
// A Server implements etcdserverpb.KVClient with etcd's semantics: one
// revision per write (a Put, a DeleteRange that deletes something, a Txn
// that changes something), per-key create and mod revisions and versions,
// reads at past revisions until compacted, Range with range ends, limits,
// sorting, revision filters, keys-only and count-only, and Txn with
// compares on value, version, create and mod revision and lease, over one
// key or a range (true if every key in the range satisfies it), nested
// transactions and etcd's checks for keys written twice. Its errors are
// the gRPC status errors etcd sends (rpctypes.ErrGRPC…), so a clientv3.KV
// on top returns the rpctypes errors callers compare with. A randomized
// test holds it to a real etcd's responses.
//
//	srv := etcdsim.New(etcdsim.Config{})
//	kv := clientv3.NewKVFromKVClient(srv, nil)
//	id, _, _ := srv.Grant(5)
//	kv.Put(ctx, "k", "v", clientv3.WithLease(id))
//	srv.Advance(int64(6 * time.Second)) // no KeepAlive: "k" is gone
//	_, err := kv.Put(ctx, "k", "v", clientv3.WithLease(id)) // rpctypes.ErrLeaseNotFound
//
// Leases live on a virtual clock, in nanoseconds, that only Advance moves:
// Grant, KeepAlive and Revoke are plain calls, and Advance revokes the
// leases whose deadline has come, one revision each (none for a lease
// without keys). Down and Up simulate an outage of the whole etcd cluster
// (a restart, or a lost quorum): while down, every call fails with
// ErrUnavailable and no lease expires; Up then gives every lease its full
// TTL plus an election timeout from that moment, as etcd's new leader
// does (lessor.Promote). A ClientLease is a client's side of a lease, as
// clientv3's keepalive sees it: it gives the lease up when etcd says it
// is gone, or stays down a full TTL, though etcd may extend it later. A
// client cut off from an etcd that stays up is the simulation's to model,
// for instance by wrapping the Server in a KVClient that fails.
//
// Instead of watch streams, Revision and ChangedSince tell a simulation
// whose watch would fire, so that it wakes members deterministically.
//
// # Deviations from etcd
//
//   - Calls take no time and never block: a call while the server is down
//     fails at once with ErrUnavailable, where a real client retries until
//     its context ends. The simulation decides how long a call took.
//   - A lease expires exactly when Advance passes its deadline. etcd looks
//     for expired leases every 500 ms and revokes them through raft, at
//     most 1000 a second, so its keys go up to half a second and a commit
//     later. Up does not spread the deadlines of more than 1000 leases
//     that would expire together, as Promote does.
//   - Lease checkpoints (an etcd feature gate, off by default) are not
//     simulated: like default etcd, a restart forgets remaining TTLs.
//   - Lease IDs are 1, 2, 3… in the order of the grants; a client cannot
//     choose one.
//   - There are no watches, no RangeStream (it fails with
//     codes.Unimplemented), no lease, cluster, maintenance or auth
//     services, no request size limit and no space quota.
//   - Response headers carry the revision and a raft term (2, plus one per
//     Up), not the cluster and member IDs.
//   - Serializable reads are linearizable: there is one server.
package etcdsim
