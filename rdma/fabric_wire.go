package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format of the fabric backend. It is plain Go, built with or without
// the fabric tag, so that its encoding is tested everywhere.
//
// Connection requests carry a hello as their connection data (at most 56
// bytes, the smallest private data an RDMA connection manager carries),
// and the accepting side answers with its own hello; integers are
// big-endian:
//
//	offset size field
//	0      4    magic "CVYF"
//	4      2    protocol version (1)
//	6      1    kind: 1 control, 2 data
//	7      1    flags: bit 0 set if the sender puts immediate values in
//	            data headers; other bits zero
//	8      8    node id of the sender
//	16     8    node id the sender means to reach
//	24     8    connection generation, chosen by the connecting side of
//	            the control connection; data connections repeat it
//	32     8    stream (data connections; zero for control)
//	40     8    the connecting side's open instance of the stream
//	48     8    the accepting side's open instance of the stream
//
// A control connection carries packets of records; each packet fills one
// of the receiver's control slots:
//
//	offset size field
//	0      1    packet version (1)
//	1      1    number of records, 0 to ctrlMaxRecords
//	2      2    reserved, must be zero
//	4      4    control slots the sender freed since its last packet
//	8      32n  records
//
// and a record is
//
//	offset size field
//	0      1    type
//	1      7    reserved, must be zero
//	8      8    stream
//	16     8    a
//	24     8    b
//
// with, by type: open (a: instance; b: the records the sender had
// received on the connection when it opened it), close (a: instance; b: 0 if the
// queue pair was closed or failed, 1 if its data connection was lost), signal (a:
// sequence number, b: immediate value), credit (a: length of a receive
// buffer now posted), notice (a: sequence number of a transfer the sender
// holds for want of a credit, or because the credited buffer is too
// small; b: its length), pair (sent by the node with the lower id only;
// a: its instance, b: the peer's instance it pairs with).
//
// A data connection carries one stream's transfers: each is a header
// gathered in front of the payload, and lands, scattered the same way, in
// the receive posted first:
//
//	offset size field
//	0      8    sequence number in the stream
//	8      8    immediate value, unless the provider carries it as remote
//	            completion data (8 bytes of it)

const (
	fabHelloLen     = 56
	fabHelloMagic   = "CVYF"
	fabHelloVersion = 1
	helloImmHdr     = 1 // hello flag: immediate values in data headers

	ctrlPacketVersion = 1
	ctrlHeaderLen     = 8
	ctrlRecordLen     = 32
	// ctrlMaxRecords bounds the records of one packet, so that a packet
	// fits a control slot of ctrlSlotLen bytes.
	ctrlMaxRecords = 15
	ctrlSlotLen    = ctrlHeaderLen + ctrlMaxRecords*ctrlRecordLen
)

// fabConnKind tells control connections from data connections.
type fabConnKind uint8

const (
	fabKindControl fabConnKind = 1
	fabKindData    fabConnKind = 2
)

// fabHello is a decoded hello.
type fabHello struct {
	kind     fabConnKind
	immHdr   bool // the sender puts immediate values in data headers
	from, to NodeID
	gen      uint64
	stream   StreamID
	connInst uint64 // the connecting side's open instance of stream
	accInst  uint64 // the accepting side's
}

func encodeFabHello(b []byte, h fabHello) {
	_ = b[fabHelloLen-1]
	copy(b[0:4], fabHelloMagic)
	binary.BigEndian.PutUint16(b[4:6], fabHelloVersion)
	b[6] = byte(h.kind)
	b[7] = 0
	if h.immHdr {
		b[7] = helloImmHdr
	}
	binary.BigEndian.PutUint64(b[8:16], uint64(h.from))
	binary.BigEndian.PutUint64(b[16:24], uint64(h.to))
	binary.BigEndian.PutUint64(b[24:32], h.gen)
	binary.BigEndian.PutUint64(b[32:40], uint64(h.stream))
	binary.BigEndian.PutUint64(b[40:48], h.connInst)
	binary.BigEndian.PutUint64(b[48:56], h.accInst)
}

