package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// script is a member, or several sharing one script, that answers the
// n-th request it gets (counting from 0, across its members) as
// answers[n] says, and records when each came and to which member. It is
// its members' transport too: a request reaches its member's handler in
// the process, so that a test runs in a synctest bubble, on its clock.
type script struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	at      []time.Time
	member  []int
}

// serve returns the base URLs of k members answering from s, through
// s's transport (RoundTrip).
func (s *script) serve(k int) []string {
	var urls []string
	for i := range k {
		urls = append(urls, fmt.Sprintf("http://member%d.test", i))
	}
	return urls
}

// RoundTrip answers r as its member does.
func (s *script) RoundTrip(r *http.Request) (*http.Response, error) {
	var i int
	if _, err := fmt.Sscanf(r.URL.Host, "member%d.test", &i); err != nil {
		return nil, fmt.Errorf("no member at %s", r.URL.Host)
	}
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	s.mu.Lock()
	n := len(s.at)
	s.at = append(s.at, time.Now())
	s.member = append(s.member, i)
	s.mu.Unlock()
	w := httptest.NewRecorder()
	if n < len(s.answers) {
		s.answers[n](w)
	} else {
		w.WriteHeader(http.StatusInternalServerError)
	}
	resp := w.Result()
	resp.Request = r
	return resp, nil
}

// tries returns the members tried and the pauses between the tries.
func (s *script) tries() (members []int, gaps []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.at); i++ {
		gaps = append(gaps, s.at[i].Sub(s.at[i-1]))
	}
	return append([]int(nil), s.member...), gaps
}

// atCapacity answers 503 with Retry-After seconds, as a member at its
// bounds does.
func atCapacity(seconds string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", seconds)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"pubsub: unavailable: pubsub: member at capacity"}`)
	}
}

func answer(status int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func newTestClient(s *script, urls []string) *Client {
	return New(urls, WithHTTPClient(&http.Client{Transport: s}), WithBackoff(time.Millisecond))
}

// TestRetryAfter: members at capacity answer 503 with Retry-After. A
// publish goes round the members at once, then waits the shortest
// Retry-After of the round (here 1s of 1s and 10s; and up to half as
// long again) before the next round; a subscription, which names its
// member, waits there as asked; and so does the opening of an event
// stream, whose first event then arrives. The test runs on synctest's
// clock, so the pauses are exact.
func TestRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		check := func(what string, s *script, wantMembers []int, wantGap int) {
			t.Helper()
			members, gaps := s.tries()
			if !slices.Equal(members, wantMembers) {
				t.Fatalf("%s: tried members %v, want %v", what, members, wantMembers)
			}
			for i, d := range gaps {
				switch {
				case i == wantGap && (d < time.Second || d > 1500*time.Millisecond):
					t.Errorf("%s: retried %v after a Retry-After of 1s, want 1s to 1.5s", what, d)
				case i != wantGap && d != 0:
					t.Errorf("%s: try %d came %v after the one before, want at once", what, i+1, d)
				}
			}
		}

		publish := &script{answers: []func(http.ResponseWriter){
			atCapacity("10"), atCapacity("1"), answer(http.StatusOK, `{"topic":"t","seq":7}`),
		}}
		c := newTestClient(publish, publish.serve(2))
		if r, err := c.Publish(ctx, "t", []byte("x")); err != nil || r.Seq != 7 {
			t.Fatalf("Publish: %+v, %v", r, err)
		}
		// Round one: members 0 and 1 at once; round two from member 0.
		check("publish", publish, []int{0, 1, 0}, 1)

		subscribe := &script{answers: []func(http.ResponseWriter){
			atCapacity("1"), answer(http.StatusOK, `{"topic":"t","subscribed":true}`),
		}}
		urls := subscribe.serve(1)
		if err := newTestClient(subscribe, urls).Subscribe(ctx, urls[0], "t", ""); err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		check("subscribe", subscribe, []int{0, 0}, 0)

		events := &script{answers: []func(http.ResponseWriter){
			atCapacity("1"),
			func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "id: 3\nevent: message\ndata: {\"index\":3,\"data\":\"aGk=\"}\n\n")
			},
		}}
		s := newTestClient(events, events.serve(1)).Events(ctx, "t", 3)
		defer s.Close()
		if ev, err := s.Next(); err != nil || ev.Index != 3 || string(ev.Data) != "hi" {
			t.Fatalf("Next: %+v, %v", ev, err)
		}
		check("event stream", events, []int{0, 0}, 0)
	})
}
