package check

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
)

// CheckLog checks a history of the shared log and the members' logs at
// the end of the run (dumps, taken once every fault is healed and the
// members caught up). It checks that:
//
//   - every member's log is dense: its entries are exactly the positions
//     from its trim point to its tail (Dense); members agree on every
//     position they both hold (Immutable);
//   - no two acknowledged appends share a position, no entry sits at two
//     positions, and an acknowledged position is below the number of
//     appends invoked before it was acknowledged (UniquePosition, Dense);
//   - every acknowledged append is at its position, with its bytes, on
//     every member that has not trimmed it (AckedAppend);
//   - every entry a member holds was appended, by an append that did not
//     fail (NoPhantom); one whose outcome is unknown may appear, once;
//   - a position never changes: appends, reads, ranges and stream reads
//     that saw it saw the same bytes (Immutable);
//   - reads agree with what was acknowledged before they began and with
//     the members' logs at the end: an entry read is at that position at
//     the end (unless trimmed everywhere), a position reported unwritten
//     is at or beyond every acknowledged append and tail that completed
//     before the read began, and a range returns every position between
//     its first and its last entry that was not trimmed (ReadConsistent);
//   - a tail is at least one more than every position acknowledged, and
//     at least every tail returned, before it was invoked, at most the
//     number of appends invoked before it completed, and at most the
//     members' tails at the end (TailMonotonic, ReadConsistent);
//   - a stream read returns entries of that stream only, in order, and
//     every entry of the stream between its first and its last entry
//     that was not trimmed; an empty one misses no entry of the stream
//     acknowledged before it began (StreamFiltered);
//   - trims are respected: a trim reports a trim point no further than
//     the furthest trim invoked before it completed asked (its own, or
//     an earlier one's that reached further: a trim below the trim point
//     reports the trim point), a read reports trimmed only a position
//     some trim invoked before its completion reached, and every member's trim point at
//     the end is at least every acknowledged trim point and at most the
//     furthest trim asked (TrimRespected).
//
// Malformed operations and dumps are reported as Wellformed and left out.
func CheckLog(ops []LogOp, dumps []LogDump) Result {
	l := &logChecker{
		c:        newCollector("log"),
		ops:      ops,
		appendOf: make(map[string]int),
		final:    make(map[uint64]held),
		seen:     make(map[uint64]held),
	}
	l.index()
	l.checkDumps(dumps)
	l.checkAppends(dumps)
	l.checkReads()
	l.checkCompleteness()
	l.checkTails()
	l.checkTrims(dumps)
	return l.c.result()
}

// held is the bytes seen at a position, and where they were seen.
type held struct {
	data  string
	where string
}

// timeline answers "what is the largest value recorded before time t".
type timeline struct {
	at  []int64  // sorted
	max []uint64 // max[i]: the largest value of the first i+1 entries
}

func newTimeline(at []int64, v []uint64) timeline {
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return at[idx[a]] < at[idx[b]] })
	var tl timeline
	var m uint64
	for _, i := range idx {
		m = max(m, v[i])
		tl.at = append(tl.at, at[i])
		tl.max = append(tl.max, m)
	}
	return tl
}

// before returns the largest value recorded strictly before t, and
// whether there is one.
func (tl timeline) before(t int64) (uint64, bool) {
	n := sort.Search(len(tl.at), func(i int) bool { return tl.at[i] >= t })
	if n == 0 {
		return 0, false
	}
	return tl.max[n-1], true
}

// atOrBefore returns the largest value recorded at or before t, and
// whether there is one.
func (tl timeline) atOrBefore(t int64) (uint64, bool) {
	n := tl.upTo(t)
	if n == 0 {
		return 0, false
	}
	return tl.max[n-1], true
}

// upTo returns how many entries were recorded at or before t.
func (tl timeline) upTo(t int64) int {
	return sort.Search(len(tl.at), func(i int) bool { return tl.at[i] > t })
}

