package barrier

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// promiseOp is one input to a Promises: a complete message (hold) or a
// beacon, and the sentinel error it must fail with (nil: accepted).
type promiseOp struct {
	beacon bool
	rank   int
	seq    uint64 // message sequence number, or the beacon's n
	ts     Timestamp
	err    error
}

func hold(rank int, seq uint64, ts Timestamp) promiseOp {
	return promiseOp{rank: rank, seq: seq, ts: ts}
}

func beaconOp(rank int, n uint64, t Timestamp) promiseOp {
	return promiseOp{beacon: true, rank: rank, seq: n, ts: t}
}

// fails marks op as one that must be rejected with err.
func (op promiseOp) fails(err error) promiseOp {
	op.err = err
	return op
}

func (op promiseOp) String() string {
	if op.beacon {
		return fmt.Sprintf("Beacon(%d, %d, %d)", op.rank, op.seq, op.ts)
	}
	return fmt.Sprintf("Hold(%d, %d, %d)", op.rank, op.seq, op.ts)
}

func (op promiseOp) apply(p *Promises) error {
	if op.beacon {
		return p.Beacon(op.rank, op.seq, op.ts)
	}
	return p.Hold(op.rank, op.seq, op.ts)
}

// promisesState is what a Promises shows: per sender, the held prefix and
// the promise in force, and the frontier over all senders.
type promisesState struct {
	held     []uint64
	applied  []Timestamp
	frontier Timestamp
}

func stateOf(p *Promises, senders int) promisesState {
	s := promisesState{frontier: p.Frontier()}
	for i := 0; i < senders; i++ {
		s.held = append(s.held, p.Held(i))
		s.applied = append(s.applied, p.Applied(i))
	}
	return s
}

func (s promisesState) String() string {
	return fmt.Sprintf("held=%v applied=%v frontier=%d", s.held, s.applied, s.frontier)
}

