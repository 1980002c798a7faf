package paxos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/examples/paxos/wire"
	"github.com/convoy-gcs/convoy/internal/admit"
)

// IndexHeader carries, on KV responses, the delivery index the answer
// reflects: for a read, the applied index it was read at; for a write,
// the index it was applied at.
const IndexHeader = "X-Convoy-Index"

// IdempotencyHeader carries a write's request id: writes with the same
// id are applied once, and a retry gets the original result.
const IdempotencyHeader = "Idempotency-Key"

// IssuedHeader carries a write's issued time, in Unix nanoseconds (a
// decimal integer): the time of the first attempt of its request that
// may have reached the group, the same on every retry (see
// RequestLifetime). Without it, the member that reads the request stamps
// it with its own clock. A time more than MaxIssuedAhead ahead of the
// member's clock gets 400; one more than RequestLifetime behind it gets
// 409, as a write that expired.
const IssuedHeader = "Request-Issued"

// Handler returns the HTTP/JSON API of this member.
func (n *Node) Handler() http.Handler { return n.handler }

func (n *Node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", n.handleStatus)
	mux.HandleFunc("GET "+wire.StreamPath, n.handleStream)
	mux.HandleFunc("PUT /kv/{key}", n.handlePut)
	mux.HandleFunc("GET /kv/{key}", n.handleGet)
	mux.HandleFunc("DELETE /kv/{key}", n.handleDelete)
	mux.HandleFunc("POST /kv/{key}/cas", n.handleCAS)
	mux.HandleFunc("/kv/{$}", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, "empty key")
	})
	mux.HandleFunc("/status", notAllowed("GET, HEAD"))
	mux.HandleFunc(wire.StreamPath, notAllowed("GET"))
	mux.HandleFunc("/kv/{key}", notAllowed("GET, HEAD, PUT, DELETE"))
	mux.HandleFunc("/kv/{key}/cas", notAllowed("POST"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	return mux
}

func notAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed here")
	}
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, n.Status())
}

// writeResponse is the body of a successful PUT or DELETE.
type writeResponse struct {
	Index uint64 `json:"index"`
}

// casRequest is the body of POST /kv/{key}/cas. Old nil expects the key
// to be absent.
type casRequest struct {
	Old *string `json:"old"`
	New *string `json:"new"`
}

// casResponse is the answer to a cas.
type casResponse struct {
	OK    bool   `json:"ok"`
	Index uint64 `json:"index"`
}

func (n *Node) handlePut(w http.ResponseWriter, r *http.Request) {
	key, id, issued, ok := n.writeArgs(w, r)
	if !ok {
		return
	}
	release, ok := n.admitBody(w, r, n.opts.MaxValueBytes, 2)
	if !ok {
		return
	}
	defer release()
	value, ok := readBody(w, r, n.opts.MaxValueBytes)
	if !ok {
		return
	}
	res, err := n.submit(r.Context(), command{op: opPut, id: id, issued: issued, key: key, value: value})
	if err != nil {
		n.writeFailure(w, r, err)
		return
	}
	w.Header().Set(IndexHeader, strconv.FormatUint(res.index, 10))
	writeJSON(w, http.StatusOK, writeResponse{Index: res.index})
}

func (n *Node) handleDelete(w http.ResponseWriter, r *http.Request) {
	key, id, issued, ok := n.writeArgs(w, r)
	if !ok {
		return
	}
	release, ok := n.admitHTTP(w, 0)
	if !ok {
		return
	}
	defer release()
	res, err := n.submit(r.Context(), command{op: opDelete, id: id, issued: issued, key: key})
	if err != nil {
		n.writeFailure(w, r, err)
		return
	}
	w.Header().Set(IndexHeader, strconv.FormatUint(res.index, 10))
	if !res.ok {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	writeJSON(w, http.StatusOK, writeResponse{Index: res.index})
}

func (n *Node) handleCAS(w http.ResponseWriter, r *http.Request) {
	key, id, issued, ok := n.writeArgs(w, r)
	if !ok {
		return
	}
	// Its body, its decoded values and its command count.
	release, ok := n.admitBody(w, r, n.opts.casBodyLimit(), 4)
	if !ok {
		return
	}
	defer release()
	body, ok := readBody(w, r, n.opts.casBodyLimit())
	if !ok {
		return
	}
	var req casRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "bad JSON: data after the object")
		return
	}
	if req.New == nil {
		writeError(w, http.StatusBadRequest, `"new" is required`)
		return
	}
	c := command{op: opCAS, id: id, issued: issued, key: key, value: []byte(*req.New)}
	if req.Old != nil {
		c.hasOld, c.old = true, []byte(*req.Old)
	}
	if len(c.value) > n.opts.MaxValueBytes || len(c.old) > n.opts.MaxValueBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a value is above %d bytes", n.opts.MaxValueBytes))
		return
	}
	res, err := n.submit(r.Context(), c)
	if err != nil {
		n.writeFailure(w, r, err)
		return
	}
	w.Header().Set(IndexHeader, strconv.FormatUint(res.index, 10))
	writeJSON(w, http.StatusOK, casResponse{OK: res.ok, Index: res.index})
}

