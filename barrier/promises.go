package barrier

import (
	"errors"
	"fmt"
	"math"
)

// Timestamp is a position in the group's timestamp order (hybrid logical
// clock values, in nanoseconds).
type Timestamp uint64

// Infinity is above every timestamp: the frontier of a member with no
// senders.
const Infinity = Timestamp(math.MaxUint64)

// Errors for input that breaks the protocol. They are returned wrapped with
// the sender and values involved; compare with errors.Is.
var (
	// ErrDuplicate: a message sequence number already held.
	ErrDuplicate = errors.New("barrier: duplicate message")
	// ErrSequenceGap: a sequence number too far ahead of the held prefix.
	ErrSequenceGap = errors.New("barrier: sequence number out of window")
	// ErrBelowPromise: a message stamped below a promise its sender made.
	ErrBelowPromise = errors.New("barrier: message stamped below its sender's promise")
	// ErrBackwards: a promise or frontier lower than one already made, or
	// a message stamped at or above a later message or promise of its
	// sender.
	ErrBackwards = errors.New("barrier: promise went backwards")
	// ErrUnknownMember: a rank outside the group.
	ErrUnknownMember = errors.New("barrier: unknown member")
)

// Promises tracks, for every sender of a group, which of its messages are
// held and which of its beacons apply. The zero value is not usable; use
// NewPromises.
type Promises struct {
	senders []senderState
	window  uint64
	// early: beacons apply at once (PlantEarlyBeacons).
	early bool
}

type senderState struct {
	// held: messages 1..held are all complete here; heldTS is the stamp
	// of message held.
	held   uint64
	heldTS Timestamp
	// early holds the stamps of messages above held+1 already complete,
	// when messages arrive out of order.
	early map[uint64]Timestamp
	// applied is the promise in force: every message of this sender not
	// yet held is stamped at or above it.
	applied Timestamp
	// pending beacons, by increasing n, wait for held ≥ n.
	pending []beacon
	// lastBeacon is the highest explicit beacon received. Explicit beacons
	// travel in order among themselves, so they never go backwards; a
	// message's own beacon may overtake them.
	lastBeacon Timestamp
}

type beacon struct {
	n uint64
	t Timestamp
}

// NewPromises tracks n senders. window bounds how far ahead of the held
// prefix a message's sequence number may be.
func NewPromises(n int, window uint64) *Promises {
	return &Promises{senders: make([]senderState, n), window: window}
}

// PlantEarlyBeacons plants a fault, for the project's own tests only
// (package plant): from now on a beacon applies at once, whether or not
// its sender's messages up to it are held.
func (p *Promises) PlantEarlyBeacons() { p.early = true }

func (p *Promises) sender(rank int) (*senderState, error) {
	if rank < 0 || rank >= len(p.senders) {
		return nil, fmt.Errorf("%w: rank %d", ErrUnknownMember, rank)
	}
	return &p.senders[rank], nil
}

// Hold records that message seq (1-based) of sender rank, stamped ts, is
// complete. A message is its own beacon: (seq, ts+1).
func (p *Promises) Hold(rank int, seq uint64, ts Timestamp) error {
	s, err := p.sender(rank)
	if err != nil {
		return err
	}
	switch _, early := s.early[seq]; {
	case seq == 0 || seq <= s.held || early:
		return fmt.Errorf("%w: sender %d message %d", ErrDuplicate, rank, seq)
	case seq > s.held+p.window:
		return fmt.Errorf("%w: sender %d message %d with %d held", ErrSequenceGap, rank, seq, s.held)
	case ts < s.applied:
		return fmt.Errorf("%w: sender %d message %d stamped %d, promised %d", ErrBelowPromise, rank, seq, ts, s.applied)
	}
	if err := p.checkPending(rank, s, seq, ts); err != nil {
		return err
	}
	if seq == s.held+1 {
		s.held, s.heldTS = seq, ts
		for {
			next, ok := s.early[s.held+1]
			if !ok {
				break
			}
			delete(s.early, s.held+1)
			s.held, s.heldTS = s.held+1, next
		}
	} else {
		if s.early == nil {
			s.early = make(map[uint64]Timestamp)
		}
		s.early[seq] = ts
	}
	s.add(beacon{seq, ts + 1}, p.early)
	return nil
}

