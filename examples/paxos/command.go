package paxos

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// commandVersion is the first byte of every command on the wire: a
// command with an issued time. A command without one (issued 0) is
// written as version 1, as members wrote every command before issued
// times existed, so that the logs they left decode and apply as they
// did. A member skips commands of other versions (as malformed) rather
// than guess.
//
// A delivery carries one command or, from version 3 on, a batch of them:
// the version byte 3, the number of commands (a uvarint, at least 1),
// then each command as a length-prefixed field in version 1 or 2. A
// member applies a batch's commands in order, all at the delivery's
// index; members that predate batches skip one as malformed, so every
// member of a group must understand batches before any member sends
// one.
const (
	commandVersion      = 2
	commandVersionV1    = 1
	commandVersionBatch = 3
)

// Bounds of a command. They are constants, not options: every member must
// decide alike whether a delivered command is well formed.
const (
	// MaxKeyBytes bounds a key.
	MaxKeyBytes = 1 << 10
	// MaxRequestIDBytes bounds a request id (the Idempotency-Key header).
	MaxRequestIDBytes = 256
	// commandOverhead bounds what a command adds to its key and values:
	// version, op, flags, the request id, the issued time and five length
	// prefixes.
	commandOverhead = 3 + MaxRequestIDBytes + 6*binary.MaxVarintLen64
)

// errMalformed is wrapped by the errors of decodeCommand.
var errMalformed = errors.New("paxos: malformed command")

// op is what a command does.
type op uint8

const (
	opPut op = 1 + iota
	opDelete
	opCAS
	// opBarrier changes nothing. Reads wait for the group's read
	// barrier (convoy.Group.Sync) instead of sending one; a log may still
	// hold barrier commands, which apply as nothing.
	opBarrier
)

func (o op) String() string {
	switch o {
	case opPut:
		return "put"
	case opDelete:
		return "delete"
	case opCAS:
		return "cas"
	case opBarrier:
		return "barrier"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// command is one operation sent through the group.
//
// On the wire: the version byte, the op byte, the request id, in version
// 2 the issued time (a uvarint, from 1 to math.MaxInt64), then per op:
// put: key, value; delete: key; cas: key, a flags byte (bit 0: old is
// present), old if present, new; barrier: nothing more. Every string or
// byte field is a uvarint length followed by the bytes; nothing may
// follow the last field. Version 1 is the same without the issued time.
type command struct {
	op op
	// id is the request id: writes with the same id are applied once.
	// For a barrier it names the barrier.
	id string
	// issued is the time, in Unix nanoseconds, of the first attempt of
	// the request that may have reached the group: the same for all the
	// attempts of one request (see RequestLifetime). 0: none, a version 1
	// command.
	issued int64
	key    string
	// value is the value a put stores, or the new value of a cas.
	value []byte
	// old is the value a cas expects; hasOld false expects no value.
	old    []byte
	hasOld bool
}

// encodeCommand returns c's wire form.
func encodeCommand(c command) []byte {
	return appendCommand(make([]byte, 0, commandBytes(c)), c)
}

// commandBytes bounds the size of c's wire form: the version, op and cas
// flags bytes, four length prefixes, the issued time and the fields.
func commandBytes(c command) int {
	return 3 + 5*binary.MaxVarintLen64 + len(c.id) + len(c.key) + len(c.value) + len(c.old)
}

// appendCommand appends c's wire form to b.
func appendCommand(b []byte, c command) []byte {
	if c.issued > 0 {
		b = append(b, commandVersion, byte(c.op))
		b = appendField(b, []byte(c.id))
		b = binary.AppendUvarint(b, uint64(c.issued))
	} else {
		b = append(b, commandVersionV1, byte(c.op))
		b = appendField(b, []byte(c.id))
	}
	switch c.op {
	case opPut:
		b = appendField(b, []byte(c.key))
		b = appendField(b, c.value)
	case opDelete:
		b = appendField(b, []byte(c.key))
	case opCAS:
		b = appendField(b, []byte(c.key))
		if c.hasOld {
			b = append(b, 1)
			b = appendField(b, c.old)
		} else {
			b = append(b, 0)
		}
		b = appendField(b, c.value)
	}
	return b
}

// encodeBatch returns the wire form of a batch of commands (one or more)
// applied in order at one delivery.
func encodeBatch(cs []command) []byte {
	n, largest := 1+binary.MaxVarintLen64, 0
	for _, c := range cs {
		cn := commandBytes(c)
		largest = max(largest, cn)
		n += binary.MaxVarintLen64 + cn
	}
	b := make([]byte, 0, n)
	b = append(b, commandVersionBatch)
	b = binary.AppendUvarint(b, uint64(len(cs)))
	scratch := make([]byte, 0, largest)
	for _, c := range cs {
		b = appendField(b, appendCommand(scratch[:0], c))
	}
	return b
}

func appendField(b, f []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f)))
	return append(b, f...)
}

