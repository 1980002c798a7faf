package rdma

// Bounds on per-connection bookkeeping for streams that are not open.
const (
	// maxRecentStreams is how many locally closed streams a connection
	// remembers, so that frames still in flight for them are dropped instead
	// of being taken for frames on a stream that was never opened.
	maxRecentStreams = 4096
	// maxPendingSignals is how many signals a connection holds for streams
	// this node has not opened yet. A peer that sends more is misbehaving.
	maxPendingSignals = 1024
)

// recentSet remembers the most recently closed streams of a connection, up
// to maxRecentStreams; the oldest is forgotten first.
type recentSet struct {
	set   map[StreamID]uint64 // stream → sequence number of its entry in order
	order ring[recentEntry]   // insertion order; holds stale entries too
	seq   uint64
}

type recentEntry struct {
	s   StreamID
	seq uint64
}

// add remembers s.
func (r *recentSet) add(s StreamID) {
	if r.set == nil {
		r.set = make(map[StreamID]uint64)
	}
	if _, ok := r.set[s]; ok {
		return
	}
	r.seq++
	r.set[s] = r.seq
	r.order.push(recentEntry{s: s, seq: r.seq})
	for len(r.set) > maxRecentStreams || r.order.len() > 2*maxRecentStreams {
		old, _ := r.order.pop()
		if r.set[old.s] == old.seq {
			delete(r.set, old.s)
		}
	}
}

// has reports whether s was closed recently.
func (r *recentSet) has(s StreamID) bool {
	_, ok := r.set[s]
	return ok
}

// remove forgets s (it is being opened again).
func (r *recentSet) remove(s StreamID) { delete(r.set, s) }

// pendingSignals holds signals that arrived for streams not yet open, in
// arrival order per stream, up to maxPendingSignals in all.
type pendingSignals struct {
	byStream map[StreamID][]uint64
	n        int
}

// add queues imm for s. It returns false if the bound is reached.
func (p *pendingSignals) add(s StreamID, imm uint64) bool {
	if p.n >= maxPendingSignals {
		return false
	}
	if p.byStream == nil {
		p.byStream = make(map[StreamID][]uint64)
	}
	p.byStream[s] = append(p.byStream[s], imm)
	p.n++
	return true
}

// take removes and returns the signals queued for s.
func (p *pendingSignals) take(s StreamID) []uint64 {
	imms := p.byStream[s]
	if imms != nil {
		delete(p.byStream, s)
		p.n -= len(imms)
	}
	return imms
}