type logChecker struct {
	c   *collector
	ops []LogOp

	valid    []int          // the well-formed operations
	appendOf map[string]int // an append's data → the operation
	acked    []int          // the acknowledged appends
	// final: each position held by a member at the end; finalTail the
	// largest tail, lowestTrim the lowest trim point of the dumps.
	final      map[uint64]held
	dumped     bool
	finalTail  uint64
	lowestTrim uint64
	// seen: the bytes first seen at each position by an append or a read.
	seen map[uint64]held

	// ackedBefore: acknowledged appends by completion, valued position+1;
	// tailsBefore: tails by completion; invoked: appends that may have
	// taken effect, by invocation; trimsAsked: trims that may have taken
	// effect, by invocation, valued their Before.
	ackedBefore, tailsBefore, invoked, trimsAsked timeline
}

// index checks the operations' shape and builds the indexes.
func (l *logChecker) index() {
	ids := make(map[string]int)
	var ackAt, tailAt, invAt, trimAt []int64
	var ackV, tailV, invV, trimV []uint64
	for i, op := range l.ops {
		if bad := logMalformed(op); bad != "" {
			l.c.add(Wellformed, op.describe(i), "%s", bad)
			continue
		}
		if op.RequestID != "" {
			if j, ok := ids[op.RequestID]; ok {
				l.c.add(Wellformed, op.describe(i), "request id %q already used by operation %d", op.RequestID, j)
				continue
			}
			ids[op.RequestID] = i
		}
		if op.Kind == Append {
			if j, ok := l.appendOf[string(op.Data)]; ok {
				l.c.add(Wellformed, op.describe(i), "the same data as operation %d: appends cannot be told apart", j)
				continue
			}
			l.appendOf[string(op.Data)] = i
		}
		l.valid = append(l.valid, i)
		switch {
		case op.Kind == Append && op.Outcome == OK:
			l.acked = append(l.acked, i)
			ackAt, ackV = append(ackAt, op.Complete), append(ackV, op.Position+1)
		case op.Kind == Tail && op.Outcome == OK:
			tailAt, tailV = append(tailAt, op.Complete), append(tailV, op.Tail)
		}
		if op.Outcome != Fail {
			switch op.Kind {
			case Append:
				invAt, invV = append(invAt, op.Invoke), append(invV, 0)
			case Trim:
				trimAt, trimV = append(trimAt, op.Invoke), append(trimV, op.Before)
			}
		}
	}
	l.ackedBefore = newTimeline(ackAt, ackV)
	l.tailsBefore = newTimeline(tailAt, tailV)
	l.invoked = newTimeline(invAt, invV)
	l.trimsAsked = newTimeline(trimAt, trimV)
}

// trimReached reports whether a trim invoked at or before t may have
// trimmed position p.
func (l *logChecker) trimReached(p uint64, t int64) bool {
	asked, ok := l.trimsAsked.atOrBefore(t)
	return ok && asked > p
}

