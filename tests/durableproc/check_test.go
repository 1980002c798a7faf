package durableproc

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/persistence"
)

// maxReports bounds how many violations of one kind a check reports.
const maxReports = 10

// ackSet maps each payload reported durable to the process that
// recorded the acknowledgement.
type ackSet map[string]*proc

// acked collects every acknowledgement recorded so far.
func (c *cluster) acked() ackSet {
	acks := make(ackSet)
	for _, p := range c.procs {
		for _, r := range p.records() {
			if r.Ack != "" {
				acks[r.Ack] = p
			}
		}
	}
	return acks
}

// payloads returns the acknowledged payloads, sorted.
func (a ackSet) payloads() []string { return slices.Sorted(maps.Keys(a)) }

// history is what the checks gather from every record of every run.
type history struct {
	acks ackSet
	// payloadAt maps each delivered index to its payload, indexOf each
	// payload to its index, and seenAt each index to where it was first
	// delivered, for error messages.
	payloadAt map[uint64]string
	indexOf   map[string]uint64
	seenAt    map[uint64]place
	// views maps each epoch to the view and where it was first seen.
	views  map[uint64]viewRecord
	viewAt map[uint64]place
	// stateAt maps each epoch to the state members held when they took
	// part in its view, and where it was first seen.
	stateAt   map[uint64]summed
	stateSeen map[uint64]place
}

// place is where a record was seen: a process and its incarnation.
type place struct {
	p   *proc
	inc int
}

func (pl place) String() string { return fmt.Sprintf("%v, incarnation %d", pl.p, pl.inc) }

// reporter fails the test with at most maxReports messages per kind.
type reporter struct {
	c      *cluster
	counts map[string]int
}

func (r *reporter) errorf(kind, format string, args ...any) {
	r.c.t.Helper()
	r.counts[kind]++
	switch n := r.counts[kind]; {
	case n <= maxReports:
		r.c.t.Errorf(format, args...)
	case n == maxReports+1:
		r.c.t.Errorf("(more violations of the kind %q left out)", kind)
	}
}

// placedAck is an acknowledged payload, its key and value, and the index
// it was delivered at.
type placedAck struct {
	payload, key, value string
	index               uint64
}

// checkRecords checks the records of every run of every member so far
// and returns what they show:
//
//   - every delivered payload is one the test sends, delivered with its
//     sender's id;
//   - no index holds two payloads, no payload sits at two indexes (replayed
//     deliveries included), and two views with the same epoch are equal;
//   - within a run, deliveries follow each other index by index, and a
//     view starts right after the last delivery before it (a state
//     restored by transfer may jump ahead, to the next view's start);
//   - every acknowledged payload was delivered by its own member, in the
//     same run, before the acknowledgement;
//   - every payload acknowledged before a run started has an index no
//     later than the start of the run's first view;
//   - at every view, the member's state holds every acknowledged payload
//     at an index up to the view's start, and every member holds the same
//     state at the same view.
func (c *cluster) checkRecords() *history {
	c.t.Helper()
	c.refreshAll()
	c.checked = true
	h := &history{
		acks:      c.acked(),
		payloadAt: make(map[uint64]string), indexOf: make(map[string]uint64), seenAt: make(map[uint64]place),
		views: make(map[uint64]viewRecord), viewAt: make(map[uint64]place),
		stateAt: make(map[uint64]summed), stateSeen: make(map[uint64]place),
	}
	rep := &reporter{c: c, counts: make(map[string]int)}
	for _, p := range c.procs {
		c.checkOrder(rep, h, p)
	}
	var byIndex []placedAck
	for _, pl := range h.acks.payloads() {
		if i, ok := h.indexOf[pl]; ok {
			k, v, _ := kvtest.ParseSet(pl)
			byIndex = append(byIndex, placedAck{payload: pl, key: k, value: v, index: i})
		}
	}
	slices.SortFunc(byIndex, func(a, b placedAck) int { return cmp.Compare(a.index, b.index) })
	for _, p := range c.procs {
		c.checkPriorAcks(rep, h, p)
		c.checkStates(rep, h, p, byIndex)
	}
	return h
}

