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
// sampled messages the members sent and delivered, how long after its
// send each was ordered, persisted and delivered on its sender's member:
// the spans "convoy.message" of Config.TraceMessages, whose events are
// the steps. A phase gives it to every member through one
// TracerProvider.
type messageSteps struct {
	// since ignores the messages sent before it (Unix nanoseconds), so
	// that only the measured window counts.
	since atomic.Int64
	mu    sync.Mutex
	// ordered, persisted and delivered hold the times from the send to
	// that step of the messages kept that reached it. Every message kept
	// was delivered, so delivered has one per message kept.
	ordered, persisted, delivered []time.Duration
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
		d := e.Time.Sub(sp.StartTime())
		switch e.Name {
		case "ordered":
			s.ordered = append(s.ordered, d)
		case "persisted":
			s.persisted = append(s.persisted, d)
		case "delivered":
			s.delivered = append(s.delivered, d)
		}
	}
}

// summary returns how many messages were kept and the median time from
// their send to each step, over those that reached it; nil if some
// step was reached by none.
func (s *messageSteps) summary() *orderSteps {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ordered) == 0 || len(s.persisted) == 0 || len(s.delivered) == 0 {
		return nil
	}
	return &orderSteps{
		Messages:       len(s.delivered),
		OrderedP50Us:   micros(percentile(s.ordered, 0.5)),
		PersistedP50Us: micros(percentile(s.persisted, 0.5)),
		DeliveredP50Us: micros(percentile(s.delivered, 0.5)),
	}
}

func (*messageSteps) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (*messageSteps) Shutdown(context.Context) error                  { return nil }
func (*messageSteps) ForceFlush(context.Context) error                { return nil }
