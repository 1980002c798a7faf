package sharedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// commandVersion is the first byte of every encoded command. A member
// skips commands of a version it does not know.
const commandVersion = 1

// kind is what a command does.
type kind byte

const (
	kindAppend  kind = 1 // append an entry to the log
	kindTrim    kind = 2 // drop the entries before a position
	kindBarrier kind = 3 // change nothing (reads use convoy.Group.Sync; a log may still hold barriers)
)

func (k kind) String() string {
	switch k {
	case kindAppend:
		return "append"
	case kindTrim:
		return "trim"
	case kindBarrier:
		return "barrier"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Limits on what one command may carry. The HTTP API refuses requests
// beyond them (400), and the state machine skips commands beyond them.
const (
	// MaxStreams is how many streams one append may name.
	MaxStreams = 16
	// MaxStreamName is the longest stream name, in bytes.
	MaxStreamName = 128
	// MaxRequestID is the longest request id (Idempotency-Key), in bytes.
	MaxRequestID = 128
	// maxCommandOverhead bounds an append command's bytes beyond its
	// data: version, kind, request id, stream names and the length
	// prefixes.
	maxCommandOverhead = 2 + (binary.MaxVarintLen64 + MaxRequestID) + binary.MaxVarintLen64 +
		MaxStreams*(binary.MaxVarintLen64+MaxStreamName) + binary.MaxVarintLen64
)

// errMalformed is wrapped by every error of decodeCommand.
var errMalformed = errors.New("sharedlog: malformed command")

// command is one replicated operation on the log.
//
// Encoding (integers are unsigned varints, strings a length then bytes):
//
//	version (1 byte) | kind (1 byte) | request id
//	append:  count of streams | each stream name | data length | data
//	trim:    before
//	barrier: nothing
//
// Nothing may follow. Decoding is bounded by the payload's length and
// the limits above, and never panics.
type command struct {
	kind kind
	// id is the request id: commands with the same kind and id are
	// applied once (see dedupe). Barriers carry a random id only to find
	// their waiter.
	id      string
	streams []string // append: the streams the entry belongs to
	data    []byte   // append: the entry
	before  uint64   // trim: the first position kept
}

// key identifies the command's request: its kind and request id.
func (c *command) key() string { return requestKey(c.kind, c.id) }

func requestKey(k kind, id string) string { return string(byte(k)) + id }

// encode returns the command's wire form.
func (c *command) encode() []byte {
	n := 2 + binary.MaxVarintLen64 + len(c.id)
	if c.kind == kindAppend {
		n += binary.MaxVarintLen64*(2+len(c.streams)) + len(c.data)
		for _, s := range c.streams {
			n += len(s)
		}
	} else {
		n += binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, commandVersion, byte(c.kind))
	b = appendString(b, c.id)
	switch c.kind {
	case kindAppend:
		b = binary.AppendUvarint(b, uint64(len(c.streams)))
		for _, s := range c.streams {
			b = appendString(b, s)
		}
		b = binary.AppendUvarint(b, uint64(len(c.data)))
		b = append(b, c.data...)
	case kindTrim:
		b = binary.AppendUvarint(b, c.before)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeCommand parses a command. The command's data aliases p.
func decodeCommand(p []byte) (command, error) {
	d := decoder{b: p}
	var c command
	if v := d.byte(); d.err == nil && v != commandVersion {
		return c, fmt.Errorf("%w: version %d", errMalformed, v)
	}
	c.kind = kind(d.byte())
	c.id = string(d.bytes(MaxRequestID))
	if d.err == nil && c.id == "" {
		return c, fmt.Errorf("%w: empty request id", errMalformed)
	}
	switch c.kind {
	case kindAppend:
		n := d.uvarint()
		if d.err == nil && n > MaxStreams {
			return c, fmt.Errorf("%w: %d streams, at most %d", errMalformed, n, MaxStreams)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			s := string(d.bytes(MaxStreamName))
			if d.err != nil {
				break
			}
			if err := validStream(s); err != nil {
				return c, fmt.Errorf("%w: %w", errMalformed, err)
			}
			for _, prev := range c.streams {
				if prev == s {
					return c, fmt.Errorf("%w: stream %q named twice", errMalformed, s)
				}
			}
			c.streams = append(c.streams, s)
		}
		c.data = d.bytes(len(p))
	case kindTrim:
		c.before = d.uvarint()
	case kindBarrier:
	default:
		if d.err == nil {
			return c, fmt.Errorf("%w: unknown kind %d", errMalformed, byte(c.kind))
		}
	}
	if d.err != nil {
		return c, d.err
	}
	if len(d.b) > 0 {
		return c, fmt.Errorf("%w: %d trailing bytes", errMalformed, len(d.b))
	}
	return c, nil
}

// decoder reads a command's fields; the first error sticks and makes
// every later read return zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errMalformed, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed byte string of at most limit bytes.
func (d *decoder) bytes(limit int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("length %d beyond limit or payload", n))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// errStreamName is wrapped by validStream's errors.
var errStreamName = errors.New("bad stream name")

// validStream checks a stream name: 1 to MaxStreamName bytes of ASCII
// letters, digits, '.', '_', '-' and ':'.
func validStream(s string) error {
	if s == "" || len(s) > MaxStreamName {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", errStreamName, len(s), MaxStreamName)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == ':':
		default:
			return fmt.Errorf("%w: %q (letters, digits, '.', '_', '-', ':')", errStreamName, s)
		}
	}
	return nil
}