func TestPromises(t *testing.T) {
	tests := []struct {
		name    string
		senders int
		window  uint64 // 0 means 1<<20
		ops     []promiseOp
		// The state after the last operation.
		held     []uint64
		applied  []Timestamp
		frontier Timestamp
	}{
		{
			name:    "a data message is its own beacon (seq, ts+1)",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10)},
			held:    []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "in-order holds",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), hold(0, 2, 20), hold(0, 3, 30)},
			held:    []uint64{3}, applied: []Timestamp{31}, frontier: 31,
		},
		{
			name:    "a beacon after message 0 applies at once",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 0, 7)},
			held:    []uint64{0}, applied: []Timestamp{7}, frontier: 7,
		},
		{
			name:    "a beacon for a held prefix applies at once",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(0, 1, 40)},
			held:    []uint64{1}, applied: []Timestamp{40}, frontier: 40,
		},
		{
			// Rule 1: (2, 50) must wait for messages 1 and 2.
			name:    "a beacon waits while message 1 of 1..n is missing",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 2, 50), hold(0, 2, 20)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "a beacon waits while message n of 1..n is missing",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 2, 50), hold(0, 1, 10)},
			held:    []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "a beacon applies once messages 1..n are held",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 2, 50), hold(0, 2, 20), hold(0, 1, 10)},
			held:    []uint64{2}, applied: []Timestamp{50}, frontier: 50,
		},
		{
			name:    "a beacon for a later n does not apply early",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(0, 3, 60), hold(0, 2, 20)},
			held:    []uint64{2}, applied: []Timestamp{21}, frontier: 21,
		},
		{
			name:    "out-of-order holds wait in the early set",
			senders: 1,
			ops:     []promiseOp{hold(0, 3, 30), hold(0, 2, 20)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "the early set drains when the gap fills",
			senders: 1,
			ops:     []promiseOp{hold(0, 3, 30), hold(0, 2, 20), hold(0, 1, 10)},
			held:    []uint64{3}, applied: []Timestamp{31}, frontier: 31,
		},
		{
			name:    "the early set drains only up to the next gap",
			senders: 1,
			ops:     []promiseOp{hold(0, 2, 20), hold(0, 4, 40), hold(0, 1, 10)},
			held:    []uint64{2}, applied: []Timestamp{21}, frontier: 21,
		},
		{
			name:    "a beacon bound to an early message applies with it",
			senders: 1,
			ops:     []promiseOp{hold(0, 2, 20), beaconOp(0, 2, 25), hold(0, 1, 10)},
			held:    []uint64{2}, applied: []Timestamp{25}, frontier: 25,
		},
		{
			name:    "a message at the edge of the window is accepted",
			senders: 1, window: 4,
			ops:  []promiseOp{hold(0, 1, 10), hold(0, 5, 50)},
			held: []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "a message stamped at the applied promise is accepted",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(0, 1, 40), hold(0, 2, 40)},
			held:    []uint64{2}, applied: []Timestamp{41}, frontier: 41,
		},
		{
			name:    "a repeated promise is not backwards",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 0, 40), beaconOp(0, 0, 40)},
			held:    []uint64{0}, applied: []Timestamp{40}, frontier: 40,
		},
		{
			name:    "the frontier is the minimum over senders",
			senders: 3,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(1, 0, 50), beaconOp(2, 0, 30)},
			held:    []uint64{1, 0, 0}, applied: []Timestamp{11, 50, 30}, frontier: 11,
		},
		{
			name:    "the frontier follows the lowest sender",
			senders: 3,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(1, 0, 50), beaconOp(2, 0, 30), hold(0, 2, 60)},
			held:    []uint64{2, 0, 0}, applied: []Timestamp{61, 50, 30}, frontier: 30,
		},
		{
			name:    "a silent sender holds the frontier at zero",
			senders: 3,
			ops:     []promiseOp{beaconOp(0, 0, 50), beaconOp(1, 0, 50)},
			held:    []uint64{0, 0, 0}, applied: []Timestamp{50, 50, 0}, frontier: 0,
		},
		{
			name:     "no senders: the frontier is infinite",
			senders:  0,
			frontier: Infinity,
		},

		// Rejections. Each leaves the state as it was.
		{
			name:    "duplicate of a held message",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), hold(0, 1, 10).fails(ErrDuplicate)},
			held:    []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "duplicate of an early message",
			senders: 1,
			ops:     []promiseOp{hold(0, 3, 30), hold(0, 3, 30).fails(ErrDuplicate)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "sequence number 0",
			senders: 1,
			ops:     []promiseOp{hold(0, 0, 10).fails(ErrDuplicate)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "sequence gap beyond the window",
			senders: 1, window: 4,
			ops:  []promiseOp{hold(0, 1, 10), hold(0, 6, 60).fails(ErrSequenceGap)},
			held: []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "beacon beyond the window",
			senders: 1, window: 4,
			ops:  []promiseOp{hold(0, 1, 10), beaconOp(0, 6, 60).fails(ErrSequenceGap)},
			held: []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "stamp below the applied promise",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(0, 1, 40), hold(0, 2, 30).fails(ErrBelowPromise)},
			held:    []uint64{1}, applied: []Timestamp{40}, frontier: 40,
		},
		{
			name:    "early message stamped below the applied promise",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(0, 1, 40), hold(0, 3, 30).fails(ErrBelowPromise)},
			held:    []uint64{1}, applied: []Timestamp{40}, frontier: 40,
		},
		{
			name:    "stamp below a pending promise for an earlier n",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 1, 40), hold(0, 2, 30).fails(ErrBelowPromise)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "stamp below the pending own beacon of an early message",
			senders: 1,
			ops:     []promiseOp{hold(0, 2, 30), hold(0, 3, 20).fails(ErrBelowPromise)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			// Message 3 held out of order, then 2 stamped above it: each
			// sender's stamps increase with its sequence numbers.
			name:    "an early message's predecessor stamped above it",
			senders: 1,
			ops:     []promiseOp{hold(0, 3, 20), hold(0, 2, 30).fails(ErrBackwards)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "an early message's predecessor stamped as it",
			senders: 1,
			ops:     []promiseOp{hold(0, 2, 20), hold(0, 1, 20).fails(ErrBackwards)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "a message stamped at a later promise of its sender",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 2, 40), hold(0, 2, 40).fails(ErrBackwards), hold(0, 1, 50).fails(ErrBackwards)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			// A pending (n, T) says nothing of messages up to n.
			name:    "a pending promise does not bind messages up to its n",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 2, 40), hold(0, 2, 30), hold(0, 1, 10)},
			held:    []uint64{2}, applied: []Timestamp{40}, frontier: 40,
		},
		{
			name:    "promise going backwards",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 0, 40), beaconOp(0, 0, 30).fails(ErrBackwards)},
			held:    []uint64{0}, applied: []Timestamp{40}, frontier: 40,
		},
		{
			name:    "pending promise going backwards",
			senders: 1,
			ops:     []promiseOp{beaconOp(0, 2, 40), beaconOp(0, 3, 30).fails(ErrBackwards)},
			held:    []uint64{0}, applied: []Timestamp{0}, frontier: 0,
		},
		{
			name:    "promise below a message's own beacon",
			senders: 1,
			ops:     []promiseOp{hold(0, 1, 10), beaconOp(0, 1, 5).fails(ErrBackwards)},
			held:    []uint64{1}, applied: []Timestamp{11}, frontier: 11,
		},
		{
			name:    "unknown rank",
			senders: 2,
			ops: []promiseOp{
				hold(2, 1, 10).fails(ErrUnknownMember),
				hold(-1, 1, 10).fails(ErrUnknownMember),
				beaconOp(2, 0, 10).fails(ErrUnknownMember),
				beaconOp(-1, 0, 10).fails(ErrUnknownMember),
			},
			held: []uint64{0, 0}, applied: []Timestamp{0, 0}, frontier: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			window := tt.window
			if window == 0 {
				window = 1 << 20
			}
			p := NewPromises(tt.senders, window)
			for _, op := range tt.ops {
				before := stateOf(p, tt.senders)
				err := op.apply(p)
				switch {
				case op.err == nil && err != nil:
					t.Fatalf("%v: %v", op, err)
				case op.err != nil && !errors.Is(err, op.err):
					t.Fatalf("%v: got error %v, want %v", op, err, op.err)
				case op.err != nil:
					if after := stateOf(p, tt.senders); after.String() != before.String() {
						t.Fatalf("%v rejected but changed the state: %v, was %v", op, after, before)
					}
				}
			}
			got := stateOf(p, tt.senders)
			want := promisesState{held: tt.held, applied: tt.applied, frontier: tt.frontier}
			if got.String() != want.String() {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestPromisesRandom feeds honest senders' messages and beacons to a
// Promises in the orders the network produces — records in send order,
// except that a large message may be overtaken by anything its sender sent
// after it — and checks, after every step, the meaning of the promises
// against what was actually sent: every message stamped below the frontier
// is held, and every message not yet held is stamped at or above its
// sender's promise in force (a beacon counts only once its sender's
// messages up to the one it follows are held). At the end every
// message is held and every sender's last promise is in force.
func TestPromisesRandom(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		if err := runRandomPromises(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

type sentMsg struct {
	seq uint64
	ts  Timestamp
}

type sentEvent struct {
	op    promiseOp
	large bool
}

func runRandomPromises(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0))
	senders := 1 + r.IntN(4)
	p := NewPromises(senders, 1<<20)
	var (
		sent     = make([][]sentMsg, senders)
		queue    = make([][]sentEvent, senders) // in send order
		behind   = make([][]sentEvent, senders) // large messages overtaken
		received = make([]map[uint64]bool, senders)
		last     = make([]Timestamp, senders) // highest promise made
		clock    = make([]Timestamp, senders)
	)
	for i := range received {
		received[i] = make(map[uint64]bool)
		clock[i] = Timestamp(r.IntN(50))
	}
	check := func() error {
		f := p.Frontier()
		for i := range sent {
			for _, m := range sent[i] {
				if m.ts < f && m.seq > p.Held(i) {
					return fmt.Errorf("frontier %d, but sender %d message %d stamped %d is not held (held %d)", f, i, m.seq, m.ts, p.Held(i))
				}
				if !received[i][m.seq] && m.ts < p.Applied(i) {
					return fmt.Errorf("sender %d promise %d in force, but its message %d stamped %d is not held", i, p.Applied(i), m.seq, m.ts)
				}
			}
		}
		return nil
	}
	step := func(i int, e sentEvent) error {
		if err := e.op.apply(p); err != nil {
			return fmt.Errorf("%v rejected: %w", e.op, err)
		}
		if !e.op.beacon {
			received[i][e.op.seq] = true
		}
		return check()
	}
	for steps := 0; steps < 200; steps++ {
		i := r.IntN(senders)
		switch a := r.IntN(10); {
		case a < 4: // send a message, stamped at or above every promise made
			clock[i] = max(clock[i]+Timestamp(1+r.IntN(5)), last[i])
			seq := uint64(len(sent[i]) + 1)
			sent[i] = append(sent[i], sentMsg{seq, clock[i]})
			last[i] = max(last[i], clock[i]+1)
			queue[i] = append(queue[i], sentEvent{op: hold(i, seq, clock[i]), large: r.IntN(3) == 0})
		case a < 6: // beacon: nothing after the last message is below T
			clock[i] += Timestamp(r.IntN(5))
			t := max(clock[i]+1, last[i])
			last[i] = t
			queue[i] = append(queue[i], sentEvent{op: beaconOp(i, uint64(len(sent[i])), t)})
		case a < 9: // the next record in send order arrives, or falls behind
			if len(queue[i]) == 0 {
				continue
			}
			e := queue[i][0]
			queue[i] = queue[i][1:]
			if e.large && r.IntN(2) == 0 {
				behind[i] = append(behind[i], e)
				continue
			}
			if err := step(i, e); err != nil {
				return err
			}
		default: // an overtaken large message completes
			if len(behind[i]) > 0 {
				k := r.IntN(len(behind[i]))
				if err := step(i, behind[i][k]); err != nil {
					return err
				}
				behind[i] = append(behind[i][:k], behind[i][k+1:]...)
			}
		}
	}
	for i := range queue {
		for _, e := range append(queue[i], behind[i]...) {
			if err := step(i, e); err != nil {
				return err
			}
		}
	}
	for i := range sent {
		if p.Held(i) != uint64(len(sent[i])) {
			return fmt.Errorf("sender %d: %d of %d messages held at the end", i, p.Held(i), len(sent[i]))
		}
		if p.Applied(i) != last[i] {
			return fmt.Errorf("sender %d: promise %d in force at the end, want %d", i, p.Applied(i), last[i])
		}
	}
	return nil
}

// TestPromisesLargeMessageAheadOfBeacon: large and small messages travel
// separately (multicast's block and batched paths), so a large message
// may also complete before a beacon its sender sent ahead of it on the
// small path. The beacon is then stale — the message's own beacon (seq, ts+1) already promises more —
// but it is honest and bound to an earlier n; it is rejected as going
// backwards all the same.
func TestPromisesLargeMessageAheadOfBeacon(t *testing.T) {
	p := NewPromises(1, 1<<20)
	for _, op := range []promiseOp{hold(0, 1, 10), hold(0, 2, 25), beaconOp(0, 1, 20)} {
		if err := op.apply(p); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
	}
	if got := p.Applied(0); got != 26 {
		t.Fatalf("Applied(0) = %d, want 26", got)
	}
}

// TestPromisesBeaconContradictsEarlyMessage: a beacon (n, T) that
// contradicts a message above n already held out of order is accepted,
// whereas the same two records in the other order are rejected
// (ErrBelowPromise from Hold's check of pending beacons). Once the beacon
// applies, the frontier passes the sender's message n+1 — which, stamped
// below its successor, can only be stamped below T — and that message is
// then rejected, so the sender's stream can never complete.
func TestPromisesBeaconContradictsEarlyMessage(t *testing.T) {
	p := NewPromises(1, 1<<20)
	if err := p.Hold(0, 3, 10); err != nil {
		t.Fatal(err)
	}
	if err := p.Beacon(0, 1, 50); !errors.Is(err, ErrBelowPromise) {
		t.Fatalf("Beacon(0, 1, 50) after message 3 stamped 10: got %v, want %v", err, ErrBelowPromise)
	}
}