// checkDumps checks each member's log for density and the members
// against each other, and gathers the final log.
func (l *logChecker) checkDumps(dumps []LogDump) {
	names := make(map[string]bool)
	for _, d := range dumps {
		where := "member " + d.Member
		if names[d.Member] {
			l.c.add(Wellformed, where, "two dumps of one member")
			continue
		}
		names[d.Member] = true
		if d.Trim > d.Tail {
			l.c.add(Dense, where, "trim point %d beyond its tail %d", d.Trim, d.Tail)
			continue
		}
		if !l.dumped || d.Trim < l.lowestTrim {
			l.lowestTrim = d.Trim
		}
		l.finalTail = max(l.finalTail, d.Tail)
		l.dumped = true
		next, reported := d.Trim, false
		for _, e := range d.Entries {
			if e.Position != next && !reported {
				l.c.add(Dense, where, "position %d where %d was expected (its log runs from %d to %d)", e.Position, next, d.Trim, d.Tail)
				reported = true
			}
			next = e.Position + 1
			if e.Position < d.Trim || e.Position >= d.Tail {
				continue
			}
			if h, ok := l.final[e.Position]; ok && h.data != string(e.Data) {
				l.c.add(Immutable, fmt.Sprintf("position %d", e.Position), "%s holds %s, %s holds %s", h.where, short(h.data), where, short(string(e.Data)))
			} else if !ok {
				l.final[e.Position] = held{string(e.Data), where}
			}
		}
		if next != d.Tail && !reported {
			l.c.add(Dense, where, "entries end before position %d, its tail is %d", next, d.Tail)
		}
	}
	// What a member holds was appended, once, by an append that did not
	// fail.
	placed := make(map[string]uint64)
	for _, d := range dumps {
		for _, e := range d.Entries {
			where := fmt.Sprintf("member %s, position %d", d.Member, e.Position)
			i, ok := l.appendOf[string(e.Data)]
			switch {
			case !ok:
				l.c.add(NoPhantom, where, "holds %s, which nobody appended", short(string(e.Data)))
				continue
			case l.ops[i].Outcome == Fail:
				l.c.add(NoPhantom, where, "holds the entry of %s, which failed", l.ops[i].describe(i))
				continue
			}
			if p, ok := placed[string(e.Data)]; ok && p != e.Position {
				l.c.add(UniquePosition, where, "the entry of %s is also at position %d", l.ops[i].describe(i), p)
			} else if !ok {
				placed[string(e.Data)] = e.Position
			}
		}
	}
}

// checkAppends checks the acknowledged appends against each other and
// against the members' logs.
func (l *logChecker) checkAppends(dumps []LogDump) {
	owner := make(map[uint64]int)
	for _, i := range l.acked {
		op := l.ops[i]
		where := op.describe(i)
		if j, ok := owner[op.Position]; ok {
			l.c.add(UniquePosition, where, "acknowledged with position %d, like %s", op.Position, l.ops[j].describe(j))
		} else {
			owner[op.Position] = i
		}
		if n := l.invoked.upTo(op.Complete); uint64(n) <= op.Position {
			l.c.add(Dense, where, "acknowledged with position %d, but only %d appends were invoked by then", op.Position, n)
		}
		l.observe(op.Position, op.Data, where)
		for _, d := range dumps {
			switch {
			case op.Position < d.Trim || d.Trim > d.Tail:
			case op.Position >= d.Tail:
				l.c.add(AckedAppend, where, "acknowledged at position %d, but member %s's log ends before it (tail %d)", op.Position, d.Member, d.Tail)
			default:
				e, ok := entryAt(d, op.Position)
				switch {
				case !ok:
					l.c.add(AckedAppend, where, "acknowledged at position %d, which member %s lacks", op.Position, d.Member)
				case string(e.Data) != string(op.Data):
					l.c.add(AckedAppend, where, "acknowledged at position %d, where member %s holds %s", op.Position, d.Member, short(string(e.Data)))
				}
			}
		}
	}
}

// entryAt returns d's entry at position p.
func entryAt(d LogDump, p uint64) (Entry, bool) {
	if p >= d.Trim {
		if k := p - d.Trim; k < uint64(len(d.Entries)) && d.Entries[k].Position == p {
			return d.Entries[k], true
		}
	}
	for _, e := range d.Entries {
		if e.Position == p {
			return e, true
		}
	}
	return Entry{}, false
}

// observe records that where saw data at position p, and reports a
// change if something else was seen there before.
func (l *logChecker) observe(p uint64, data []byte, where string) {
	if h, ok := l.seen[p]; !ok {
		l.seen[p] = held{string(data), where}
	} else if h.data != string(data) {
		l.c.add(Immutable, fmt.Sprintf("position %d", p), "%s saw %s, %s saw %s", h.where, short(h.data), where, short(string(data)))
	}
}

