package rdma

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitTimeout bounds every wait in the tests.
const waitTimeout = 10 * time.Second

// event is one recorded handler call.
type event struct {
	kind string // "recv", "send", "signal", "failed"
	wr   uint64
	n    int
	imm  uint64
	err  error
}

func (e event) String() string {
	switch e.kind {
	case "recv":
		return fmt.Sprintf("recv(wr=%d n=%d imm=%d)", e.wr, e.n, e.imm)
	case "send":
		return fmt.Sprintf("send(wr=%d)", e.wr)
	case "signal":
		return fmt.Sprintf("signal(imm=%d)", e.imm)
	}
	return fmt.Sprintf("failed(%v)", e.err)
}

// recorder is a Handler that records every call and checks the contract:
// calls never overlap and nothing follows Failed.
type recorder struct {
	t      testing.TB
	name   string
	inCall atomic.Int32
	// onEvent, if set, runs inside the handler call.
	onEvent func(event)

	mu     sync.Mutex
	events []event
	failed bool
	notify chan struct{}
}

func newRecorder(t testing.TB, name string) *recorder {
	return &recorder{t: t, name: name, notify: make(chan struct{}, 1)}
}

func (r *recorder) record(e event) {
	if r.inCall.Add(1) != 1 {
		r.t.Errorf("%s: overlapping handler calls", r.name)
	}
	defer r.inCall.Add(-1)
	r.mu.Lock()
	if r.failed {
		r.t.Errorf("%s: %v after Failed", r.name, e)
	}
	if e.kind == "failed" {
		r.failed = true
	}
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.onEvent != nil {
		r.onEvent(e)
	}
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) RecvComplete(wr uint64, n int, imm uint64) {
	r.record(event{kind: "recv", wr: wr, n: n, imm: imm})
}
func (r *recorder) SendComplete(wr uint64) { r.record(event{kind: "send", wr: wr}) }
func (r *recorder) Signal(imm uint64)      { r.record(event{kind: "signal", imm: imm}) }
func (r *recorder) Failed(err error)       { r.record(event{kind: "failed", err: err}) }

// snapshot returns the events so far.
func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// count returns the number of events of kind so far.
func (r *recorder) count(kind string) int {
	n := 0
	for _, e := range r.snapshot() {
		if e.kind == kind {
			n++
		}
	}
	return n
}

// waitFor waits until cond holds for the recorded events.
func (r *recorder) waitFor(what string, cond func([]event) bool) []event {
	r.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		evs := r.snapshot()
		if cond(evs) {
			return evs
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			r.t.Fatalf("%s: timed out waiting for %s; events: %v", r.name, what, evs)
		}
	}
}

// waitCount waits until there are n events of kind and returns them.
func (r *recorder) waitCount(kind string, n int) []event {
	r.t.Helper()
	evs := r.waitFor(fmt.Sprintf("%d %s events", n, kind), func(evs []event) bool {
		c := 0
		for _, e := range evs {
			if e.kind == kind {
				c++
			}
		}
		return c >= n
	})
	var out []event
	for _, e := range evs {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// waitFailed waits for Failed and checks that its error wraps target.
func (r *recorder) waitFailed(target error) error {
	r.t.Helper()
	evs := r.waitCount("failed", 1)
	if !errors.Is(evs[0].err, target) {
		r.t.Fatalf("%s: Failed(%v), want an error wrapping %v", r.name, evs[0].err, target)
	}
	return evs[0].err
}
