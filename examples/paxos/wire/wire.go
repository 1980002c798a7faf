// Package wire is the binary protocol of the key-value store's streams:
// a client upgrades an HTTP/1.1 connection to a member (GET StreamPath
// with "Upgrade: " + Protocol, answered 101) and then sends requests and
// receives responses as frames over it, many in flight at once, each
// response carrying the tag of its request. The operations and their
// answers are those of the HTTP/JSON API (the same status codes), so a
// client can use either; a stream saves a round of HTTP parsing and a
// pair of system calls per request, because frames are read and written
// in batches.
//
// Every frame is a 4-byte big-endian length of the rest, then the rest:
//
//	request:  tag u64 | op u8 | flags u8 | key (u16 length) | id (u16 length) | value (u32 length) | old (u32 length, if flags has FlagOld) | issued i64 (if flags has FlagIssued)
//	response: tag u64 | status u16 | flags u8 | index u64 | body (u32 length) | retry-after u32 (if flags has FlagRetryAfter)
//
// Integers are big-endian; retry-after is in milliseconds; issued is in
// Unix nanoseconds, and positive. Decoding checks every length against
// the bytes left and against MaxKeyBytes and MaxIDBytes, and refuses
// trailing bytes.
//
// The Upgrade token names the protocol's version: a version that changes
// what a frame may hold gets a new token, so that a member and a client
// of different versions never exchange frames. A member that speaks
// another version refuses the upgrade (426 Upgrade Required, naming its
// own token), and the client then uses the HTTP/JSON API, which both
// understand. Version 2 (convoy-kv/2) added FlagIssued; members of
// version 1 answered a request with it 400, halfway through a stream,
// which is why the token changed. A member serves its own version only.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Protocol is the Upgrade token of a stream, which names the version of
// this package's frames, and StreamPath the path of the upgrade request.
const (
	Protocol   = "convoy-kv/2"
	StreamPath = "/stream"
)

// Bounds of a request's fields, as the HTTP API's.
const (
	// MaxKeyBytes bounds a key.
	MaxKeyBytes = 1 << 10
	// MaxIDBytes bounds a write's request id.
	MaxIDBytes = 256
)

// Op is what a request asks.
type Op uint8

// The operations.
const (
	// OpGet is a linearizable read; OpGetStale one from local state.
	OpGet Op = 1 + iota
	OpGetStale
	// OpPut stores Value under Key.
	OpPut
	// OpDelete removes Key.
	OpDelete
	// OpCAS sets Key to Value if its value is Old (FlagOld set) or if it
	// is absent (FlagOld clear).
	OpCAS
)

// FlagOld, in a CAS request's flags, says Old is present; FlagIssued, in
// a write request's, says an issued time follows; FlagOK, in a
// response's, says a CAS took effect; FlagRetryAfter, in a response's,
// says a retry-after field follows the body.
const (
	FlagOld        = 1 << 0
	FlagIssued     = 1 << 1
	FlagOK         = 1 << 0
	FlagRetryAfter = 1 << 1
)

// MaxRetryAfter is the longest RetryAfter a response carries: longer
// ones are cut to it.
const MaxRetryAfter = time.Duration(math.MaxUint32) * time.Millisecond

func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpGetStale:
		return "get-stale"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpCAS:
		return "cas"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Request is one request.
type Request struct {
	// Tag is chosen by the client and returned in the response.
	Tag uint64
	Op  Op
	Key string
	// ID is a write's request id (empty: the server makes one up).
	ID string
	// Value is a put's value or a CAS's new value.
	Value []byte
	// HasOld says a CAS expects Old; without it, the key's absence.
	HasOld bool
	Old    []byte
	// Issued is a write's issued time in Unix nanoseconds: the time of
	// the first attempt of its request that may have reached the group,
	// the same on every retry (0: none; the member stamps the request
	// with its own clock). It is the HTTP API's Request-Issued header.
	Issued int64
}

