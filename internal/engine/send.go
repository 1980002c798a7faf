package engine

import (
	"context"
	"fmt"
)

// Level is how far a message has come.
type Level int

const (
	// Accepted: the group took the message (it is stamped and queued).
	Accepted Level = iota
	// Delivered: this member delivered it.
	Delivered
	// Stable: every member holds it (and, in Atomic mode, delivers it
	// once it learns so).
	Stable
)

func (l Level) String() string {
	switch l {
	case Accepted:
		return "accepted"
	case Delivered:
		return "delivered"
	case Stable:
		return "stable"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// SendOption changes how Send waits.
type SendOption func(*sendOptions)

type sendOptions struct{ level Level }

// sendOptionsOf applies opts. The options it passes to them escape to
// the heap, as they are calls through function values: Send calls it only
// when given options, and it is not inlined so that a Send without
// options allocates nothing for them.
//
//go:noinline
func sendOptionsOf(opts []SendOption) sendOptions {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WaitDelivered makes Send return once this member delivered the message.
func WaitDelivered() SendOption { return func(o *sendOptions) { o.level = Delivered } }

// WaitStable makes Send return once every member holds the message.
func WaitStable() SendOption { return func(o *sendOptions) { o.level = Stable } }

// Receipt is convoy.Receipt: a sent message's sequence number and, once
// Send saw it delivered, where it landed.
type Receipt struct {
	Topic        string
	Seq          uint64
	Epoch, Index uint64
}

// msgID names an own message: its sequence number among this member's
// messages to the group (topic "") or on a topic.
type msgID struct {
	topic string
	seq   uint64
}

type waiter struct {
	level Level
	done  chan waitResult
}

// waitResult ends a waiter: how the message fared, and where it was
// delivered (a waiter for Delivered).
type waitResult struct {
	err          error
	epoch, index uint64
}

// Send multicasts payload to the group. It waits until the message is
// accepted — which, when this member's window of undelivered messages is
// full, waits for space (or, with Config.NoWait, fails with
// ErrBackpressure) — or further with WaitDelivered or WaitStable. The group
// owns payload from the call on: do not modify it.
//
// It returns ErrTooLarge above MaxMessageBytes, ErrClosed after Close, an
// error wrapping ErrFailed after the group failed, and the context's error
// if it ends first (the message may still be delivered, unless the context
// had ended before the call: then nothing is sent).
func (g *Group) Send(ctx context.Context, payload []byte, opts ...SendOption) (Receipt, error) {
	return g.submit(ctx, "", payload, opts)
}

// submit is Send, or Publish on topic (not ""): the two share the window
// and the turn, so that a member's messages reach its loop in the order
// they were accepted, each numbered in its channel.
func (g *Group) submit(ctx context.Context, topic string, payload []byte, opts []SendOption) (Receipt, error) {
	var o sendOptions
	if len(opts) > 0 {
		o = sendOptionsOf(opts)
	}
	if len(payload) > g.cfg.MaxMessageBytes {
		return Receipt{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(payload), g.cfg.MaxMessageBytes)
	}
	if err := ctx.Err(); err != nil {
		return Receipt{}, err // (the fast paths below would not notice)
	}
	// One sender at a time takes a sequence number and queues its message,
	// so that numbers follow queue order. The loop never takes this. The
	// turn and the queue are tried first on their own: a select that
	// includes ctx also locks ctx's channel, which the concurrent sends of
	// one caller (requests of one connection, say) often share.
	if !tryPut(g.sendTurn, struct{}{}) {
		select {
		case g.sendTurn <- struct{}{}:
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}
	turn := true
	defer func() {
		if turn {
			<-g.sendTurn
		}
	}()
	g.mu.Lock()
	for waited := false; ; waited = true {
		if err := g.errDoneLocked(); err != nil {
			g.mu.Unlock()
			return Receipt{}, err
		}
		if g.windowOpenLocked(len(payload)) {
			break
		}
		if g.cfg.NoWait {
			g.mu.Unlock()
			g.m.backpressure.Add(ctx, 1, g.m.refused.add...)
			return Receipt{}, ErrBackpressure
		}
		if !waited {
			g.m.backpressure.Add(ctx, 1, g.m.waited.add...)
		}
		// Only the sender holding the turn waits here, so one kick
		// (buffered) is enough to wake it; a stale kick costs a recheck.
		g.mu.Unlock()
		select {
		case <-g.space:
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
		g.mu.Lock()
	}
	if topic != "" {
		if err := g.canPublishLocked(topic); err != nil {
			g.mu.Unlock()
			return Receipt{}, err
		}
	}
	seq := g.nextSeqLocked(topic)
	g.mu.inflight++
	g.mu.inflightBytes += len(payload)
	g.mu.sending++
	g.mu.sendingBytes += len(payload)
	g.mu.queued++
	g.mu.queuedBytes += len(payload)
	var w waiter
	if o.level > Accepted {
		w = waiter{level: o.level, done: make(chan waitResult, 1)}
		id := msgID{topic, seq}
		g.mu.waiters[id] = append(g.mu.waiters[id], w)
	}
	g.mu.Unlock()
	ev := event{kind: evSend, payload: payload, topic: topic}
	if g.host != nil {
		g.host.post(g, ev)
		g.m.sent(len(payload))
		return Receipt{Topic: topic, Seq: seq}, nil // the simulation waits for no level
	}
	if !tryPut(g.events, ev) {
		select {
		case g.events <- ev:
		case <-g.stop:
			return Receipt{}, ErrClosed
		case <-ctx.Done():
			// Not queued: give the number back (no later one was taken, as
			// this sender holds the turn).
			g.mu.Lock()
			g.unnumberLocked(topic)
			g.mu.inflight--
			g.mu.inflightBytes -= len(payload)
			g.mu.sending--
			g.mu.sendingBytes -= len(payload)
			g.mu.queued--
			g.mu.queuedBytes -= len(payload)
			delete(g.mu.waiters, msgID{topic, seq})
			g.mu.Unlock()
			return Receipt{}, ctx.Err()
		}
	}
	g.m.sent(len(payload))
	<-g.sendTurn
	turn = false
	if w.done == nil {
		return Receipt{Topic: topic, Seq: seq}, nil
	}
	select {
	case res := <-w.done:
		return Receipt{Topic: topic, Seq: seq, Epoch: res.epoch, Index: res.index}, res.err
	case <-ctx.Done():
		return Receipt{Topic: topic, Seq: seq}, ctx.Err()
	}
}

// tryPut puts v in ch if it has room, without waiting.
func tryPut[T any](ch chan T, v T) bool {
	select {
	case ch <- v:
		return true
	default:
		return false
	}
}

// nextSeqLocked numbers an own message on topic ("": to the group).
func (g *Group) nextSeqLocked(topic string) uint64 {
	if topic == "" {
		seq := g.mu.nextSeq
		g.mu.nextSeq++
		return seq
	}
	g.mu.pubSeq[topic]++
	return g.mu.pubSeq[topic]
}

// unnumberLocked gives back the number nextSeqLocked just gave.
func (g *Group) unnumberLocked(topic string) {
	if topic == "" {
		g.mu.nextSeq--
		return
	}
	g.mu.pubSeq[topic]--
}

// ownDelivered records that own message d was delivered locally and
// releases window space and waiters.
func (g *Group) ownDelivered(d *Delivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.inflight--
	g.mu.inflightBytes -= len(d.Payload)
	g.mu.delivered = d.Seq
	g.spaceFreedLocked()
	g.wakeLocked(msgID{"", d.Seq}, Delivered, waitResult{epoch: d.Epoch, index: d.Index})
}

// windowOpenLocked reports whether a message of n bytes fits in the
// window. A message larger than the byte window goes alone.
func (g *Group) windowOpenLocked(n int) bool {
	fits := func(msgs, bytes int) bool {
		return msgs == 0 || (msgs < g.cfg.WindowMessages && bytes+n <= g.cfg.WindowBytes)
	}
	return fits(g.mu.inflight, g.mu.inflightBytes) && fits(g.mu.sending, g.mu.sendingBytes)
}

// spaceFreedLocked wakes the sender waiting for window space, if any.
func (g *Group) spaceFreedLocked() {
	select {
	case g.space <- struct{}{}:
	default:
	}
}

// ownStable records that own messages up to seq are held everywhere.
func (g *Group) ownStable(seq uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := g.mu.stable + 1; s <= seq; s++ {
		g.wakeLocked(msgID{"", s}, Stable, waitResult{})
	}
	g.mu.stable = max(g.mu.stable, seq)
}

// wakeLocked completes the waiters of message id for level with res.
// Levels are reached independently: a message is stable (held
// everywhere) before it is delivered when delivery waits for more
// (durable delivery waits for every member's disk).
func (g *Group) wakeLocked(seq msgID, level Level, res waitResult) {
	ws := g.mu.waiters[seq]
	if len(ws) == 0 {
		return
	}
	keep := ws[:0]
	for _, w := range ws {
		if w.level == level {
			w.done <- res
		} else {
			keep = append(keep, w)
		}
	}
	if len(keep) == 0 {
		delete(g.mu.waiters, seq)
	} else {
		g.mu.waiters[seq] = keep
	}
}

func (g *Group) wakeAllLocked(err error) {
	g.wakeDurableLocked()
	for seq, ws := range g.mu.waiters {
		for _, w := range ws {
			w.done <- waitResult{err: err}
		}
		delete(g.mu.waiters, seq)
	}
	g.spaceFreedLocked()
}
