package membership

import (
	"errors"
	"fmt"
)

// Detector messages travel as one 64-bit immediate value each (a transport
// signal, no buffer):
//
//	bits 63–61  kind (1 heartbeat, 2 probe, 3 probe reply)
//	bit  60     alive (probe replies)
//	bits 59–46  suspect rank (probes and replies)
//	bits 45–0   frontier (heartbeats): the low 46 bits of the sender's
//	            receive frontier in units of 1024 ns
//
// The sender's rank is implied by the connection. A receiver restores the
// frontier's high bits from its own frontier, taking the value closest to
// it, so frontiers compare correctly while members are within 2^45 units
// (about 400 days) of each other.
const (
	frontierBits = 46
	frontierMask = 1<<frontierBits - 1
	rankBits     = 14
	// MaxRanks bounds the size of a view whose detector messages fit.
	MaxRanks = 1 << rankBits
)

// ErrBadSignal is wrapped by every error decoding a detector signal.
var ErrBadSignal = errors.New("membership: malformed detector signal")

// FrontierUnits converts a receive frontier (a timestamp in nanoseconds)
// into the units detector messages carry.
func FrontierUnits(ts uint64) uint64 { return ts >> 10 }

// EncodeSignal encodes m (From and To are not carried).
func EncodeSignal(m Message) uint64 {
	v := uint64(m.Kind&7) << 61
	if m.Alive {
		v |= 1 << 60
	}
	v |= uint64(uint32(m.Suspect)&(MaxRanks-1)) << frontierBits
	return v | m.Frontier&frontierMask
}

// DecodeSignal decodes a signal from rank from in a view of n members, to
// rank to, whose own frontier (in FrontierUnits) is local.
func DecodeSignal(imm uint64, from, to, n int, local uint64) (Message, error) {
	m := Message{
		Kind:    MsgKind(imm >> 61),
		Alive:   imm>>60&1 == 1,
		Suspect: int(imm >> frontierBits & (MaxRanks - 1)),
		From:    from,
		To:      to,
	}
	switch m.Kind {
	case MsgHeartbeat:
		if imm>>frontierBits&(1<<15-1) != 0 {
			return Message{}, fmt.Errorf("%w: heartbeat with suspect or alive bits set (%#x)", ErrBadSignal, imm)
		}
		m.Frontier = unwrapFrontier(imm&frontierMask, local)
	case MsgProbe, MsgProbeReply:
		if imm&frontierMask != 0 || m.Suspect >= n || (m.Kind == MsgProbe && m.Alive) {
			return Message{}, fmt.Errorf("%w: %v %#x in a view of %d", ErrBadSignal, m.Kind, imm, n)
		}
	default:
		return Message{}, fmt.Errorf("%w: kind %d", ErrBadSignal, imm>>61)
	}
	return m, nil
}

// unwrapFrontier returns the value with low bits low that is closest to
// local.
func unwrapFrontier(low, local uint64) uint64 {
	v := local&^frontierMask | low
	const span = 1 << frontierBits
	switch {
	case v > local && v-local > span/2 && v >= span:
		v -= span
	case v < local && local-v > span/2:
		v += span
	}
	return v
}