// checkOrder checks p's deliveries and views against each other and
// against everything seen before (see checkRecords).
func (c *cluster) checkOrder(rep *reporter, h *history, p *proc) {
	c.t.Helper()
	delivered := make(map[string]bool) // payloads p delivered so far
	var next uint64                    // the index p delivers next; 0 if unknown
	var lastEpoch uint64
	for _, r := range p.records() {
		here := place{p, r.Inc}
		switch {
		case r.Delivery != nil:
			d := r.Delivery
			if err := checkPayload(d); err != nil {
				rep.errorf("payload", "%v (epoch %d, replayed %v), index %d: %v", here, d.Epoch, d.Replayed, d.Index, err)
			}
			if q, ok := h.payloadAt[d.Index]; !ok {
				h.payloadAt[d.Index], h.seenAt[d.Index] = d.Payload, here
			} else if q != d.Payload {
				rep.errorf("index", "index %d holds %q at %v and %q at %v (epoch %d, replayed %v)",
					d.Index, q, h.seenAt[d.Index], d.Payload, here, d.Epoch, d.Replayed)
			}
			if i, ok := h.indexOf[d.Payload]; !ok {
				h.indexOf[d.Payload] = d.Index
			} else if i != d.Index {
				rep.errorf("moved", "%q sits at index %d at %v and at index %d at %v (epoch %d, replayed %v)",
					d.Payload, i, h.seenAt[i], d.Index, here, d.Epoch, d.Replayed)
			}
			switch {
			case next != 0 && d.Index != next:
				rep.errorf("gap", "%v (epoch %d, replayed %v): delivered index %d, expected %d", here, d.Epoch, d.Replayed, d.Index, next)
			case next == 0 && !d.Replayed:
				rep.errorf("gap", "%v: delivered index %d before taking part in any view", here, d.Index)
			}
			next = d.Index + 1
			delivered[d.Payload] = true
		case r.View != nil:
			v := r.View
			if ref, ok := h.views[v.Epoch]; !ok {
				h.views[v.Epoch], h.viewAt[v.Epoch] = *v, here
			} else if ref.Start != v.Start || !slices.Equal(ref.Members, v.Members) {
				rep.errorf("view", "view %d is %+v at %v and %+v at %v", v.Epoch, ref, h.viewAt[v.Epoch], *v, here)
			}
			if v.Epoch <= lastEpoch {
				rep.errorf("view", "%v: view %d after view %d", here, v.Epoch, lastEpoch)
			}
			if next != 0 && next != v.Start+1 {
				rep.errorf("gap", "%v: view %d starts after index %d, the last delivery was %d", here, v.Epoch, v.Start, next-1)
			}
			next, lastEpoch = v.Start+1, v.Epoch
		case r.Restored != nil, r.Excluded != nil:
			// The state comes by transfer, as of the next view's start.
			next = 0
		case r.Ack != "":
			if !delivered[r.Ack] {
				rep.errorf("ack", "%v: %q was reported durable before the member delivered it", here, r.Ack)
			}
		}
	}
}

// checkStates rebuilds the state p held at each of its views, from what
// it restored and delivered in its run, and checks it: it holds every
// acknowledged payload (byIndex, in index order) at an index up to the
// view's start, and it is the state every member held at that view.
//
// Keys are never set twice (every payload sets a key of its own, and a
// payload delivered twice fails checkOrder), so a state only loses
// entries by a restore: after a view, only the payloads past its start
// need checking at the next view, and all of them after a restore.
func (c *cluster) checkStates(rep *reporter, h *history, p *proc, byIndex []placedAck) {
	c.t.Helper()
	st := newStateSum(nil)
	checked := 0 // byIndex[:checked] are known to be in st
	for _, r := range p.records() {
		switch {
		case r.Restored != nil:
			st, checked = newStateSum(r.Restored.KV), 0
		case r.Delivery != nil:
			if k, v, ok := kvtest.ParseSet(r.Delivery.Payload); ok {
				st.set(k, v)
			}
		case r.View != nil:
			v, here := r.View, place{p, r.Inc}
			for ; checked < len(byIndex) && byIndex[checked].index <= v.Start; checked++ {
				a := byIndex[checked]
				if got, ok := st.kv[a.key]; !ok || got != a.value {
					rep.errorf("lost", "%v, view %d (start %d): the state misses %q, reported durable by %v at index %d (holds %q, present %v)",
						here, v.Epoch, v.Start, a.payload, h.acks[a.payload], a.index, got, ok)
				}
			}
			if ref, ok := h.stateAt[v.Epoch]; !ok {
				h.stateAt[v.Epoch], h.stateSeen[v.Epoch] = st.summed(), here
			} else if ref != st.summed() {
				rep.errorf("state", "view %d: %v holds a different state (%d keys) from %v (%d keys)",
					v.Epoch, here, len(st.kv), h.stateSeen[v.Epoch], ref.keys)
			}
		}
	}
}

