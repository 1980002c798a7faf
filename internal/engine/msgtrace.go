package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// maxTracedMessages bounds the spans of sampled messages a member holds
// open: beyond it, it samples no more until some are delivered.
const maxTracedMessages = 1024

// msgKey names a message for its whole life: its sender and its
// sequence number among the sender's messages to the group.
type msgKey struct {
	sender NodeID
	seq    uint64
}

// tracedMsg is the span of a sampled message on this member.
type tracedMsg struct {
	span trace.Span
	// index is where the message was ordered, once it was (0 before).
	index uint64
	// persisted says this member's log has it on disk.
	persisted bool
}

// msgTracer follows sampled messages through this member (Config.
// TraceMessages): one message in every of each sender's, chosen by its
// sequence number, so that every member samples the same ones without a
// word on the wire. Each member records a span "convoy.message" per
// sampled message, from when it sent or first received it to its
// delivery, with events for the steps between (sent, received, ordered,
// logged, persisted, delivered); the spans of one message on every member
// share a trace, whose id the group's identity, the sender and the
// sequence number determine. It is used by the loop only.
type msgTracer struct {
	tr    trace.Tracer
	every uint64
	// group tells groups apart in the trace ids.
	group string
	open  map[msgKey]*tracedMsg
}

func newMsgTracer(tr trace.Tracer, every int, group string) *msgTracer {
	t := &msgTracer{tr: tr, group: group}
	if every > 0 {
		t.every = uint64(every)
		t.open = make(map[msgKey]*tracedMsg)
	}
	return t
}

// sampled reports whether the message with sequence number seq is
// traced.
func (t *msgTracer) sampled(seq uint64) bool { return t.every != 0 && seq%t.every == 0 }

// traceID is the trace of message k on every member.
func (t *msgTracer) traceID(k msgKey) (trace.TraceID, trace.SpanID) {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(k.sender))
	binary.BigEndian.PutUint64(b[8:], k.seq)
	sum := sha256.Sum256(append([]byte(t.group), b[:]...))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	return tid, sid
}

// step records that message k reached step on this member, opening its
// span if this is the first step seen here. It does nothing for a
// message not sampled.
func (t *msgTracer) step(k msgKey, step string, attrs ...attribute.KeyValue) *tracedMsg {
	if !t.sampled(k.seq) {
		return nil
	}
	m := t.open[k]
	if m == nil {
		if len(t.open) >= maxTracedMessages {
			return nil
		}
		tid, sid := t.traceID(k)
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
		_, span := t.tr.Start(ctx, "convoy.message", trace.WithAttributes(
			attribute.Int64("convoy.sender", int64(k.sender)),
			attribute.Int64("convoy.seq", int64(k.seq)),
		))
		m = &tracedMsg{span: span}
		t.open[k] = m
	}
	m.span.AddEvent(step, trace.WithAttributes(attrs...))
	return m
}

// ordered records that message k was ordered at index.
func (t *msgTracer) ordered(k msgKey, index, epoch uint64) {
	if m := t.step(k, "ordered"); m != nil {
		m.index = index
		m.span.SetAttributes(attribute.Int64("convoy.index", int64(index)), attribute.Int64("convoy.epoch", int64(epoch)))
	}
}

// synced records that this member's log has everything up to index on
// disk.
func (t *msgTracer) synced(index uint64) {
	for _, m := range t.open {
		if m.index != 0 && m.index <= index && !m.persisted {
			m.persisted = true
			m.span.AddEvent("persisted")
		}
	}
}

// delivered ends message k's span: the application has it.
func (t *msgTracer) delivered(k msgKey) {
	if !t.sampled(k.seq) {
		return
	}
	if m := t.open[k]; m != nil {
		m.span.AddEvent("delivered")
		m.span.End()
		delete(t.open, k)
	}
}

// abandonUnordered ends the spans of the messages not ordered yet: the
// view that carried them ended without.
func (t *msgTracer) abandonUnordered(why string) {
	for k, m := range t.open {
		if m.index == 0 {
			m.span.AddEvent("not delivered", trace.WithAttributes(attribute.String("convoy.reason", why)))
			m.span.End()
			delete(t.open, k)
		}
	}
}

// abandon ends every open span: the messages were not delivered here
// (the member left the view, or the group closed).
func (t *msgTracer) abandon(why string) {
	for k, m := range t.open {
		m.span.AddEvent("not delivered", trace.WithAttributes(attribute.String("convoy.reason", why)))
		m.span.End()
		delete(t.open, k)
	}
}

// traceEvery is how many messages of a sender's go per traced one; 0:
// none (negative TraceMessages, or nothing to record spans).
func (c Config) traceEvery() int {
	if _, noop := c.TracerProvider.(tracenoop.TracerProvider); noop || c.TraceMessages < 0 {
		return 0
	}
	return c.TraceMessages
}

// identity tells this group from others in the traces of its messages:
// the etcd prefix of a view-managed group, the epoch and members of a
// fixed one.
func (c Config) identity() string {
	if c.Etcd != nil {
		return "views:" + c.Etcd.Prefix
	}
	ids := make([]string, len(c.Members))
	for i, m := range c.Members {
		ids[i] = strconv.FormatUint(uint64(m.ID), 10)
	}
	slices.Sort(ids)
	return "fixed:" + strconv.FormatUint(c.Epoch, 10) + ":" + strings.Join(ids, ",")
}
