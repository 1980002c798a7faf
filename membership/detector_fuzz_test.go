package membership

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzDetectorInput drives the failure detector of member 0 in an
// eight-member view with any signals its peers could send (any 64-bit
// immediate DecodeSignal accepts, from any rank), lost connections and
// the passage of time. The input is a sequence of 11-byte operations:
//
//	op byte (op%3: 0 a Tick, 1 a signal, 2 a lost connection),
//	rank byte (the signal's sender or the lost peer, any value),
//	uint64 little-endian immediate, uint8 time step in milliseconds.
//
// The detector must neither panic nor name a rank outside the view, or
// itself, in what it sends and confirms.
func FuzzDetectorInput(f *testing.F) {
	op := func(kind, rank byte, m Message, ms byte) []byte {
		b := []byte{kind, rank}
		b = binary.LittleEndian.AppendUint64(b, EncodeSignal(m))
		return append(b, ms)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	f.Add(cat(op(0, 0, Message{}, 100)))
	// Neighbours beat, one falls silent, one's connection is lost, and
	// probes are asked and answered.
	f.Add(cat(
		op(1, 1, Message{Kind: MsgHeartbeat, Frontier: 10}, 5),
		op(1, 2, Message{Kind: MsgHeartbeat, Frontier: 10}, 5),
		op(0, 0, Message{}, 200),
		op(2, 4, Message{}, 1),
		op(1, 3, Message{Kind: MsgProbe, Suspect: 5}, 1),
		op(1, 6, Message{Kind: MsgProbeReply, Suspect: 1, Alive: false}, 1),
		op(1, 7, Message{Kind: MsgProbeReply, Suspect: 4, Alive: true}, 1),
		op(0, 0, Message{}, 250),
	))
	f.Fuzz(func(t *testing.T, in []byte) {
		const members = 8
		now := int64(time.Second)
		d, err := NewDetector(DetectorConfig{Self: 0, Members: members, HeartbeatInterval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond, StallTimeout: 100 * time.Millisecond}, now)
		if err != nil {
			t.Fatal(err)
		}
		check := func() {
			rd := d.Ready()
			for _, m := range rd.Messages {
				if m.To <= 0 || m.To >= members || m.Suspect < 0 || m.Suspect >= members {
					t.Fatalf("message %+v in a view of %d", m, members)
				}
			}
			for _, v := range rd.Confirmed {
				if v.Rank <= 0 || v.Rank >= members {
					t.Fatalf("confirmed rank %d in a view of %d", v.Rank, members)
				}
			}
		}
		for ; len(in) >= 11; in = in[11:] {
			now += int64(in[10]) * int64(time.Millisecond)
			rank := int(int8(in[1]))
			switch in[0] % 3 {
			case 0:
				d.Tick(now)
			case 1:
				m, err := DecodeSignal(binary.LittleEndian.Uint64(in[2:]), rank, 0, members, uint64(now)>>10)
				if err != nil {
					continue
				}
				_ = d.Step(now, m)
			case 2:
				d.Disconnected(rank)
			}
			check()
		}
	})
}
