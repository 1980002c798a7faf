package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestMessageSpans: in durable delivery, every member records a span for
// each sampled message, from its sending or receipt to its delivery,
// with the steps in between; the spans of one message on every member
// share one trace, and no other message gets one.
func TestMessageSpans(t *testing.T) {
	const n, each, every = 3, 12, 4
	eps, members, done := memMembers(t, n)
	defer done()
	recs := make([]*recorder, n)
	spans := make([]*tracetest.SpanRecorder, n)
	var cfgs []Config
	for i := range eps {
		recs[i] = newRecorder()
		spans[i] = tracetest.NewSpanRecorder()
		cfgs = append(cfgs, Config{
			Self: members[i].ID, Members: members, Endpoint: eps[i], Mode: Atomic,
			Durable:        &DurableConfig{Dir: t.TempDir()},
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans[i])),
			TraceMessages:  every,
		})
	}
	groups, closeAll := openAll(t, cfgs, func(i int) Handler { return recs[i].handle })
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := range each {
		if _, err := groups[0].Send(ctx, fmt.Appendf(nil, "m%d", k), WaitDelivered()); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range recs {
		r.wait(t, each)
	}
	sender := members[0].ID
	traces := make(map[int64]string) // seq → trace id
	for i, rec := range spans {
		var seqs []int64
		for _, s := range rec.Ended() {
			if s.Name() != "convoy.message" {
				continue
			}
			var seq, from, index int64 = -1, -1, -1
			for _, kv := range s.Attributes() {
				switch kv.Key {
				case "convoy.seq":
					seq = kv.Value.AsInt64()
				case "convoy.sender":
					from = kv.Value.AsInt64()
				case "convoy.index":
					index = kv.Value.AsInt64()
				}
			}
			var steps []string
			for _, e := range s.Events() {
				steps = append(steps, e.Name)
			}
			first := "received"
			if i == 0 {
				first = "sent"
			}
			if want := []string{first, "ordered", "persisted", "delivered"}; !slices.Equal(steps, want) {
				t.Errorf("member %d, message %d: steps %v, want %v", i+1, seq, steps, want)
			}
			if from != int64(sender) || seq%every != 0 || index < 1 {
				t.Errorf("member %d: span of message %d from %d at index %d", i+1, seq, from, index)
			}
			tid := s.SpanContext().TraceID().String()
			if prev, ok := traces[seq]; ok && prev != tid {
				t.Errorf("message %d: trace %s at member %d, %s elsewhere", seq, tid, i+1, prev)
			}
			traces[seq] = tid
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		if want := []int64{4, 8, 12}; !slices.Equal(seqs, want) {
			t.Errorf("member %d traced messages %v, want %v", i+1, seqs, want)
		}
	}
	if len(traces) != 3 {
		t.Errorf("%d traces, want 3", len(traces))
	}
}
