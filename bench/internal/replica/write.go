package replica

import (
	"encoding/binary"
	"errors"
)

// EncodeWrite makes the command a replica replicates for a write of value
// to key: u16 key length | key | value.
func EncodeWrite(key, value []byte) []byte {
	b := make([]byte, 2+len(key)+len(value))
	binary.BigEndian.PutUint16(b, uint16(len(key)))
	copy(b[2:], key)
	copy(b[2+len(key):], value)
	return b
}

// DecodeWrite parses a command that EncodeWrite made. The key and value
// share b's memory.
func DecodeWrite(b []byte) (key, value []byte, err error) {
	if len(b) < 2 {
		return nil, nil, errors.New("short write message")
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, errors.New("short write message")
	}
	return b[2 : 2+n], b[2+n:], nil
}
