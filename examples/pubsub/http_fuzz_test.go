package pubsub

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/convoy-gcs/convoy"
)

// fakeGroup stands in for a group of one member: what it publishes on a
// topic it subscribes to is delivered at once, with the next index.
type fakeGroup struct {
	n      *Node
	mu     sync.Mutex
	topics map[string]*fakeTopic
}

type fakeTopic struct {
	mode       convoy.Mode
	subscribed bool
	index, seq uint64
}

func newFakeNode(opts Options) (*Node, *fakeGroup) {
	opts, err := opts.withDefaults(convoy.Config{})
	if err != nil {
		panic(err)
	}
	n, err := newNode(1, opts)
	if err != nil {
		panic(err)
	}
	g := &fakeGroup{n: n, topics: make(map[string]*fakeTopic)}
	n.g = g
	return n, g
}

func (g *fakeGroup) Publish(_ context.Context, topic string, payload []byte, _ ...convoy.SendOption) (convoy.Receipt, error) {
	g.mu.Lock()
	t, ok := g.topics[topic]
	if !ok {
		g.mu.Unlock()
		return convoy.Receipt{}, fmt.Errorf("%w: %q", convoy.ErrUnknownTopic, topic)
	}
	t.seq++
	r := convoy.Receipt{Topic: topic, Seq: t.seq}
	if !t.subscribed {
		g.mu.Unlock()
		return r, nil
	}
	t.index++
	d := convoy.Delivery{Epoch: 1, Index: t.index, Topic: topic, Sender: 1, Seq: t.seq, Payload: payload}
	g.mu.Unlock()
	g.n.deliver(d)
	return r, nil
}

func (g *fakeGroup) Subscribe(_ context.Context, topic string, _ convoy.Handler, opts ...convoy.TopicOption) error {
	if topic == "" || len(topic) > convoy.MaxTopicName {
		return fmt.Errorf("%w: %q", convoy.ErrUnknownTopic, topic)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.topics[topic] == nil {
		g.topics[topic] = &fakeTopic{}
	}
	g.topics[topic].subscribed = true
	return nil
}

func (g *fakeGroup) Unsubscribe(_ context.Context, topic string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := g.topics[topic]; t != nil {
		t.subscribed = false
	}
	return nil
}

func (g *fakeGroup) Topics() []convoy.TopicInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []convoy.TopicInfo
	for name, t := range g.topics {
		info := convoy.TopicInfo{Name: name, Mode: t.mode, Subscribed: t.subscribed}
		if t.subscribed {
			info.Subscribers = []convoy.NodeID{1}
		}
		out = append(out, info)
	}
	return out
}

func (g *fakeGroup) View() (convoy.View, bool) {
	return convoy.View{Epoch: 1, Members: []convoy.Member{{ID: 1}}}, true
}

func (g *fakeGroup) Close() error { return nil }

// FuzzHTTP sends raw HTTP requests to the API of a member (on a stand-in
// group) that subscribes to topic "t", which holds a few messages: every
// answer is a JSON object of a status below 500, or, for an event
// stream, the stream of events; nothing panics. The seed corpus is in
// testdata/fuzz/FuzzHTTP.
func FuzzHTTP(f *testing.F) {
	for _, seed := range []string{
		"POST /topics/t HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\n\r\nhi",
		"GET /topics/t/events?from=2 HTTP/1.1\r\nHost: m\r\n\r\n",
		"GET /topics/t/events HTTP/1.1\r\nHost: m\r\nLast-Event-ID: 1\r\n\r\n",
		"POST /topics/u/subscribe?mode=total HTTP/1.1\r\nHost: m\r\n\r\n",
		"GET /topics HTTP/1.1\r\nHost: m\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself
		}
		n, g := newFakeNode(Options{MaxMessageBytes: 64, Retain: 3})
		h := n.Handler()
		if err := g.Subscribe(context.Background(), "t", nil); err != nil {
			t.Fatal(err)
		}
		for k := range 5 {
			if _, err := n.Publish(context.Background(), "t", fmt.Appendf(nil, "m%d", k)); err != nil {
				t.Fatal(err)
			}
		}
		// An event stream ends once it has written what is kept: the
		// request's context is over.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		code, got := w.Code, w.Body.String()
		switch {
		case code >= 500 || code < 200:
			t.Fatalf("%s %s: %d %s", r.Method, r.URL, code, got)
		case code/100 == 3:
			if w.Header().Get("Location") == "" {
				t.Fatalf("%s %s: %d without Location", r.Method, r.URL, code)
			}
		case r.RequestURI == "*" || code == http.StatusMethodNotAllowed || code == http.StatusNotFound && r.Pattern == "":
			// The router's own answers.
		case w.Header().Get("Content-Type") == "text/event-stream":
			if code != http.StatusOK || !strings.HasPrefix(got, "id: ") && got != "" {
				t.Fatalf("%s %s: %d event stream %q", r.Method, r.URL, code, got)
			}
		case w.Header().Get("Content-Type") != "application/json":
			t.Fatalf("%s %s: %d with Content-Type %q: %s", r.Method, r.URL, code, w.Header().Get("Content-Type"), got)
		}
	})
}
