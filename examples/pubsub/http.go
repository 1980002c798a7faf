package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/convoy-gcs/convoy"
)

// Bounds of the API.
const (
	// batchEvents bounds the events an event stream writes between
	// flushes.
	batchEvents = 256
	// keepAlive is how often an idle event stream sends a comment, so
	// that proxies and clients see it is alive.
	keepAlive = 15 * time.Second
)

// Handler returns the HTTP API (see the package documentation),
// including GET /status.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /topics/{name}", n.servePublish)
	mux.HandleFunc("GET /topics/{name}/events", n.admittedStream(n.serveEvents))
	mux.HandleFunc("POST /topics/{name}/subscribe", n.admitted(n.serveSubscribe))
	mux.HandleFunc("POST /topics/{name}/unsubscribe", n.admitted(n.serveUnsubscribe))
	mux.HandleFunc("GET /topics", n.admitted(n.serveTopics))
	mux.HandleFunc("GET /status", n.serveStatus) // never refused
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-n.done:
			if r.URL.Path != "/status" {
				n.writeError(w, fmt.Errorf("%w: closing", ErrUnavailable))
				return
			}
		default:
		}
		mux.ServeHTTP(w, r)
	})
}

// servePublish: POST /topics/{name}, body = the message → {"topic",
// "seq"}. It takes its place (admitBody) before it reads the body.
func (n *Node) servePublish(w http.ResponseWriter, r *http.Request) {
	topic := r.PathValue("name")
	release, ok := n.admitBody(w, r, n.opts.MaxMessageBytes)
	if !ok {
		return
	}
	defer release()
	limit := int64(n.opts.MaxMessageBytes)
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			err = fmt.Errorf("%w: limit %d bytes", errTooLarge, limit)
		} else {
			err = fmt.Errorf("%w: reading the body: %w", errBadRequest, err)
		}
		n.writeError(w, err)
		return
	}
	seq, err := n.Publish(r.Context(), topic, data)
	if err != nil {
		n.writeError(w, err)
		return
	}
	n.writeJSON(w, http.StatusOK, struct {
		Topic string `json:"topic"`
		Seq   uint64 `json:"seq"`
	}{topic, seq})
}

// serveSubscribe: POST /topics/{name}/subscribe[?mode=atomic|total].
func (n *Node) serveSubscribe(w http.ResponseWriter, r *http.Request) {
	var mode convoy.Mode
	switch m := r.URL.Query().Get("mode"); m {
	case "", "atomic":
		mode = convoy.Atomic
	case "total":
		mode = convoy.TotalOrder
	default:
		n.writeError(w, fmt.Errorf("%w: mode %q, want atomic or total", errBadRequest, m))
		return
	}
	topic := r.PathValue("name")
	if err := n.Subscribe(r.Context(), topic, mode); err != nil {
		n.writeError(w, err)
		return
	}
	n.writeSubscribed(w, topic, true)
}

// serveUnsubscribe: POST /topics/{name}/unsubscribe.
func (n *Node) serveUnsubscribe(w http.ResponseWriter, r *http.Request) {
	topic := r.PathValue("name")
	if err := n.Unsubscribe(r.Context(), topic); err != nil {
		n.writeError(w, err)
		return
	}
	n.writeSubscribed(w, topic, false)
}

func (n *Node) writeSubscribed(w http.ResponseWriter, topic string, sub bool) {
	n.writeJSON(w, http.StatusOK, struct {
		Topic      string `json:"topic"`
		Subscribed bool   `json:"subscribed"`
	}{topic, sub})
}

// TopicInfo describes a topic of the current view (GET /topics).
type TopicInfo struct {
	Name        string   `json:"name"`
	Mode        string   `json:"mode"`
	Subscribers []uint64 `json:"subscribers"`
	// Subscribed says this member subscribes; First and Last are the
	// indexes of the messages it keeps (zeros if none).
	Subscribed bool   `json:"subscribed"`
	First      uint64 `json:"first,omitempty"`
	Last       uint64 `json:"last,omitempty"`
}