// stateSum is a key-value state with an order-independent hash of its
// entries, kept up to date as it changes.
type stateSum struct {
	kv   map[string]string
	hash uint64
}

func newStateSum(kv map[string]string) stateSum {
	s := stateSum{kv: make(map[string]string, len(kv))}
	for k, v := range kv {
		s.set(k, v)
	}
	return s
}

// entryHash hashes one entry.
func entryHash(k, v string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k))
	h.Write([]byte{0})
	h.Write([]byte(v))
	return h.Sum64()
}

func (s *stateSum) set(k, v string) {
	if old, ok := s.kv[k]; ok {
		s.hash -= entryHash(k, old)
	}
	s.kv[k] = v
	s.hash += entryHash(k, v)
}

// summed is what two states are compared by.
type summed struct {
	keys int
	hash uint64
}

func (s stateSum) summed() summed { return summed{len(s.kv), s.hash} }

// checkPriorAcks checks that every payload acknowledged before p started
// lies at an index no later than the start of the first view p took part
// in: the restarted group resumed with every durable message.
func (c *cluster) checkPriorAcks(rep *reporter, h *history, p *proc) {
	c.t.Helper()
	var first *viewRecord
	for _, r := range p.records() {
		if r.View != nil {
			first = r.View
			break
		}
	}
	if first == nil {
		return // killed before it took part in a view
	}
	for _, pl := range p.priorAcks {
		switch i, ok := h.indexOf[pl]; {
		case !ok:
			rep.errorf("lost", "%q was reported durable by %v before %v started, and no member ever delivered it", pl, h.acks[pl], p)
		case i > first.Start:
			rep.errorf("lost", "%q was reported durable by %v at index %d before %v started, beyond the start %d of its first view %d",
				pl, h.acks[pl], i, p, first.Start, first.Epoch)
		}
	}
}

// checkPayload checks that d carries a payload payloadFor makes, sent by
// d.Sender.
func checkPayload(d *deliveryRecord) error {
	key, value, ok := kvtest.ParseSet(d.Payload)
	if !ok {
		return fmt.Errorf("unexpected payload %q", d.Payload)
	}
	id, rest, _ := strings.Cut(key, ".")
	_, k, _ := strings.Cut(rest, "-")
	if id != strconv.FormatUint(d.Sender, 10) || k != value {
		return fmt.Errorf("payload %q does not match its sender %d", d.Payload, d.Sender)
	}
	return nil
}

// checksum returns a hash of kv's sorted entries.
func checksum(kv map[string]string) string {
	s := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		fmt.Fprintf(s, "%s=%s\n", k, kv[k])
	}
	return hex.EncodeToString(s.Sum(nil))
}

// checkFinal checks the states ps recorded as they exited: all the same,
// and holding every payload ever reported durable.
func (c *cluster) checkFinal(ps []*proc, h *history) {
	c.t.Helper()
	var ref string
	for _, p := range ps {
		s := p.summary()
		switch {
		case s.failed != "":
			c.t.Errorf("%v: the group failed: %s", p, s.failed)
			continue
		case s.final == nil:
			c.t.Errorf("%v recorded no final state", p)
			continue
		case s.final.Err != "":
			c.t.Errorf("%v: the group had failed at the end: %s", p, s.final.Err)
		}
		kv := s.final.KV
		missing := 0
		for _, pl := range h.acks.payloads() {
			k, v, _ := kvtest.ParseSet(pl)
			if kv[k] != v {
				if missing++; missing <= maxReports {
					c.t.Errorf("%v: the final state misses %q, reported durable by %v (index %d)", p, pl, h.acks[pl], h.indexOf[pl])
				}
			}
		}
		if missing > 0 {
			c.t.Errorf("%v: the final state misses %d of %d payloads reported durable", p, missing, len(h.acks))
		}
		if sum := checksum(kv); ref == "" {
			ref = sum
		} else if sum != ref {
			c.t.Errorf("%v ended with a state of %d keys different from %v's", p, len(kv), ps[0])
		}
	}
	for pl, p := range h.acks {
		if _, ok := h.indexOf[pl]; !ok {
			c.t.Errorf("%q was reported durable by %v and no member ever delivered it", pl, p)
		}
	}
}

