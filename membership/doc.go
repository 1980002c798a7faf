// Package membership will hold Convoy's views: the member list agreed in
// etcd, view changes with virtual synchrony, joins and state transfer. So
// far it holds the failure detector's deterministic core.
//
// Failure detection follows CubicRing (§3–4): members are placed on a
// generalized hypercube ([Neighbours]) and each watches only its direct
// neighbours with heartbeats. A missed timeout makes a neighbour a suspect,
// and the suspicion counts only after probes through other neighbours of
// the suspect fail too, so that one bad link does not exclude a live
// member. A neighbour whose receive frontier stops advancing while the
// group's moves on is treated as failing as well, since it stalls every
// barrier.
//
// [Detector] does no I/O and reads no clock: the runtime feeds it ticks
// and messages and sends what [Detector.Ready] returns.
package membership