// Response is the answer to the request with the same Tag.
type Response struct {
	Tag uint64
	// Status is the HTTP API's status code for the same answer: 200, 404
	// for a missing key, 400, 409 for a write that expired before it was
	// applied, 413, 500, 503 (another member may serve, or this one
	// later).
	Status uint16
	// OK says a CAS took effect.
	OK bool
	// Index is the delivery index a write was applied at or a read
	// reflects (0 if none).
	Index uint64
	// Body is a read's value (status 200), or an error's message.
	Body []byte
	// RetryAfter, on a 503 that refused the request because the member
	// is at capacity, is how long the client should wait before it tries
	// again: the HTTP API's Retry-After header (0: none). It travels in
	// whole milliseconds, at most MaxRetryAfter.
	RetryAfter time.Duration
}

// Errors of decoding.
var (
	// ErrMalformed is wrapped by the errors of a frame that does not
	// decode.
	ErrMalformed = errors.New("wire: malformed frame")
	// ErrFrameTooLarge is wrapped when a frame's length is above the
	// reader's limit.
	ErrFrameTooLarge = errors.New("wire: frame too large")
)

const (
	requestFixed  = 8 + 1 + 1 + 2 + 2 + 4
	responseFixed = 8 + 2 + 1 + 8 + 4
	// retryAfterBytes is the size of a response's retry-after field.
	retryAfterBytes = 4
	// issuedBytes is the size of a request's issued field.
	issuedBytes = 8
)

// RequestBytes is the size of r's frame, its length prefix included.
func RequestBytes(r *Request) int {
	n := 4 + requestFixed + len(r.Key) + len(r.ID) + len(r.Value)
	if r.HasOld {
		n += 4 + len(r.Old)
	}
	if r.Issued != 0 {
		n += issuedBytes
	}
	return n
}

// AppendRequest appends r's frame to b. The caller keeps Key within
// MaxKeyBytes and ID within MaxIDBytes, and Issued positive if set:
// otherwise the frame is one the server answers with 400 (a key or id is
// cut at 64 KiB, which their length prefixes cannot exceed).
func AppendRequest(b []byte, r *Request) []byte {
	key, id := r.Key, r.ID
	if len(key) > 1<<16-1 {
		key = key[:1<<16-1]
	}
	if len(id) > 1<<16-1 {
		id = id[:1<<16-1]
	}
	var flags uint8
	if r.HasOld {
		flags |= FlagOld
	}
	if r.Issued != 0 {
		flags |= FlagIssued
	}
	n := RequestBytes(&Request{Key: key, ID: id, Value: r.Value, HasOld: r.HasOld, Old: r.Old, Issued: r.Issued}) - 4
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint64(b, r.Tag)
	b = append(b, byte(r.Op), flags)
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Value)))
	b = append(b, r.Value...)
	if r.HasOld {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Old)))
		b = append(b, r.Old...)
	}
	if r.Issued != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(r.Issued))
	}
	return b
}

// DecodeRequest decodes a request frame without its length prefix. The
// request's Value and Old alias frame.
func DecodeRequest(frame []byte) (Request, error) {
	d := decoder{b: frame}
	var r Request
	r.Tag = d.u64()
	r.Op = Op(d.u8())
	flags := d.u8()
	r.Key = string(d.bytes(int(d.u16()), MaxKeyBytes, "key"))
	r.ID = string(d.bytes(int(d.u16()), MaxIDBytes, "id"))
	r.Value = d.bytes(int(d.u32()), -1, "value")
	if flags&FlagOld != 0 {
		r.HasOld = true
		r.Old = d.bytes(int(d.u32()), -1, "old")
	}
	if flags&FlagIssued != 0 {
		r.Issued = int64(d.u64())
	}
	switch {
	case d.err != nil:
	case flags&^(FlagOld|FlagIssued) != 0:
		d.err = fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	case r.Op < OpGet || r.Op > OpCAS:
		d.err = fmt.Errorf("%w: unknown op %d", ErrMalformed, r.Op)
	case r.HasOld && r.Op != OpCAS:
		d.err = fmt.Errorf("%w: old value on a %v", ErrMalformed, r.Op)
	case flags&FlagIssued != 0 && r.Issued <= 0:
		d.err = fmt.Errorf("%w: issued time %d", ErrMalformed, r.Issued)
	case r.Issued != 0 && (r.Op == OpGet || r.Op == OpGetStale):
		d.err = fmt.Errorf("%w: issued time on a %v", ErrMalformed, r.Op)
	case len(d.b) > 0:
		d.err = fmt.Errorf("%w: %d bytes after the request", ErrMalformed, len(d.b))
	}
	return r, d.err
}