func decodeFabHello(b []byte) (fabHello, error) {
	if len(b) < fabHelloLen {
		return fabHello{}, fmt.Errorf("short hello: %d bytes", len(b))
	}
	if string(b[0:4]) != fabHelloMagic {
		return fabHello{}, errors.New("bad hello magic: not a convoy fabric connection")
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != fabHelloVersion {
		return fabHello{}, fmt.Errorf("unsupported protocol version %d (want %d)", v, fabHelloVersion)
	}
	h := fabHello{
		kind:     fabConnKind(b[6]),
		immHdr:   b[7]&helloImmHdr != 0,
		from:     NodeID(binary.BigEndian.Uint64(b[8:16])),
		to:       NodeID(binary.BigEndian.Uint64(b[16:24])),
		gen:      binary.BigEndian.Uint64(b[24:32]),
		stream:   StreamID(binary.BigEndian.Uint64(b[32:40])),
		connInst: binary.BigEndian.Uint64(b[40:48]),
		accInst:  binary.BigEndian.Uint64(b[48:56]),
	}
	if b[7]&^helloImmHdr != 0 {
		return fabHello{}, fmt.Errorf("unknown hello flags %#x", b[7])
	}
	switch h.kind {
	case fabKindControl:
		if h.stream != 0 || h.connInst != 0 || h.accInst != 0 {
			return fabHello{}, errors.New("control hello with stream fields set")
		}
	case fabKindData:
	default:
		return fabHello{}, fmt.Errorf("unknown connection kind %d", h.kind)
	}
	return h, nil
}

// ctrlType is the type of a control record.
type ctrlType uint8

const (
	ctrlOpen   ctrlType = 1
	ctrlClose  ctrlType = 2
	ctrlSignal ctrlType = 3
	ctrlCredit ctrlType = 4
	ctrlNotice ctrlType = 5
	ctrlPair   ctrlType = 6
)

func (t ctrlType) String() string {
	switch t {
	case ctrlOpen:
		return "open"
	case ctrlClose:
		return "close"
	case ctrlSignal:
		return "signal"
	case ctrlCredit:
		return "credit"
	case ctrlNotice:
		return "notice"
	case ctrlPair:
		return "pair"
	}
	return fmt.Sprintf("ctrlType(%d)", uint8(t))
}

// ctrlRecord is one control record.
type ctrlRecord struct {
	typ    ctrlType
	stream StreamID
	a, b   uint64
}

// encodeCtrlPacket writes a packet of recs, acknowledging acks freed
// slots, into b and returns its length. len(recs) ≤ ctrlMaxRecords and b
// holds ctrlSlotLen bytes.
func encodeCtrlPacket(b []byte, acks uint32, recs []ctrlRecord) int {
	_ = b[ctrlSlotLen-1]
	b[0] = ctrlPacketVersion
	b[1] = byte(len(recs))
	b[2], b[3] = 0, 0
	binary.BigEndian.PutUint32(b[4:8], acks)
	off := ctrlHeaderLen
	for _, r := range recs {
		p := b[off : off+ctrlRecordLen]
		p[0] = byte(r.typ)
		clear(p[1:8])
		binary.BigEndian.PutUint64(p[8:16], uint64(r.stream))
		binary.BigEndian.PutUint64(p[16:24], r.a)
		binary.BigEndian.PutUint64(p[24:32], r.b)
		off += ctrlRecordLen
	}
	return off
}

// decodeCtrlPacket parses and checks a packet: it returns the slots the
// peer acknowledges and calls rec for each record, in order, after the
// whole packet was checked. The error describes what is wrong with it.
func decodeCtrlPacket(b []byte, rec func(ctrlRecord) error) (acks uint32, err error) {
	if len(b) < ctrlHeaderLen {
		return 0, fmt.Errorf("short control packet: %d bytes", len(b))
	}
	if b[0] != ctrlPacketVersion {
		return 0, fmt.Errorf("unknown control packet version %d", b[0])
	}
	if b[2] != 0 || b[3] != 0 {
		return 0, errors.New("non-zero reserved bytes in control packet")
	}
	n := int(b[1])
	if n > ctrlMaxRecords || len(b) != ctrlHeaderLen+n*ctrlRecordLen {
		return 0, fmt.Errorf("control packet of %d bytes holding %d records", len(b), n)
	}
	for i := range n {
		p := b[ctrlHeaderLen+i*ctrlRecordLen:][:ctrlRecordLen]
		if t := ctrlType(p[0]); t < ctrlOpen || t > ctrlPair {
			return 0, fmt.Errorf("unknown control record type %d", p[0])
		}
		for _, x := range p[1:8] {
			if x != 0 {
				return 0, errors.New("non-zero reserved bytes in control record")
			}
		}
	}
	acks = binary.BigEndian.Uint32(b[4:8])
	for i := range n {
		p := b[ctrlHeaderLen+i*ctrlRecordLen:][:ctrlRecordLen]
		r := ctrlRecord{
			typ:    ctrlType(p[0]),
			stream: StreamID(binary.BigEndian.Uint64(p[8:16])),
			a:      binary.BigEndian.Uint64(p[16:24]),
			b:      binary.BigEndian.Uint64(p[24:32]),
		}
		if err := rec(r); err != nil {
			return acks, err
		}
	}
	return acks, nil
}