// checkFound checks an entry that op i read at position p.
func (l *logChecker) checkFound(i int, p uint64, data []byte, prop Property) {
	op := l.ops[i]
	where := op.describe(i)
	l.observe(p, data, where)
	if h, ok := l.final[p]; ok && h.data != string(data) {
		l.c.add(ReadConsistent, where, "read %s at position %d, where %s holds %s at the end", short(string(data)), p, h.where, short(h.data))
	} else if !ok && l.dumped && p >= l.lowestTrim {
		l.c.add(ReadConsistent, where, "read %s at position %d, which no member holds at the end (tails up to %d)", short(string(data)), p, l.finalTail)
	}
	j, ok := l.appendOf[string(data)]
	switch {
	case !ok:
		l.c.add(ReadConsistent, where, "read %s at position %d, which nobody appended", short(string(data)), p)
	case l.ops[j].Outcome == Fail:
		l.c.add(ReadConsistent, where, "read at position %d the entry of %s, which failed", p, l.ops[j].describe(j))
	case l.ops[j].Outcome == OK && l.ops[j].Position != p:
		l.c.add(ReadConsistent, where, "read at position %d the entry of %s, acknowledged at position %d", p, l.ops[j].describe(j), l.ops[j].Position)
	case l.ops[j].Invoke > op.Complete:
		l.c.add(ReadConsistent, where, "read at position %d the entry of %s, invoked only after the read completed", p, l.ops[j].describe(j))
	case op.Kind == ReadStream && !slices.Contains(l.ops[j].Streams, op.Stream):
		l.c.add(prop, where, "returned position %d, whose append (%s) names streams %v, not %q", p, l.ops[j].describe(j), l.ops[j].Streams, op.Stream)
	}
}

// checkReads checks what reads, ranges and stream reads returned.
func (l *logChecker) checkReads() {
	for _, i := range l.valid {
		op := l.ops[i]
		if op.Outcome != OK {
			continue
		}
		where := op.describe(i)
		switch op.Kind {
		case Read:
			switch op.Status {
			case Found:
				l.checkFound(i, op.Position, op.Data, ReadConsistent)
			case Unwritten:
				acked, _ := l.ackedBefore.before(op.Invoke)
				tail, _ := l.tailsBefore.before(op.Invoke)
				switch {
				case op.Position < acked:
					l.c.add(ReadConsistent, where, "position %d reported unwritten, but position %d was acknowledged before the read began", op.Position, acked-1)
				case op.Position < tail:
					l.c.add(ReadConsistent, where, "position %d reported unwritten, but a tail of %d was returned before the read began", op.Position, tail)
				}
			case Trimmed:
				if !l.trimReached(op.Position, op.Complete) {
					l.c.add(TrimRespected, where, "position %d reported trimmed, but no trim invoked before the read completed reached it", op.Position)
				}
			}
		case ReadRange, ReadStream:
			prop := ReadConsistent
			if op.Kind == ReadStream {
				prop = StreamFiltered
			}
			for k, e := range op.Entries {
				switch {
				case e.Position < op.From || op.Kind == ReadRange && e.Position >= op.To:
					l.c.add(prop, where, "returned position %d, out of the bounds asked", e.Position)
				case k > 0 && e.Position <= op.Entries[k-1].Position:
					l.c.add(prop, where, "returned position %d after position %d", e.Position, op.Entries[k-1].Position)
				}
				l.checkFound(i, e.Position, e.Data, prop)
			}
		}
	}
}