// checkLogs opens every member's durable log (the members are gone) and
// checks that each reaches index last, the last one the members
// delivered; that the logs agree entry by entry over the indexes they
// share; that every entry agrees with what members delivered at its
// index; and that every acknowledged payload whose index lies in a log is
// there.
func (c *cluster) checkLogs(h *history, last uint64) {
	c.t.Helper()
	ctx := c.t.Context()
	type memberLog struct {
		id          uint64
		first, last uint64
		entries     map[uint64]persistence.Entry
	}
	var logs []memberLog
	for _, id := range c.members() {
		l, err := persistence.Open(ctx, persistence.Options{Dir: c.data[id]})
		if err != nil {
			c.t.Errorf("member %d: open the log: %v", id, err)
			continue
		}
		ml := memberLog{id: id, first: l.First(), last: l.Last(), entries: make(map[uint64]persistence.Entry)}
		err = l.Scan(ctx, ml.first, math.MaxUint64, func(e persistence.Entry) error {
			ml.entries[e.Index] = e
			return nil
		})
		if idx, meta, serr := l.Snapshot(); serr == nil {
			c.t.Logf("member %d's log: entries %d to %d, snapshot at %d (%d bytes)", id, ml.first, ml.last, idx, len(meta))
		} else if errors.Is(serr, persistence.ErrNotFound) {
			c.t.Logf("member %d's log: entries %d to %d, no snapshot", id, ml.first, ml.last)
		} else {
			c.t.Errorf("member %d: the log's snapshot: %v", id, serr)
		}
		if cerr := l.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			c.t.Errorf("member %d: read the log: %v", id, err)
			continue
		}
		if n := uint64(len(ml.entries)); ml.last >= ml.first && n != ml.last-ml.first+1 {
			c.t.Errorf("member %d: the log holds %d entries from %d to %d", id, n, ml.first, ml.last)
		}
		if ml.last < last {
			c.t.Errorf("member %d: the log ends at %d, the members delivered up to %d", id, ml.last, last)
		}
		logs = append(logs, ml)
	}
	for _, ml := range logs {
		bad := 0
		for i := ml.first; i <= ml.last; i++ {
			e := ml.entries[i]
			if p, ok := h.payloadAt[i]; ok && p != string(e.Payload) {
				if bad++; bad <= maxReports {
					c.t.Errorf("member %d's log holds %q at index %d, %s delivered %q", ml.id, e.Payload, i, h.seenAt[i], p)
				}
			}
			for _, o := range logs {
				if o.id <= ml.id || i < o.first || i > o.last {
					continue
				}
				f := o.entries[i]
				if e.Epoch != f.Epoch || e.Sender != f.Sender || e.Seq != f.Seq || string(e.Payload) != string(f.Payload) {
					if bad++; bad <= maxReports {
						c.t.Errorf("index %d: member %d's log holds %s, member %d's %s", i, ml.id, entryString(e), o.id, entryString(f))
					}
				}
			}
		}
		for pl := range h.acks {
			i, ok := h.indexOf[pl]
			if !ok || i < ml.first || i > ml.last {
				continue
			}
			if got := string(ml.entries[i].Payload); got != pl {
				if bad++; bad <= maxReports {
					c.t.Errorf("member %d's log holds %q at index %d, where %q was reported durable", ml.id, got, i, pl)
				}
			}
		}
		if bad > maxReports {
			c.t.Errorf("member %d's log: %d violations in all", ml.id, bad)
		}
	}
}

// entryString formats a log entry for error messages.
func entryString(e persistence.Entry) string {
	return fmt.Sprintf("{epoch %d, sender %d, seq %d, payload %q}", e.Epoch, e.Sender, e.Seq, e.Payload)
}
