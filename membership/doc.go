// Package membership holds Convoy's views: the member list agreed in etcd,
// the view-change protocol with virtual synchrony, failure detection, and
// state transfer to joiners. The root package's runtime drives it; the
// protocol pieces here do no I/O and read no clock, so that they are
// tested step by step.
//
// [Store] keeps the authoritative view sequence in etcd: one [View] record
// per epoch, written only by [Store.Bootstrap] and [Store.Install].
// Install is a single transaction conditioned on the previous view still
// being current and on the majority rule, checked against the caught-up
// marks in etcd, so two different views (or cuts) for one epoch can never
// exist. Registrations and join requests hang on the store's lease, a
// liveness hint and never membership. [Store.State] reads a consistent
// snapshot at one revision and [Store.Watch] says when to read it again.
// [NewStoreOn] builds the same store on any clientv3.KV with a [Lease]
// its caller manages, so that a deterministic simulation runs it on a
// simulated etcd and a virtual clock.
// The key layout is documented in keys.go.
//
// [Decide] is the view-change decision as a pure function of such a
// snapshot: whether a change is under way, the leader (the lowest-ranked
// member not suspected), the proposed members, whose final [Report] is
// still missing, and, for the leader once every report is in, the next
// view with its cut. [Suspected] says which members a change leaves out:
// the reporters that still hear each other form groups, only a group
// holding a majority of the view counts, and only its members' suspicions
// exclude anyone — so the minority side of a partition, which suspects the
// majority just as firmly, cannot exclude it.
//
// Failure detection follows CubicRing (§3–4): members are placed on a
// generalized hypercube ([Neighbours]) and each watches only its direct
// neighbours with heartbeats. A missed timeout (or a reset connection)
// makes a neighbour a suspect, and the suspicion counts only after probes
// through other neighbours of the suspect fail too, so that one bad link
// does not exclude a live member. A neighbour whose receive frontier stops
// advancing while the group's moves on is treated as failing as well,
// since it stalls every barrier. [Detector] is the deterministic core;
// its messages travel as transport signals ([EncodeSignal]).
//
// Joiners receive the application's state ([StateMachine]) streamed in
// parallel from several members ([Donor], [Fetch]): each donor snapshots
// its part, and the next one as a backup, exactly at the end of the view
// before the one that admits the joiner (from a checkpoint taken there,
// if the state machine is a [Checkpointer]). Neither side needs to hold a
// part in memory: a donor may read it as it sends it
// ([Donor.AddPartReader]), and a joiner may hand it to a sink as it
// arrives ([FetchConfig.Sink]).
package membership