// checkCompleteness checks that ranges and stream reads left out no
// entry they should have returned.
func (l *logChecker) checkCompleteness() {
	// Every position whose bytes are known, in order.
	known := make(map[uint64]string)
	for p, h := range l.seen {
		known[p] = h.data
	}
	for p, h := range l.final {
		known[p] = h.data
	}
	positions := slices.Sorted(maps.Keys(known))
	for _, i := range l.valid {
		op := l.ops[i]
		if op.Outcome != OK || op.Kind != ReadRange && op.Kind != ReadStream {
			continue
		}
		where := op.describe(i)
		prop := ReadConsistent
		if op.Kind == ReadStream {
			prop = StreamFiltered
		}
		// belongs reports whether the entry with data at p belongs to
		// what op reads.
		belongs := func(p uint64, data string) bool {
			if p < op.From || op.Kind == ReadRange && p >= op.To {
				return false
			}
			if op.Kind == ReadRange {
				return true
			}
			j, ok := l.appendOf[data]
			return ok && slices.Contains(l.ops[j].Streams, op.Stream)
		}
		if len(op.Entries) == 0 {
			for _, j := range l.acked {
				a := l.ops[j]
				if a.Complete < op.Invoke && belongs(a.Position, string(a.Data)) && !l.trimReached(a.Position, op.Complete) {
					l.c.add(prop, where, "returned nothing, but %s was acknowledged at position %d before the read began", a.describe(j), a.Position)
					break
				}
			}
			continue
		}
		returned := make(map[uint64]bool, len(op.Entries))
		last := op.From
		for _, e := range op.Entries {
			returned[e.Position] = true
			last = max(last, e.Position)
		}
		from := sort.Search(len(positions), func(k int) bool { return positions[k] >= op.From })
		for _, p := range positions[from:] {
			if p > last {
				break
			}
			if !returned[p] && belongs(p, known[p]) && !l.trimReached(p, op.Complete) {
				l.c.add(prop, where, "left out position %d (%s) among the positions it returned, up to %d", p, short(known[p]), last)
				break
			}
		}
	}
}

// checkTails checks the tails returned.
func (l *logChecker) checkTails() {
	for _, i := range l.valid {
		op := l.ops[i]
		if op.Kind != Tail || op.Outcome != OK {
			continue
		}
		where := op.describe(i)
		if a, _ := l.ackedBefore.before(op.Invoke); op.Tail < a {
			l.c.add(TailMonotonic, where, "tail %d, but position %d was acknowledged before it was asked", op.Tail, a-1)
		}
		if b, _ := l.tailsBefore.before(op.Invoke); op.Tail < b {
			l.c.add(TailMonotonic, where, "tail %d, but a tail of %d was returned before it was asked", op.Tail, b)
		}
		if n := l.invoked.upTo(op.Complete); uint64(n) < op.Tail {
			l.c.add(TailMonotonic, where, "tail %d, but only %d appends were invoked by then", op.Tail, n)
		}
		if l.dumped && op.Tail > l.finalTail {
			l.c.add(ReadConsistent, where, "tail %d, beyond every member's tail at the end (%d)", op.Tail, l.finalTail)
		}
	}
}

// checkTrims checks the trims and the members' trim points.
func (l *logChecker) checkTrims(dumps []LogDump) {
	var acked uint64
	for _, i := range l.valid {
		op := l.ops[i]
		if op.Kind != Trim || op.Outcome != OK {
			continue
		}
		if asked, _ := l.trimsAsked.atOrBefore(op.Complete); op.TrimPoint > asked {
			l.c.add(TrimRespected, op.describe(i), "reported trim point %d, beyond what every trim invoked before it completed asked (%d)", op.TrimPoint, asked)
		}
		acked = max(acked, op.TrimPoint)
	}
	asked, _ := l.trimsAsked.atOrBefore(maxTime)
	for _, d := range dumps {
		where := "member " + d.Member
		switch {
		case d.Trim < acked:
			l.c.add(TrimRespected, where, "keeps positions from %d on, below the acknowledged trim point %d", d.Trim, acked)
		case d.Trim > asked:
			l.c.add(TrimRespected, where, "trimmed before position %d, but no trim asked beyond %d", d.Trim, asked)
		}
	}
}

// maxTime is at or after every time of a history.
const maxTime = math.MaxInt64

// short quotes data, cut to a readable length.
func short(data string) string {
	const limit = 40
	if len(data) > limit {
		return fmt.Sprintf("%q...", data[:limit])
	}
	return fmt.Sprintf("%q", data)
}
