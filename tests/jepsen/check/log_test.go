package check

import (
	"slices"
	"testing"
)

func logOp(cl int, inv, comp int64, kind LogKind) LogOp {
	return LogOp{Client: cl, Kind: kind, Invoke: inv, Complete: comp, Outcome: OK}
}

func appendOp(cl int, inv, comp int64, data string, pos uint64, streams ...string) LogOp {
	op := logOp(cl, inv, comp, Append)
	op.Data, op.Position, op.Streams, op.RequestID = []byte(data), pos, streams, "req-"+data
	return op
}

func readOp(cl int, inv, comp int64, pos uint64, status ReadStatus, data string) LogOp {
	op := logOp(cl, inv, comp, Read)
	op.Position, op.Status = pos, status
	if data != "" {
		op.Data = []byte(data)
	}
	return op
}

func tailOp(cl int, inv, comp int64, tail uint64) LogOp {
	op := logOp(cl, inv, comp, Tail)
	op.Tail = tail
	return op
}

func trimOp(cl int, inv, comp int64, before, point uint64) LogOp {
	op := logOp(cl, inv, comp, Trim)
	op.Before, op.TrimPoint = before, point
	return op
}

func rangeOp(cl int, inv, comp int64, from, to uint64, entries ...Entry) LogOp {
	op := logOp(cl, inv, comp, ReadRange)
	op.From, op.To, op.Entries = from, to, entries
	return op
}

func streamOp(cl int, inv, comp int64, stream string, from uint64, entries ...Entry) LogOp {
	op := logOp(cl, inv, comp, ReadStream)
	op.Stream, op.From, op.Entries = stream, from, entries
	return op
}

func ent(pos uint64, data string) Entry { return Entry{Position: pos, Data: []byte(data)} }

func unknownOp(op LogOp) LogOp {
	op.Outcome, op.Complete = Unknown, 0
	op.Position, op.Status, op.Entries, op.Tail, op.TrimPoint = 0, "", nil, 0, 0
	return op
}

func failedOp(op LogOp) LogOp {
	op.Outcome = Fail
	op.Position, op.Status, op.Entries, op.Tail, op.TrimPoint = 0, "", nil, 0, 0
	return op
}

// goodLog is a correct run: four appends, one of unknown outcome that
// took effect and one that did not, reads, ranges, streams, tails, a
// trim acknowledged and one of unknown outcome, and a failed append.
// Indexes in the comments are those the corruptions refer to.
func goodLog() ([]LogOp, []LogDump) {
	ops := []LogOp{
		appendOp(0, 0, 1, "a", 0, "s1"),                                 // 0
		appendOp(1, 2, 3, "b", 1, "s2"),                                 // 1
		unknownOp(appendOp(2, 4, 0, "c", 0, "s1", "s2")),                // 2: lands at 2
		unknownOp(appendOp(3, 4, 0, "d", 0, "s1")),                      // 3: never lands
		readOp(0, 5, 6, 0, Found, "a"),                                  // 4
		readOp(1, 5, 6, 5, Unwritten, ""),                               // 5
		tailOp(0, 7, 8, 3),                                              // 6
		rangeOp(0, 9, 10, 0, 10, ent(0, "a"), ent(1, "b"), ent(2, "c")), // 7
		streamOp(1, 9, 10, "s1", 0, ent(0, "a"), ent(2, "c")),           // 8
		streamOp(2, 9, 10, "s2", 2, ent(2, "c")),                        // 9
		appendOp(0, 11, 12, "e", 3),                                     // 10
		trimOp(1, 13, 14, 1, 1),                                         // 11
		readOp(1, 15, 16, 0, Trimmed, ""),                               // 12
		failedOp(appendOp(2, 15, 16, "f", 0, "s1")),                     // 13
		streamOp(1, 17, 18, "s1", 0, ent(2, "c")),                       // 14
		readOp(0, 17, 18, 3, Found, "e"),                                // 15
		unknownOp(trimOp(3, 19, 0, 100, 0)),                             // 16
		tailOp(2, 19, 20, 4),                                            // 17
	}
	dump := func(m string) LogDump {
		return LogDump{Member: m, Trim: 1, Tail: 4, Entries: []Entry{ent(1, "b"), ent(2, "c"), ent(3, "e")}}
	}
	return ops, []LogDump{dump("m1"), dump("m2"), dump("m3")}
}

func TestCheckLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change plants a violation in a correct run.
		change func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump)
		want   Property   // "" for a correct history
		also   []Property // other properties the change may break too
	}{
		{name: "correct", change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) { return ops, dumps }},
		{name: "correct without dumps", change: func(ops []LogOp, _ []LogDump) ([]LogOp, []LogDump) { return ops, nil }},
		{name: "correct: histories cut short by kill -9", change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			// Client 2 was killed after its unknown append: its later
			// operations were never recorded.
			return slices.DeleteFunc(ops, func(op LogOp) bool { return op.Client == 2 && op.Invoke > 4 }), dumps
		}},
		{name: "correct: the unknown append of c never lands", change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			// Nobody read c; d took position 2 instead.
			ops = slices.DeleteFunc(ops, func(op LogOp) bool { return op.Kind == ReadRange || op.Kind == ReadStream })
			for i := range dumps {
				dumps[i].Entries[1] = ent(2, "d")
			}
			return ops, dumps
		}},
		{name: "correct: a trim below the trim point reports the trim point", change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			return append(ops, trimOp(2, 17, 18, 0, 1)), dumps
		}},
		{name: "lost acknowledged append", want: AckedAppend, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[1].Entries, dumps[1].Tail = dumps[1].Entries[:2], 3
			return ops, dumps
		}},
		{name: "acknowledged append with other bytes", want: AckedAppend, also: []Property{Immutable, NoPhantom}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			for i := range dumps {
				dumps[i].Entries[2] = ent(3, "x")
			}
			ops = slices.Delete(ops, 15, 16) // the read of e
			return ops, dumps
		}},
		{name: "position contents changed between reads", want: Immutable, also: []Property{ReadConsistent}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			return append(ops, readOp(3, 21, 22, 2, Found, "d")), dumps
		}},
		{name: "members disagree on a position", want: Immutable, also: []Property{ReadConsistent}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[2].Entries[1] = ent(2, "d")
			return ops, dumps
		}},
		{name: "phantom entry", want: NoPhantom, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[2].Entries, dumps[2].Tail = append(dumps[2].Entries, ent(4, "zzz")), 5
			return ops, dumps
		}},
		{name: "failed append appears", want: NoPhantom, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			for i := range dumps {
				dumps[i].Entries, dumps[i].Tail = append(dumps[i].Entries, ent(4, "f")), 5
			}
			return ops, dumps
		}},
		{name: "unknown append applied twice", want: UniquePosition, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			for i := range dumps {
				dumps[i].Entries, dumps[i].Tail = append(dumps[i].Entries, ent(4, "d"), ent(5, "d")), 6
			}
			return ops, dumps
		}},
		{name: "two appends acknowledged at one position", want: UniquePosition, also: []Property{AckedAppend, Immutable}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[10].Position = 1
			ops = slices.Delete(ops, 15, 16) // the read of e
			return ops, dumps
		}},
		{name: "position beyond the appends invoked", want: Dense, also: []Property{AckedAppend}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[0].Position = 7
			return ops[:1], nil
		}},
		{name: "gap in a member's log", want: Dense, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[0].Entries = slices.Delete(dumps[0].Entries, 1, 2)
			return ops, dumps
		}},
		{name: "stale unwritten read", want: ReadConsistent, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[5].Position = 1
			return ops, dumps
		}},
		{name: "read of bytes nobody appended", want: ReadConsistent, also: []Property{Immutable}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[15].Data = []byte("zzz")
			return ops, dumps
		}},
		{name: "read contradicts the final logs", want: ReadConsistent, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			// d was read at 4, but no member holds position 4.
			return append(ops, readOp(3, 21, 22, 4, Found, "d")), dumps
		}},
		{name: "range leaves a position out", want: ReadConsistent, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[7].Entries = slices.Delete(ops[7].Entries, 1, 2)
			return ops, dumps
		}},
		{name: "tail below an acknowledged position", want: TailMonotonic, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[6].Tail = 1
			return ops, dumps
		}},
		{name: "tail goes back", want: TailMonotonic, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			return append(ops, tailOp(1, 21, 22, 3)), dumps
		}},
		{name: "tail beyond the appends", want: TailMonotonic, also: []Property{ReadConsistent}, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[6].Tail = 10
			return ops, dumps
		}},
		{name: "stream holds another stream's entry", want: StreamFiltered, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[8].Entries = []Entry{ent(0, "a"), ent(1, "b"), ent(2, "c")}
			return ops, dumps
		}},
		{name: "stream skips an entry", want: StreamFiltered, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[8].Entries = ops[8].Entries[1:]
			return ops, dumps
		}},
		{name: "empty stream read misses an acknowledged entry", want: StreamFiltered, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[9].From, ops[9].Entries = 0, nil
			return ops, dumps
		}},
		{name: "stream out of order", want: StreamFiltered, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[8].Entries = []Entry{ent(2, "c"), ent(0, "a")}
			return ops, dumps
		}},
		{name: "trimmed without a trim", want: TrimRespected, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[12].Invoke, ops[12].Complete = 5, 6
			return ops, dumps
		}},
		{name: "member keeps what an acknowledged trim dropped", want: TrimRespected, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[2].Trim, dumps[2].Entries = 0, append([]Entry{ent(0, "a")}, dumps[2].Entries...)
			return ops, dumps
		}},
		{name: "member trims beyond every trim asked", want: TrimRespected, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[0].Trim, dumps[0].Entries = 2, dumps[0].Entries[1:]
			return slices.Delete(ops, 16, 17), dumps
		}},
		{name: "trim point beyond what was asked", want: TrimRespected, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			ops[11].TrimPoint = 2
			return ops, dumps
		}},
		{name: "unknown kind", want: Wellformed, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			return append(ops, LogOp{Kind: "seal", Outcome: OK}), dumps
		}},
		{name: "appends with the same data", want: Wellformed, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dup := failedOp(appendOp(3, 30, 31, "a", 0))
			dup.RequestID = "another"
			return append(ops, dup), dumps
		}},
		{name: "dump beyond its tail", want: Dense, change: func(ops []LogOp, dumps []LogDump) ([]LogOp, []LogDump) {
			dumps[0].Trim = 9
			return ops, dumps
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, dumps := tc.change(goodLog())
			r := CheckLog(ops, dumps)
			expectOnly(t, r, tc.want, tc.also...)
		})
	}
}
