package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

// canned is a transport that answers every request with raw, read as an
// HTTP response (an error if it is none), and then ends the call's
// context, so that a client that tries again stops.
type canned struct {
	raw    []byte
	cancel context.CancelFunc
}

func (c canned) RoundTrip(req *http.Request) (*http.Response, error) {
	defer c.cancel()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(c.raw)), req)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// FuzzAnswer hands the client's calls any answer a member (or whatever
// answers in its place) could give: each call returns without panicking,
// an answer of 200 only as what it decodes to, and any other with an
// error. The seed corpus is in testdata/fuzz/FuzzAnswer.
func FuzzAnswer(f *testing.F) {
	f.Add(uint8(0), []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"topic\":\"t\",\"seq\":4}\n"))
	f.Add(uint8(1), []byte("HTTP/1.1 200 OK\r\n\r\n[{\"name\":\"t\",\"mode\":\"atomic\",\"subscribers\":[1,2],\"subscribed\":true}]"))
	f.Add(uint8(2), []byte("HTTP/1.1 410 Gone\r\n\r\n{\"error\":\"trimmed\"}"))
	f.Add(uint8(3), []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nid: 1\ndata: {\"index\":1}\n\n"))
	f.Fuzz(func(t *testing.T, op uint8, raw []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := New([]string{"http://member:7101"}, WithHTTPClient(&http.Client{Transport: canned{raw, cancel}}),
			WithBackoff(time.Hour), WithMaxEventBytes(1<<10))
		status := -1
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil); err == nil {
			if _, err := io.ReadAll(resp.Body); err == nil {
				status = resp.StatusCode
			}
		}
		var err error
		switch op % 4 {
		case 0:
			_, err = c.Publish(ctx, "t", []byte("m"))
		case 1:
			_, err = c.Topics(ctx)
		case 2:
			err = c.Subscribe(ctx, "http://member:7101", "t", "atomic")
		case 3:
			s := c.Events(ctx, "t", 1)
			_, err = s.Next()
			s.Close()
		}
		if err == nil && status != http.StatusOK {
			t.Fatalf("op %d: no error for an answer of status %d", op%4, status)
		}
		if status == http.StatusGone && op%4 != 3 && err != nil && !errors.Is(err, ErrTrimmed) {
			t.Fatalf("op %d: a 410 answered %v", op%4, err)
		}
	})
}
