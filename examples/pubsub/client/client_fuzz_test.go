package client

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadEvents feeds a stream's reader with any bytes a member (or
// whatever answers in its place) could send as an event stream: it must
// never panic nor return an event larger than its bound, and it reads
// the events a well-formed stream holds. The seed corpus is in
// testdata/fuzz/FuzzReadEvents.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("id: 1\nevent: message\ndata: {\"index\":1,\"epoch\":2,\"sender\":3,\"seq\":4,\"data\":\"aGk=\"}\n\n"))
	f.Add([]byte(": ping\n\nid: 2\ndata: {\"index\":2}\r\n\r\n"))
	f.Add([]byte("event: other\ndata: {}\n\ndata: {\"index\":\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 256
		s := &Stream{c: &Client{maxEvent: limit}, r: bufio.NewReaderSize(bytes.NewReader(body), 16)}
		for range 64 {
			ev, err := s.read()
			if err != nil {
				return
			}
			if len(ev.Data) > limit {
				t.Fatalf("an event of %d bytes, bound %d", len(ev.Data), limit)
			}
		}
	})
}