// checkPending rejects a message that contradicts what its sender sent
// and this member holds out of order. A sender's stamps increase with its
// sequence numbers (its clock issues strictly increasing stamps), so:
//   - a beacon (n, T) with n < seq promised seq would be at or above T;
//   - a beacon (n, T) with n ≥ seq came after seq, which is below T;
//   - a message after seq already held is stamped above seq.
//
// A receiver delivers each sender's messages in sequence order and all of
// them in stamp order, which must therefore agree.
func (p *Promises) checkPending(rank int, s *senderState, seq uint64, ts Timestamp) error {
	for _, b := range s.pending {
		switch {
		case b.n < seq && ts < b.t:
			return fmt.Errorf("%w: sender %d message %d stamped %d, promised %d after message %d", ErrBelowPromise, rank, seq, ts, b.t, b.n)
		case b.n >= seq && ts >= b.t:
			return fmt.Errorf("%w: sender %d message %d stamped %d, at or above the promise %d made after message %d", ErrBackwards, rank, seq, ts, b.t, b.n)
		}
	}
	for n, t := range s.early {
		if n > seq && ts >= t {
			return fmt.Errorf("%w: sender %d message %d stamped %d, not below its message %d stamped %d", ErrBackwards, rank, seq, ts, n, t)
		}
	}
	return nil
}

// Beacon records sender rank's promise (n, t): after its message #n,
// nothing of it is stamped below t. It applies once messages 1..n are held.
func (p *Promises) Beacon(rank int, n uint64, t Timestamp) error {
	s, err := p.checkBeacon(rank, n, t)
	if err != nil {
		return err
	}
	s.lastBeacon = t
	s.add(beacon{n, t}, p.early)
	return nil
}

// CheckBeacon returns the error Beacon would return for the promise
// (n, t) of sender rank, and changes nothing: a record that carries
// promises for several senders is checked whole before any applies.
func (p *Promises) CheckBeacon(rank int, n uint64, t Timestamp) error {
	_, err := p.checkBeacon(rank, n, t)
	return err
}

// checkBeacon is CheckBeacon, returning the sender's state.
func (p *Promises) checkBeacon(rank int, n uint64, t Timestamp) (*senderState, error) {
	s, err := p.sender(rank)
	if err != nil {
		return nil, err
	}
	if t < s.lastBeacon {
		return nil, fmt.Errorf("%w: sender %d promised %d after %d", ErrBackwards, rank, t, s.lastBeacon)
	}
	// A beacon is issued after message n, so it promises more than n's stamp.
	nTS, known := s.early[n]
	if n > 0 && n == s.held {
		nTS, known = s.heldTS, true
	}
	if known && t <= nTS {
		return nil, fmt.Errorf("%w: sender %d promised %d after its message %d stamped %d", ErrBackwards, rank, t, n, nTS)
	}
	if n > s.held+p.window {
		return nil, fmt.Errorf("%w: sender %d beacon after message %d with %d held", ErrSequenceGap, rank, n, s.held)
	}
	// A message after n already held out of order must not be stamped
	// below the promise.
	for seq, ts := range s.early {
		if seq > n && ts < t {
			return nil, fmt.Errorf("%w: sender %d promised %d after message %d, but its message %d is stamped %d", ErrBelowPromise, rank, t, n, seq, ts)
		}
	}
	return s, nil
}

// add queues b and applies every pending beacon whose messages are held
// (every one, if early).
func (s *senderState) add(b beacon, early bool) {
	// Keep pending sorted by n; a beacon with a larger n and a smaller t
	// than another is redundant once both apply, so only order matters.
	i := len(s.pending)
	for i > 0 && s.pending[i-1].n > b.n {
		i--
	}
	s.pending = append(s.pending, beacon{})
	copy(s.pending[i+1:], s.pending[i:])
	s.pending[i] = b
	k := 0
	for k < len(s.pending) && (s.pending[k].n <= s.held || early) {
		if s.pending[k].t > s.applied {
			s.applied = s.pending[k].t
		}
		k++
	}
	s.pending = append(s.pending[:0], s.pending[k:]...)
}

// Applied returns the promise in force for sender rank.
func (p *Promises) Applied(rank int) Timestamp { return p.senders[rank].applied }

// Held returns how many messages of sender rank are held as a prefix.
func (p *Promises) Held(rank int) uint64 { return p.senders[rank].held }

// Frontier returns the receive frontier: the lowest promise in force over
// all senders. Every message stamped below it is held.
func (p *Promises) Frontier() Timestamp {
	f := Infinity
	for i := range p.senders {
		f = min(f, p.senders[i].applied)
	}
	return f
}