// ResponseBytes is the size of r's frame, its length prefix included.
func ResponseBytes(r *Response) int {
	n := 4 + responseFixed + len(r.Body)
	if r.RetryAfter > 0 {
		n += retryAfterBytes
	}
	return n
}

// AppendResponse appends r's frame to b. A RetryAfter is rounded up to a
// whole millisecond.
func AppendResponse(b []byte, r *Response) []byte {
	var flags uint8
	if r.OK {
		flags |= FlagOK
	}
	if r.RetryAfter > 0 {
		flags |= FlagRetryAfter
	}
	b = binary.BigEndian.AppendUint32(b, uint32(ResponseBytes(r)-4))
	b = binary.BigEndian.AppendUint64(b, r.Tag)
	b = binary.BigEndian.AppendUint16(b, r.Status)
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, r.Index)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Body)))
	b = append(b, r.Body...)
	if r.RetryAfter > 0 {
		ms := (min(r.RetryAfter, MaxRetryAfter) + time.Millisecond - 1) / time.Millisecond
		b = binary.BigEndian.AppendUint32(b, uint32(ms))
	}
	return b
}

// DecodeResponse decodes a response frame without its length prefix. The
// response's Body aliases frame.
func DecodeResponse(frame []byte) (Response, error) {
	d := decoder{b: frame}
	var r Response
	r.Tag = d.u64()
	r.Status = d.u16()
	flags := d.u8()
	r.OK = flags&FlagOK != 0
	r.Index = d.u64()
	r.Body = d.bytes(int(d.u32()), -1, "body")
	if flags&FlagRetryAfter != 0 {
		r.RetryAfter = time.Duration(d.u32()) * time.Millisecond
	}
	switch {
	case d.err != nil:
	case flags&^(FlagOK|FlagRetryAfter) != 0:
		d.err = fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	case flags&FlagRetryAfter != 0 && (r.RetryAfter <= 0 || r.RetryAfter > MaxRetryAfter):
		// AppendResponse writes no zero and nothing above the bound.
		d.err = fmt.Errorf("%w: retry after %v", ErrMalformed, r.RetryAfter)
	case len(d.b) > 0:
		d.err = fmt.Errorf("%w: %d bytes after the response", ErrMalformed, len(d.b))
	}
	return r, d.err
}

// ReadFrame reads one frame's length prefix from r and then the frame
// into buf (grown if needed), returning it. A length above limit is
// refused with an error wrapping ErrFrameTooLarge, after reading nothing
// beyond the prefix, and n is that length: the caller may skip the frame
// (Discard) to stay in step, or close the stream.
func ReadFrame(r *bufio.Reader, limit int, buf []byte) (frame []byte, n int, err error) {
	var p [4]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return nil, 0, err
	}
	n = int(binary.BigEndian.Uint32(p[:]))
	if n > limit {
		return nil, n, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, limit)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, n, err
	}
	return buf, n, nil
}

// decoder reads fields from b; after the first error every read returns
// zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("%w: %d bytes left, %d needed", ErrMalformed, len(d.b), n)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// bytes takes an n-byte field, refusing more than limit (if limit ≥ 0).
func (d *decoder) bytes(n, limit int, what string) []byte {
	if d.err == nil && limit >= 0 && n > limit {
		d.err = fmt.Errorf("%w: %s of %d bytes, limit %d", ErrMalformed, what, n, limit)
	}
	return d.take(n)
}

// Tag returns the tag of a request or response frame (without its length
// prefix), which a malformed frame may still carry: ok is false if the
// frame is too short to hold one.
func Tag(frame []byte) (tag uint64, ok bool) {
	if len(frame) < 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(frame), true
}
