package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// canned is a member that answers every request with the same bytes, as
// read off the connection: a response the client's transport must parse
// (or fail to). Its first answer ends the call's context, so that the
// client, which retries a 503 or a failure, returns.
type canned struct {
	raw    []byte
	cancel context.CancelFunc
}

func (c canned) RoundTrip(r *http.Request) (*http.Response, error) {
	c.cancel()
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return http.ReadResponse(bufio.NewReader(bytes.NewReader(c.raw)), r)
}

// FuzzAnswer gives each of the client's calls, as op says, an arbitrary
// answer from the member. Whatever the answer, the call must return
// (no panic, no hang); it may succeed only on a 200 whose body holds
// what the call returns, which it must then return exactly; and the
// statuses the API defines must give their errors.
func FuzzAnswer(f *testing.F) {
	f.Fuzz(func(t *testing.T, op uint8, raw []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := New([]string{"http://member:7101"}, WithHTTPClient(&http.Client{Transport: canned{raw, cancel}}),
			WithBackoff(time.Hour), WithMaxResponseBytes(1<<10))

		// What the answer says, read as the transport reads it (status
		// -1: it is no response).
		status, body := -1, []byte(nil)
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil); err == nil {
			if b, err := io.ReadAll(resp.Body); err == nil {
				status, body = resp.StatusCode, b
			}
		}
		var got, want any
		var err error
		switch op % 7 {
		case 0:
			var pos uint64
			pos, err = c.Append(ctx, []byte("entry"), "s")
			got, want = pos, new(struct{ Position uint64 })
		case 1:
			var data []byte
			data, err = c.Read(ctx, 3)
			if err == nil && !bytes.Equal(data, body) {
				t.Fatalf("Read returned %q, the body is %q", data, body)
			}
		case 2:
			var es []Entry
			es, err = c.ReadRange(ctx, 1, 9)
			got, want = es, new([]Entry)
		case 3:
			var tail uint64
			tail, err = c.Tail(ctx)
			got, want = tail, new(struct{ Tail uint64 })
		case 4:
			var trim uint64
			trim, err = c.Trim(ctx, 2)
			got, want = trim, new(struct{ Trim uint64 })
		case 5:
			var es []Entry
			es, err = c.ReadStream(ctx, "s", 0)
			got, want = es, new([]Entry)
		case 6:
			var s Status
			s, err = c.Status(ctx, "http://member:7101")
			got, want = s, new(Status)
		}
		if err != nil {
			// Status asks one member once: it has no failover to end
			// with ErrUnavailable.
			if op%7 != 6 || status != -1 && status != http.StatusServiceUnavailable {
				checkAnswerError(t, status, body, err)
			}
			return
		}
		if status != http.StatusOK || len(body) > 1<<10 {
			t.Fatalf("op %d succeeded on %d %q", op%7, status, body)
		}
		if want == nil {
			return
		}
		if jerr := json.Unmarshal(body, want); jerr != nil {
			t.Fatalf("op %d succeeded on %q, which does not decode: %v", op%7, body, jerr)
		}
		w := reflect.ValueOf(want).Elem()
		if w.Kind() == reflect.Struct && w.NumField() == 1 {
			w = w.Field(0) // the one field the call returns
		}
		if !reflect.DeepEqual(got, w.Interface()) {
			t.Fatalf("op %d returned %#v, the body %q says %#v", op%7, got, body, w.Interface())
		}
	})
}

// checkAnswerError checks the error a call returned for an answer of
// status (-1: not a response) with body.
func checkAnswerError(t *testing.T, status int, body []byte, err error) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(body))
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	var want error
	switch {
	case len(body) > 1<<10:
		return // above WithMaxResponseBytes
	case status == -1, status == http.StatusServiceUnavailable:
		want = ErrUnavailable
	case status == http.StatusNotFound && msg == "unwritten":
		want = ErrUnwritten
	case status == http.StatusGone && msg == "trimmed":
		want = ErrTrimmed
	case status == http.StatusBadRequest:
		want = ErrBadRequest
	case status == http.StatusRequestEntityTooLarge:
		want = ErrTooLarge
	case status == http.StatusUnauthorized:
		want = ErrUnauthorized
	default:
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("answer %d %q: %v, want %v", status, body, err, want)
	}
}