// decodeCommands parses a delivery's payload, one command or a batch, and
// appends its commands to dst. A batch holds single commands only; if
// any of them is malformed, so is the batch, and nothing is appended.
func decodeCommands(dst []command, b []byte) ([]command, error) {
	if len(b) == 0 || b[0] != commandVersionBatch {
		c, err := decodeCommand(b)
		if err != nil {
			return dst, err
		}
		return append(dst, c), nil
	}
	d := decoder{b: b[1:]}
	n, k := binary.Uvarint(d.b)
	switch {
	case k <= 0:
		return dst, fmt.Errorf("%w: batch: bad count", errMalformed)
	case n == 0 || n > uint64(len(d.b)):
		// Every command takes at least a byte.
		return dst, fmt.Errorf("%w: batch of %d commands in %d bytes", errMalformed, n, len(d.b))
	}
	d.b = d.b[k:]
	start := len(dst)
	for i := range int(n) {
		f := d.field("batched command", len(b))
		if d.err != nil {
			return dst[:start], d.err
		}
		c, err := decodeCommand(f)
		if err != nil {
			return dst[:start], fmt.Errorf("batched command %d: %w", i, err)
		}
		dst = append(dst, c)
	}
	if len(d.b) > 0 {
		return dst[:start], fmt.Errorf("%w: %d bytes after the batch", errMalformed, len(d.b))
	}
	return dst, nil
}

// decodeCommand parses a command. It checks every length against what is
// left of b and against the bounds above, so that it never panics and
// never allocates more than b holds; byte fields share b's memory.
func decodeCommand(b []byte) (command, error) {
	d := decoder{b: b}
	var c command
	v := d.byte()
	if d.err == nil && v != commandVersion && v != commandVersionV1 {
		return c, fmt.Errorf("%w: version %d", errMalformed, v)
	}
	c.op = op(d.byte())
	c.id = string(d.field("request id", MaxRequestIDBytes))
	if d.err == nil && c.id == "" {
		d.fail("empty request id")
	}
	if v == commandVersion {
		c.issued = d.issued()
	}
	switch c.op {
	case opPut, opDelete, opCAS:
		c.key = string(d.field("key", MaxKeyBytes))
		if d.err == nil && c.key == "" {
			d.fail("empty key")
		}
	case opBarrier:
	default:
		if d.err == nil {
			d.fail(fmt.Sprintf("unknown op %d", c.op))
		}
	}
	switch c.op {
	case opPut:
		c.value = d.field("value", len(b))
	case opCAS:
		switch flags := d.byte(); {
		case d.err != nil:
		case flags == 1:
			c.hasOld = true
			c.old = d.field("old value", len(b))
		case flags != 0:
			d.fail(fmt.Sprintf("cas flags %#x", flags))
		}
		c.value = d.field("new value", len(b))
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d bytes after the command", len(d.b)))
	}
	if d.err != nil {
		return command{}, d.err
	}
	return c, nil
}

// decoder reads fields from b; the first error sticks and makes every
// later read return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errMalformed, what)
	}
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

// issued reads an issued time: a uvarint from 1 to math.MaxInt64.
func (d *decoder) issued() int64 {
	if d.err != nil {
		return 0
	}
	t, k := binary.Uvarint(d.b)
	switch {
	case k <= 0:
		d.fail("issued time: bad uvarint")
		return 0
	case t == 0 || t > math.MaxInt64:
		d.fail(fmt.Sprintf("issued time %d out of range", t))
		return 0
	}
	d.b = d.b[k:]
	return int64(t)
}

// field reads a length-prefixed field of at most limit bytes.
func (d *decoder) field(name string, limit int) []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail(name + ": bad length")
		return nil
	}
	d.b = d.b[k:]
	if n > uint64(limit) {
		d.fail(fmt.Sprintf("%s: %d bytes, limit %d", name, n, limit))
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(name + ": truncated")
		return nil
	}
	f := d.b[:n:n]
	d.b = d.b[n:]
	return f
}
