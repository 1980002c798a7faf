package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format of the tcp backend. Every frame is a fixed header followed by
// Length payload bytes; integers are big-endian.
//
//	offset size field
//	0      1    type: 1 data, 2 signal, 3 close-stream
//	1      3    reserved, must be zero
//	4      4    payload length (zero for signal and close-stream)
//	8      8    stream id
//	16     8    immediate value
//
// A connection starts with a hello in each direction, the dialer first:
//
//	offset size field
//	0      4    magic "CVYR"
//	4      2    protocol version (1)
//	6      2    reserved, must be zero
//	8      8    node id of the sender

// frameType is the kind of a frame.
type frameType uint8

const (
	frameData   frameType = 1 // a transfer into a posted receive buffer
	frameSignal frameType = 2 // a zero-length message carrying imm
	frameClose  frameType = 3 // the sender closed its side of the stream
)

func (t frameType) String() string {
	switch t {
	case frameData:
		return "data"
	case frameSignal:
		return "signal"
	case frameClose:
		return "close"
	}
	return fmt.Sprintf("frameType(%d)", uint8(t))
}

const (
	frameHeaderLen = 24
	helloLen       = 16
	helloMagic     = "CVYR"
	helloVersion   = 1

	// DefaultMaxFrameBytes is the default bound on one frame, header
	// included: a 16 MiB block plus the header.
	DefaultMaxFrameBytes = 16<<20 + frameHeaderLen
)

// frameHeader is a decoded frame header.
type frameHeader struct {
	typ    frameType
	length uint32
	stream StreamID
	imm    uint64
}

// encodeFrameHeader writes h into b, which must hold frameHeaderLen bytes.
func encodeFrameHeader(b []byte, h frameHeader) {
	_ = b[frameHeaderLen-1]
	b[0] = byte(h.typ)
	b[1], b[2], b[3] = 0, 0, 0
	binary.BigEndian.PutUint32(b[4:8], h.length)
	binary.BigEndian.PutUint64(b[8:16], uint64(h.stream))
	binary.BigEndian.PutUint64(b[16:24], h.imm)
}

// decodeFrameHeader parses and checks a frame header. maxPayload bounds the
// payload length. The error text describes what is wrong with the frame. If
// only the length is wrong, the returned header still holds the other
// fields.
func decodeFrameHeader(b []byte, maxPayload int) (frameHeader, error) {
	if len(b) < frameHeaderLen {
		return frameHeader{}, fmt.Errorf("short frame header: %d bytes", len(b))
	}
	h := frameHeader{
		typ:    frameType(b[0]),
		length: binary.BigEndian.Uint32(b[4:8]),
		stream: StreamID(binary.BigEndian.Uint64(b[8:16])),
		imm:    binary.BigEndian.Uint64(b[16:24]),
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return frameHeader{}, fmt.Errorf("non-zero reserved bytes %#x %#x %#x in frame header", b[1], b[2], b[3])
	}
	switch h.typ {
	case frameData:
		if int64(h.length) > int64(maxPayload) {
			return h, fmt.Errorf("data frame of %d bytes exceeds the limit of %d", h.length, maxPayload)
		}
	case frameSignal, frameClose:
		if h.length != 0 {
			return h, fmt.Errorf("%v frame with a %d-byte payload", h.typ, h.length)
		}
	default:
		return frameHeader{}, fmt.Errorf("unknown frame type %d", uint8(h.typ))
	}
	return h, nil
}

// encodeHello writes the hello of node id into b, which must hold helloLen
// bytes.
func encodeHello(b []byte, id NodeID) {
	_ = b[helloLen-1]
	copy(b[0:4], helloMagic)
	binary.BigEndian.PutUint16(b[4:6], helloVersion)
	b[6], b[7] = 0, 0
	binary.BigEndian.PutUint64(b[8:16], uint64(id))
}

// decodeHello parses and checks a hello and returns the sender's node id.
func decodeHello(b []byte) (NodeID, error) {
	if len(b) < helloLen {
		return 0, fmt.Errorf("short hello: %d bytes", len(b))
	}
	if string(b[0:4]) != helloMagic {
		return 0, errors.New("bad hello magic: not a convoy transport connection")
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != helloVersion {
		return 0, fmt.Errorf("unsupported protocol version %d (want %d)", v, helloVersion)
	}
	if b[6] != 0 || b[7] != 0 {
		return 0, errors.New("non-zero reserved bytes in hello")
	}
	return NodeID(binary.BigEndian.Uint64(b[8:16])), nil
}
