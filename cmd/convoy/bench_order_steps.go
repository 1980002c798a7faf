package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// stepsTraceEvery is the bench's Config.TraceMessages in the durable
// latency phase: one message in stepsTraceEvery of each sender's is
// followed through its steps.
const stepsTraceEvery = 8

// messageSteps is an OpenTelemetry span processor that keeps, for the
// sampled messages the members sent and delivered, how long after it was
// sent each step of a message's life came on its sender's member: the
// spans "convoy.message" of Config.TraceMessages, whose events are the
// steps (sent, ordered, persisted, delivered). A phase gives it to every
// member through one TracerProvider.
type messageSteps struct {
	// since ignores the messages sent before it (Unix nanoseconds), so
	// that only the measured window counts.
	since atomic.Int64
	mu    sync.Mutex
	// steps holds, by step, the times from the send.
	steps map[string][]time.Duration
}

func newMessageSteps() *messageSteps {
	return &messageSteps{steps: make(map[string][]time.Duration)}
}

// OnEnd keeps the steps of a message its member sent (its span's first
// step is "sent") and delivered (its last).
func (s *messageSteps) OnEnd(sp sdktrace.ReadOnlySpan) {
	ev := sp.Events()
	if sp.Name() != "convoy.message" || len(ev) == 0 || ev[0].Name != "sent" || ev[len(ev)-1].Name != "delivered" ||
		sp.StartTime().UnixNano() < s.since.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ev {
		s.steps[e.Name] = append(s.steps[e.Name], e.Time.Sub(sp.StartTime()))
	}
}

// median returns the median time from a message's send to step, and
// false if no message kept reached it.
func (s *messageSteps) median(step string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.steps[step]
	return percentile(ds, 0.5), len(ds) > 0
}

// count returns how many messages kept reached step.
func (s *messageSteps) count(step string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps[step])
}

func (*messageSteps) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (*messageSteps) Shutdown(context.Context) error                  { return nil }
func (*messageSteps) ForceFlush(context.Context) error                { return nil }
