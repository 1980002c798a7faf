// Package schedule generates the fault schedules of a Jepsen-style
// campaign against Convoy processes: for N members and an etcd cluster,
// a list of timed steps — at offset t, apply fault F; later, recover
// from it — chosen from a seed.
//
// The same seed and Config give the same Schedule, byte for byte, so a
// failure report that prints a schedule (String, or its JSON form)
// reproduces it: Generate(s.Seed, s.Config).
//
// Faults come in episodes: a partition, a cut, packet loss or delay, or
// a partition from etcd, healed later; a kill of one member, of a
// minority or of all, each followed by a restart on the same data, a
// restart on a wiped directory, or a permanent loss that leaves a
// majority; a pause past the failure-detection timeout or past the etcd
// lease, followed by a continue; clock skew or drift, put right later;
// the loss of one etcd member, a pause of one, or of the etcd quorum for
// longer than every lease; a full disk, freed later. Episodes of one
// class (network, processes and disks, clocks, etcd) follow each other;
// episodes of different classes may overlap. Every schedule ends with
// HealAll and a quiet period, so that the run can check liveness once
// the faults are over.
//
// A Config may name workloads, which this package does not interpret:
// the seed draws one for each schedule, apart from its faults.
//
// Campaign returns a series of schedules whose first ones cycle through
// every fault kind and every workload, so that a short campaign covers
// them all; later ones draw their faults and workloads at random.
//
// Schedules are data: this package runs nothing and reads no clock.
package schedule