// serveTopics: GET /topics.
func (n *Node) serveTopics(w http.ResponseWriter, _ *http.Request) {
	out := []TopicInfo{}
	for _, t := range n.g.Topics() {
		info := TopicInfo{Name: t.Name, Mode: t.Mode.String(), Subscribers: []uint64{}, Subscribed: t.Subscribed}
		for _, id := range t.Subscribers {
			info.Subscribers = append(info.Subscribers, uint64(id))
		}
		if t.Subscribed {
			info.First, info.Last = n.topic(t.Name).bounds()
		}
		out = append(out, info)
	}
	n.writeJSON(w, http.StatusOK, out)
}

// serveStatus: GET /status.
func (n *Node) serveStatus(w http.ResponseWriter, _ *http.Request) {
	v, in := n.g.View()
	st := struct {
		ID      uint64   `json:"id"`
		Epoch   uint64   `json:"epoch"`
		Members []uint64 `json:"members"`
		Serving bool     `json:"serving"`
	}{ID: uint64(n.self), Epoch: v.Epoch, Members: []uint64{}, Serving: in}
	for _, m := range v.Members {
		st.Members = append(st.Members, uint64(m.ID))
	}
	n.writeJSON(w, http.StatusOK, st)
}

// serveEvents: GET /topics/{name}/events?from=INDEX → text/event-stream.
func (n *Node) serveEvents(w http.ResponseWriter, r *http.Request) {
	topic := r.PathValue("name")
	from, err := cursor(r)
	if err != nil {
		n.writeError(w, err)
		return
	}
	switch sub, exists := n.subscribed(topic); {
	case !exists:
		n.writeError(w, fmt.Errorf("%w: %q", convoy.ErrUnknownTopic, topic))
		return
	case !sub:
		n.writeError(w, fmt.Errorf("%w: %q", ErrNotSubscribed, topic))
		return
	}
	l := n.topic(topic)
	evs, next, grown, err := l.read(from, batchEvents)
	if err != nil {
		n.writeError(w, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		for _, ev := range evs {
			if err := writeEvent(w, ev); err != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(evs) == 0 {
			select {
			case <-grown:
			case <-ping.C:
				if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
					return
				}
			case <-r.Context().Done():
				return
			case <-n.done:
				return
			}
		}
		if evs, next, grown, err = l.read(next, batchEvents); err != nil {
			// The stream fell behind the kept prefix: it ends, and the
			// client's next request learns why.
			n.log.Info("event stream fell behind", "topic", topic, "err", err)
			return
		}
	}
}

// cursor returns where an event stream starts: from=INDEX, or the event
// after Last-Event-ID (a reconnecting EventSource), or 0 for new
// messages only.
func cursor(r *http.Request) (uint64, error) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		v, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: Last-Event-ID %q", errBadRequest, id)
		}
		return v + 1, nil
	}
	s := r.URL.Query().Get("from")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%w: from=%q, want an index from 1", errBadRequest, s)
	}
	return v, nil
}

// writeEvent writes ev as a server-sent event.
func writeEvent(w io.Writer, ev Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: message\ndata: %s\n\n", ev.Index, data)
	return err
}

// writeError answers err as JSON with its status.
func (n *Node) writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, errBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, convoy.ErrUnknownTopic):
		status = http.StatusNotFound
	case errors.Is(err, ErrNotSubscribed):
		status = http.StatusConflict
	case errors.Is(err, ErrTrimmed):
		status = http.StatusGone
	case errors.Is(err, errTooLarge):
		status = http.StatusRequestEntityTooLarge
	case errors.Is(err, convoy.ErrInvalidConfig):
		status = http.StatusBadRequest
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	}
	if status == http.StatusInternalServerError {
		n.log.Warn("request failed", "err", err)
	}
	n.writeJSON(w, status, struct {
		Error string `json:"error"`
	}{err.Error()})
}

func (n *Node) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		n.log.Debug("writing a response", "err", err)
	}
}
