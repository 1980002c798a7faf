package membership

import (
	"errors"
	"testing"
)

func TestSignalRoundTrip(t *testing.T) {
	const (
		local = 1<<50 + 12345
		low   = 1<<50 + 10                // just above a wrap
		high  = 1<<50 + frontierMask - 10 // just below one
	)
	for _, tc := range []struct {
		local uint64
		m     Message
	}{
		{local, Message{Kind: MsgHeartbeat, Frontier: local}},
		{local, Message{Kind: MsgHeartbeat, Frontier: local - 1000}},
		{local, Message{Kind: MsgHeartbeat, Frontier: local + 1000}},
		{low, Message{Kind: MsgHeartbeat, Frontier: low - 20}},
		{high, Message{Kind: MsgHeartbeat, Frontier: high + 20}},
		{local, Message{Kind: MsgProbe, Suspect: 7}},
		{local, Message{Kind: MsgProbeReply, Suspect: 3, Alive: true}},
		{local, Message{Kind: MsgProbeReply, Suspect: 0}},
	} {
		m := tc.m
		m.From, m.To = 2, 1
		got, err := DecodeSignal(EncodeSignal(m), 2, 1, 9, tc.local)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if got != m {
			t.Errorf("round trip: %+v, want %+v", got, m)
		}
	}
}

func TestDecodeSignalRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		imm  uint64
	}{
		{"kind 0", 0},
		{"kind 7", 7 << 61},
		{"suspect outside the view", EncodeSignal(Message{Kind: MsgProbe, Suspect: 9})},
		{"alive probe", EncodeSignal(Message{Kind: MsgProbe, Alive: true})},
		{"probe with a frontier", EncodeSignal(Message{Kind: MsgProbe}) | 5},
		{"heartbeat with a suspect", EncodeSignal(Message{Kind: MsgHeartbeat}) | 1<<frontierBits},
	} {
		if _, err := DecodeSignal(tc.imm, 0, 1, 9, 0); !errors.Is(err, ErrBadSignal) {
			t.Errorf("%s: %v, want ErrBadSignal", tc.name, err)
		}
	}
}

func FuzzDecodeSignal(f *testing.F) {
	f.Add(EncodeSignal(Message{Kind: MsgHeartbeat, Frontier: 99}), uint64(100))
	f.Add(EncodeSignal(Message{Kind: MsgProbeReply, Suspect: 2, Alive: true}), uint64(0))
	f.Fuzz(func(t *testing.T, imm, local uint64) {
		m, err := DecodeSignal(imm, 1, 0, 4, local)
		if err != nil {
			return
		}
		if m.Kind == MsgHeartbeat {
			return // the frontier depends on local
		}
		if again := EncodeSignal(m); again != imm {
			t.Fatalf("decode(%#x) = %+v encodes to %#x", imm, m, again)
		}
	})
}
