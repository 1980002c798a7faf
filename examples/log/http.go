package sharedlog

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/convoy-gcs/convoy"
)

// errBadRequest is wrapped by the errors of malformed requests (HTTP
// 400).
var errBadRequest = errors.New("bad request")

// Handler returns the HTTP/JSON API (see the package documentation),
// including GET /status.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /log", n.serveAppend)
	mux.HandleFunc("GET /log", n.admitted(n.serveRange))
	mux.HandleFunc("GET /log/tail", n.admitted(n.serveTail))
	mux.HandleFunc("GET /log/{position}", n.admitted(n.serveRead))
	mux.HandleFunc("POST /log/trim", n.admitted(n.serveTrim))
	mux.HandleFunc("GET /streams/{name}", n.admitted(n.serveStream))
	mux.HandleFunc("GET /status", n.serveStatus)
	// Every other request gets its error as JSON too, not the router's
	// text: 405 (with Allow) for a route's other methods, else 404.
	mux.HandleFunc("/log", n.notAllowed("GET, HEAD, POST"))
	mux.HandleFunc("/log/{position}", func(w http.ResponseWriter, r *http.Request) {
		allow := "GET, HEAD"
		if r.PathValue("position") == "trim" {
			allow = "POST"
		}
		n.notAllowed(allow)(w, r)
	})
	mux.HandleFunc("/streams/{name}", n.notAllowed("GET, HEAD"))
	mux.HandleFunc("/status", n.notAllowed("GET, HEAD"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n.writeJSON(w, http.StatusNotFound, struct {
			Error string `json:"error"`
		}{"no such endpoint"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.closed() && r.URL.Path != "/status" {
			n.writeError(w, fmt.Errorf("%w: closing", ErrUnavailable))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// notAllowed answers 405 with the methods allowed.
func (n *Node) notAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		n.writeJSON(w, http.StatusMethodNotAllowed, struct {
			Error string `json:"error"`
		}{r.Method + " not allowed here"})
	}
}

// serveAppend: POST /log[?streams=a,b], body = the entry →
// {"position": n}. It takes its place (admitBody) before it reads the
// body.
func (n *Node) serveAppend(w http.ResponseWriter, r *http.Request) {
	streams, err := parseStreams(r.URL.Query().Get("streams"))
	if err != nil {
		n.writeError(w, err)
		return
	}
	id, err := requestID(r)
	if err != nil {
		n.writeError(w, err)
		return
	}
	release, ok := n.admitBody(w, r, n.opts.MaxValueBytes)
	if !ok {
		return
	}
	defer release()
	limit := int64(n.opts.MaxValueBytes)
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
	pos, err := n.appendEntry(r.Context(), id, data, streams)
	if err != nil {
		n.writeError(w, err)
		return
	}
	n.writeJSON(w, http.StatusOK, struct {
		Position uint64 `json:"position"`
	}{pos})
}

// serveRead: GET /log/{position} → the entry's bytes.
func (n *Node) serveRead(w http.ResponseWriter, r *http.Request) {
	pos, err := parsePosition("position", r.PathValue("position"))
	if err != nil {
		n.writeError(w, err)
		return
	}
	data, err := n.read(r.Context(), pos)
	if err != nil {
		n.writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// serveRange: GET /log?from=a&to=b → [{"position", "data"}...], to
// exclusive (from defaults to 0, to to as far as the bounds allow).
func (n *Node) serveRange(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := parseOptional("from", q.Get("from"), 0)
	if err != nil {
		n.writeError(w, err)
		return
	}
	to, err := parseOptional("to", q.Get("to"), satAdd(from, MaxRangeEntries))
	if err != nil {
		n.writeError(w, err)
		return
	}
	if from > to {
		n.writeError(w, fmt.Errorf("%w: from %d is beyond to %d", errBadRequest, from, to))
		return
	}
	entries, err := n.readRange(r.Context(), from, to)
	if err != nil {
		n.writeError(w, err)
		return
	}
	n.writeJSON(w, http.StatusOK, nonNil(entries))
}

// serveTail: GET /log/tail → {"tail": n}.
func (n *Node) serveTail(w http.ResponseWriter, r *http.Request) {
	tail, err := n.barrier(r.Context())
	if err != nil {
		n.writeError(w, err)
		return
	}
	n.writeJSON(w, http.StatusOK, struct {
		Tail uint64 `json:"tail"`
	}{tail})
}

// serveTrim: POST /log/trim?before=n → {"trim": the trim point}.
func (n *Node) serveTrim(w http.ResponseWriter, r *http.Request) {
	before, err := parsePosition("before", r.URL.Query().Get("before"))
	if err != nil {
		n.writeError(w, err)
		return
	}
	id, err := requestID(r)
	if err != nil {
		n.writeError(w, err)
		return
	}
	trim, err := n.trim(r.Context(), id, before)
	if err != nil {
		n.writeError(w, err)
		return
	}
	n.writeJSON(w, http.StatusOK, struct {
		Trim uint64 `json:"trim"`
	}{trim})
}

// serveStream: GET /streams/{name}?from=a → [{"position", "data"}...].
func (n *Node) serveStream(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := validStream(name); err != nil {
		n.writeError(w, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	from, err := parseOptional("from", r.URL.Query().Get("from"), 0)
	if err != nil {
		n.writeError(w, err)
		return
	}
	entries, err := n.readStream(r.Context(), name, from)
	if err != nil {
		n.writeError(w, err)
		return
	}
	n.writeJSON(w, http.StatusOK, nonNil(entries))
}

// Status is the body of GET /status: this member's id, the view it last
// saw, whether it takes part in it, and how far its replica goes.
type Status struct {
	ID      convoy.NodeID   `json:"id"`
	Epoch   uint64          `json:"epoch"`
	Members []convoy.NodeID `json:"members"`
	Serving bool            `json:"serving"`
	// Applied is the last delivery index applied here.
	Applied uint64 `json:"applied"`
	// Trim and Tail bound the positions held here: [Trim, Tail).
	Trim uint64 `json:"trim"`
	Tail uint64 `json:"tail"`
	// Group is the library's account of this member (convoy.Group.Status).
	Group *convoy.Status `json:"group,omitempty"`
}

// serveStatus: GET /status → Status.
func (n *Node) serveStatus(w http.ResponseWriter, _ *http.Request) {
	v, serving := n.g.View()
	p := n.st.progress()
	s := Status{ID: n.self, Epoch: v.Epoch, Members: []convoy.NodeID{}, Serving: serving && !n.closed(),
		Applied: p.applied, Trim: p.trim, Tail: p.tail}
	if sg, ok := n.g.(interface{ Status() convoy.Status }); ok {
		gs := sg.Status()
		s.Group = &gs
	}
	for _, m := range v.Members {
		s.Members = append(s.Members, m.ID)
	}
	n.writeJSON(w, http.StatusOK, s)
}

// requestID returns the request's Idempotency-Key, or a random id if it
// has none (a retry is then applied again).
func requestID(r *http.Request) (string, error) {
	id := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(id) > MaxRequestID {
		return "", fmt.Errorf("%w: Idempotency-Key of %d bytes, at most %d", errBadRequest, len(id), MaxRequestID)
	}
	if id == "" {
		id = rand.Text()
	}
	return id, nil
}

// parseStreams parses "a,b": at most MaxStreams valid names; a name given
// twice counts once.
func parseStreams(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		if err := validStream(name); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadRequest, err)
		}
		if name == "." || name == ".." {
			// GET /streams/{name} could not read it: the path cleans to
			// another.
			return nil, fmt.Errorf("%w: %w: %q names no path segment", errBadRequest, errStreamName, name)
		}
		dup := false
		for _, prev := range out {
			dup = dup || prev == name
		}
		if !dup {
			out = append(out, name)
		}
		if len(out) > MaxStreams {
			return nil, fmt.Errorf("%w: more than %d streams", errBadRequest, MaxStreams)
		}
	}
	return out, nil
}

func parsePosition(name, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a position", errBadRequest, name, s)
	}
	return v, nil
}

func parseOptional(name, s string, def uint64) (uint64, error) {
	if s == "" {
		return def, nil
	}
	return parsePosition(name, s)
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

func nonNil(entries []Entry) []Entry {
	if entries == nil {
		return []Entry{}
	}
	return entries
}

func (n *Node) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		n.log.Debug("writing a response", "err", err)
	}
}

// writeError answers with the status err maps to and {"error": "..."}.
func (n *Node) writeError(w http.ResponseWriter, err error) {
	status, msg := statusOf(err), err.Error()
	switch status {
	case http.StatusNotFound:
		msg = "unwritten"
	case http.StatusGone:
		msg = "trimmed"
	case http.StatusInternalServerError:
		n.log.Error("request failed", "err", err)
	}
	n.writeJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnwritten):
		return http.StatusNotFound
	case errors.Is(err, ErrTrimmed):
		return http.StatusGone
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