// handleGet answers a read: linearizable by default (after a barrier),
// from local state at once with ?stale=true.
func (n *Node) handleGet(w http.ResponseWriter, r *http.Request) {
	key, ok := keyOf(w, r)
	if !ok {
		return
	}
	release, ok := n.admitHTTP(w, 0)
	if !ok {
		return
	}
	defer release()
	stale := false
	if s := r.URL.Query().Get("stale"); s != "" {
		var err error
		if stale, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "stale: not a boolean")
			return
		}
	}
	if stale {
		if err := n.canServe(); err != nil {
			n.writeFailure(w, r, err)
			return
		}
	} else if _, err := n.barrier(r.Context()); err != nil {
		n.writeFailure(w, r, err)
		return
	}
	value, found, index := n.state.get(key)
	w.Header().Set(IndexHeader, strconv.FormatUint(index, 10))
	if !found {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(value)))
	w.WriteHeader(http.StatusOK)
	w.Write(value)
}

// canServe says why this member cannot answer a stale read, if it
// cannot: it is closing, or takes part in no view (its state may be far
// behind, or about to be replaced).
func (n *Node) canServe() error {
	if n.ctx.Err() != nil {
		return errClosing
	}
	if _, ok := n.g.View(); !ok {
		return errNotServing
	}
	return nil
}

// keyOf returns the request's key, or answers 400.
func keyOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.PathValue("key")
	switch {
	case key == "":
		writeError(w, http.StatusBadRequest, "empty key")
		return "", false
	case len(key) > MaxKeyBytes:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("key of %d bytes, limit %d", len(key), MaxKeyBytes))
		return "", false
	}
	return key, true
}

// writeArgs returns a write's key, request id and issued time, or
// answers 400 (or 409 for a write expired already).
func (n *Node) writeArgs(w http.ResponseWriter, r *http.Request) (key, id string, issued int64, ok bool) {
	if key, ok = keyOf(w, r); !ok {
		return "", "", 0, false
	}
	id = r.Header.Get(IdempotencyHeader)
	switch {
	case id == "":
		// No dedupe across retries: a fresh id.
		id = "server-" + rand.Text()
	case len(id) > MaxRequestIDBytes:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s of %d bytes, limit %d", IdempotencyHeader, len(id), MaxRequestIDBytes))
		return "", "", 0, false
	}
	if h := r.Header.Get(IssuedHeader); h != "" {
		var err error
		if issued, err = strconv.ParseInt(h, 10, 64); err != nil || issued <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: not a positive number of nanoseconds", IssuedHeader, h))
			return "", "", 0, false
		}
	}
	issued, err := n.issuedTime(issued)
	if err != nil {
		n.writeFailure(w, r, err)
		return "", "", 0, false
	}
	return key, id, issued, true
}

// admitHTTP admits a request that holds bytes (see Options.
// MaxRequestBytes), or answers 503 with Retry-After. The caller calls
// release once it has answered.
func (n *Node) admitHTTP(w http.ResponseWriter, bytes int) (release func(), ok bool) {
	return n.admit.AdmitHTTP(w, bytes, httpCapacity, n.refuse)
}

// admitBody admits a request with a body of at most limit bytes that
// holds factor times its body: its declared length, or limit if it
// declares none. It answers 413 for a declared length above limit, and
// 503 with Retry-After when the member is at capacity.
func (n *Node) admitBody(w http.ResponseWriter, r *http.Request, limit, factor int) (release func(), ok bool) {
	size, ok := admit.BodySize(r, limit)
	if !ok {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes, limit %d", r.ContentLength, limit))
		return nil, false
	}
	return n.admitHTTP(w, factor*size)
}

// readBody reads a body of at most limit bytes, or answers 413 or 400. A
// body of a declared length is read into a buffer of that length.
func readBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, bool) {
	if r.ContentLength > int64(limit) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes, limit %d", r.ContentLength, limit))
		return nil, false
	}
	if r.ContentLength >= 0 {
		// The server ends the body after the declared length, and fails
		// it before if the connection ends first.
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
			return nil, false
		}
		return b, true
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body above %d bytes", limit))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return nil, false
	}
	return b, true
}

// writeFailure answers a request that failed with err.
func (n *Node) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	n.logFailure(r.Method, r.URL.Path, err)
	writeError(w, statusOf(err), err.Error())
}

// logFailure logs a request that failed with err: as an error if it
// answers 500, else at debug level.
func (n *Node) logFailure(method, target string, err error) {
	if code := statusOf(err); code == http.StatusInternalServerError {
		n.log.Error("request failed", "method", method, "target", target, "err", err)
	} else {
		n.log.Debug("request failed", "method", method, "target", target, "status", code, "err", err)
	}
}

// statusOf maps an error to the status of its answer: 503 whenever this
// member cannot serve now and another member (or a later try) may; 409
// for a write that expired, which no retry changes.
func statusOf(err error) int {
	switch {
	case errors.Is(err, convoy.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errExpired):
		return http.StatusConflict
	case errors.Is(err, errIssuedAhead):
		return http.StatusBadRequest
	case errors.Is(err, convoy.ErrNotMember), errors.Is(err, convoy.ErrExcluded),
		errors.Is(err, convoy.ErrClosed), errors.Is(err, convoy.ErrLeft),
		errors.Is(err, convoy.ErrFailed), errors.Is(err, convoy.ErrBackpressure),
		errors.Is(err, errClosing), errors.Is(err, errNotServing), errors.Is(err, errAtCapacity),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errorResponse is the body of every error.
type errorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorResponse{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
