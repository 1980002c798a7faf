package engine

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/internal/vsync"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/ordering"
)

// loop owns the current view: it feeds its ordering core (and failure
// detector) sends, records, signals and time, carries out what they
// return, and, in a view-managed group, moves from view to view. It is the
// only goroutine that touches them.
func (g *Group) loop(r *runner) {
	defer g.loopWG.Done()
	defer func() {
		r.endSyncs(g.ended())
		r.endChange()
		g.msgs.abandon("the group closed")
		r.waitSnapshots()
		r.dropNextInstall()
		r.v.close()
		if g.mem != nil && g.Err() != nil {
			g.mem.withdraw(g)
		}
	}()
	defer func() {
		if e := recover(); e != nil {
			g.log.Error("loop panicked", "panic", e, "stack", string(debug.Stack()))
			panic(e)
		}
		g.log.Debug("loop ended")
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// A member whose log failed ends at once, not only at its next write:
	// it may have nothing more to write, and the others' durable delivery
	// would wait for its disk as long as it stays.
	var diskFailed <-chan struct{}
	if g.disk != nil {
		diskFailed = g.disk.Failed()
	}
	r.publish()
	for {
		parts, snapEnd := r.snapEvents()
		select {
		case ev := <-g.events:
			if !r.handle(ev) {
				return
			}
			// Take whatever else is waiting before carrying out Ready, so
			// that busy periods batch.
			for more := true; more; {
				select {
				case ev := <-g.events:
					if !r.handle(ev) {
						return
					}
				default:
					more = false
				}
			}
		case <-g.synced:
			if r.v != nil && r.v.dur != nil {
				r.announcePersisted()
			}
		case s := <-parts:
			r.snapshotted(s)
		case <-snapEnd:
			r.snapEnded()
		case <-r.own:
			r.ownReleased()
		case <-diskFailed:
			r.diskErr = g.disk.Err()
		case <-timer.C:
		case <-g.stop:
			return
		}
		if !r.settle() {
			return
		}
		timer.Reset(max(r.deadline()-time.Duration(g.cfg.Clock()), 0))
	}
}

// runner carries the loop's state.
type runner struct {
	g *Group
	// v is the view this member takes part in; nil while it joins.
	v *view
	// vs is the view-change core of a view-managed group (nil with fixed
	// membership): this member's phase and incarnation, and what it
	// decided about its views. The loop carries out its actions.
	vs *vsync.Core
	// pending holds own messages accepted while v is ending: they wait
	// for the next view.
	pending []outMsg
	// restoring: this member joined v and waits for its state.
	restoring bool
	// installing says a transferred state is being installed off the
	// loop (installState), for installingView; nextInstall is a transfer
	// that ended meanwhile, installed after it (its sink is the runner's
	// until then).
	installing     bool
	installingView *view
	nextInstall    *stateInstall
	// afterInstall are the view-change core's actions that start a new
	// incarnation, which wait for an installation in progress.
	afterInstall []vsync.Action
	// snap is the job snapshotting the state for joiners, if any.
	snap *snapJob
	// own is the release channel of the Snapshot call reading the
	// state, if any: closed once it has.
	own <-chan struct{}
	// held holds, in order, the deliveries and views that wait while
	// this member's state is restored or snapshotted (see holding).
	held []durItem
	// pendingDonate is a view whose joiners wait for this member's
	// snapshot until an earlier snapshot job has ended and, in durable
	// delivery, until the previous view's messages are durable (and
	// applied).
	pendingDonate *view
	// snapWant holds the Snapshot calls waiting for the snapshots for
	// joiners.
	snapWant []snapRequest
	// sendTimes[i] is when own message sentBase+i was sent, for latency.
	sendTimes []int64
	sentBase  uint64
	// durq holds deliveries written to the durable log and not yet on
	// every member's disk (a topic's: on every subscriber's), in order.
	durq []durItem
	// tlog follows this member's topic entries in the durable log
	// (durtopics.go).
	tlog topicLog
	// ordered is the index of the last group message the ordering core
	// delivered to this member: a topic delivery follows it.
	ordered uint64
	// applied is the index of the last message handed to the
	// application (replayed from the durable log included).
	applied uint64
	// syncs are the Syncs waiting for deliveries (sync.go).
	syncs []syncWaiter
	// publishAt is when tick next publishes the loop's state (Status).
	publishAt int64
	// claimed is this member's last claim to restart the group from its
	// durable log (claimLog); zero if it made none.
	claimed membership.Recovery
	// diskErr is the durable log's failure: the loop ends on it.
	diskErr error
	// reported is the final report this member last wrote for its view
	// (see refreshReport).
	reported membership.Report
	// reportWrites follows the writes of the latest report (they end on
	// other goroutines).
	reportWrites reportWrites
	// change spans a view change, from the wedge to the next view (or
	// the exclusion).
	change trace.Span
}

// fail ends the group with err.
func (r *runner) fail(err error) {
	if r.vs != nil {
		r.vs.Failed()
	}
	r.g.fail(err)
}

// settle ends a batch of events: it reacts once per batch, so that
// beacons, tree records and heartbeats due now go out without waiting
// for a timer, and carries out what the view's core and detector
// returned. It returns false when the loop must stop (the durable log
// failed, say). The loop settles after each batch, and again at each
// deadline.
func (r *runner) settle() bool {
	if r.diskErr != nil {
		r.fail(fmt.Errorf("durable log: %w", r.diskErr))
		return false
	}
	r.tick()
	if !r.ready() {
		return false
	}
	r.checkSyncs()
	return true
}

// handle applies one event; it returns false when the loop must stop.
func (r *runner) handle(ev event) bool {
	g := r.g
	now := g.cfg.Clock()
	switch ev.kind {
	case evSend:
		g.mu.Lock()
		g.mu.queued--
		g.mu.queuedBytes -= len(ev.payload)
		g.mu.Unlock()
		switch {
		case r.v == nil:
			// Excluded meanwhile: the message's waiters were told.
		case r.ending():
			r.pending = append(r.pending, outMsg{ev.topic, ev.payload})
		default:
			r.sendMsg(now, outMsg{ev.topic, ev.payload})
		}
	case evRecord:
		if ev.v != r.v || r.v.core.Wedged() {
			// A record of an ended view, or of one this member stopped
			// in: its final report is written, and what it did not hold
			// then is beyond the cut.
			if ev.rec.Kind == ordering.KindData {
				g.m.fenced.Add(g.ctx, 1, g.m.late.add...)
			}
			return true
		}
		if ev.rec.Kind == ordering.KindData && g.msgs.every != 0 {
			g.msgs.step(msgKey{r.v.ids[ev.from], r.v.rec.Sent[ev.from] + ev.rec.Seq}, "received")
		}
		if err := r.v.core.Step(now, ev.from, ev.rec); err != nil {
			g.m.rejected.Add(context.Background(), 1)
			g.log.Warn("rejected record", "from", r.v.ids[ev.from], "epoch", r.v.rec.Epoch, "err", err)
		}
	case evFail:
		if ev.v != r.v {
			return true
		}
		if !g.dynamic() {
			r.fail(ev.err)
			return false
		}
		// The view cannot go on: end it. The detector and the other
		// members' reports say whom the next view leaves out.
		r.wedge("multicast group failed: " + ev.err.Error())
	case evSignal:
		if ev.v == r.v {
			r.signal(now, ev.from, ev.imm)
		}
	case evPersisted:
		if ev.v == r.v && r.v.dur != nil {
			r.persisted(ev.from, ev.imm)
		}
	case evLinkDown:
		if ev.v == r.v {
			r.v.linkDown(now, ev.from)
		}
	case evState:
		return r.onState(ev.state)
	case evSync:
		r.startSync(ev.imm, ev.syncReply, ev.syncGone)
	case evSnapshot:
		r.takeSnapshot(snapRequest{reply: ev.reply, release: ev.release})
	case evSuffix:
		if ev.v == r.v {
			return r.suffixed(ev.parts, ev.err)
		}
	case evRestored:
		if ev.v == r.v {
			return r.restored(ev.err)
		}
	case evInstalled:
		return r.stateInstalled(ev.v, ev.err)
	}
	return true
}

// outMsg is an own message for the loop to send: on a topic, or to the
// group (topic "").
type outMsg struct {
	topic   string
	payload []byte
}

// sendMsg hands an own message to the current view's core.
func (r *runner) sendMsg(now int64, m outMsg) {
	if m.topic == "" {
		r.send(now, m.payload)
		return
	}
	r.publishOn(now, m.topic, m.payload)
}

// publishOn hands an own message on topic to the current view's core.
func (r *runner) publishOn(now int64, topic string, payload []byte) {
	v := r.v
	id := v.topicIDs[topic]
	if _, _, err := v.core.Publish(now, id, payload); err != nil {
		// Publish checked the topic against the view it was accepted in,
		// and a view keeps every topic of the views before it.
		r.g.log.Error("message on a topic the view does not have", "topic", topic, "epoch", v.rec.Epoch, "err", err)
		return
	}
	v.pubs[id-1].sizes = append(v.pubs[id-1].sizes, len(payload))
}

// send hands an own message to the group to the current view's core.
func (r *runner) send(now int64, payload []byte) {
	seq, _ := r.v.core.Send(now, payload)
	r.g.msgs.step(msgKey{r.g.cfg.Self, r.v.rec.Sent[r.v.self] + seq}, "sent")
	if r.sentBase == 0 {
		r.sentBase = r.v.rec.Sent[r.v.self] + seq
	}
	r.sendTimes = append(r.sendTimes, now)
}

// tick tells the view's core and detector that time has passed.
func (r *runner) tick() {
	if r.v == nil {
		return
	}
	now := r.g.cfg.Clock()
	if r.vs != nil {
		for _, a := range r.vs.Tick(now) {
			r.do(a)
		}
	}
	r.v.core.Tick(now)
	if r.v.ctrlRetry != nil {
		r.v.reopenControl(r.g.ctx, now)
	}
	if r.v.det != nil {
		r.v.det.SetFrontier(membership.FrontierUnits(uint64(r.v.core.Frontier())))
		r.v.det.Tick(now)
	}
	if now >= r.publishAt {
		// At most once a millisecond: settle ticks after every batch.
		r.publish()
		r.publishAt = now + int64(time.Millisecond)
	}
}

// deadline returns when tick next has something to do, on the clock.
func (r *runner) deadline() time.Duration {
	if r.v == nil {
		return time.Duration(r.g.cfg.Clock()) + time.Hour
	}
	d := r.v.core.Deadline()
	if r.v.det != nil {
		d = min(d, r.v.det.Deadline())
	}
	if at := r.v.ctrlDeadline(); at != 0 {
		d = min(d, at)
	}
	if r.vs != nil {
		if at := r.vs.Deadline(); at != 0 {
			d = min(d, at)
		}
	}
	return time.Duration(d)
}

// ready carries out what the core and the detector returned. It returns
// false when the loop must stop.
func (r *runner) ready() bool {
	if r.v == nil {
		return true
	}
	g, v := r.g, r.v
	rd := v.core.Ready()
	if err := r.multicast(rd); err != nil {
		if !g.dynamic() {
			r.fail(err)
			return false
		}
		// The view cannot go on; what the core delivered is still handed
		// out below.
		r.wedge("multicast send failed: " + err.Error())
	}
	r.deliver(rd.Deliveries)
	r.recordLags()
	if rd.Stable > 0 {
		g.ownStable(v.rec.Sent[v.self] + rd.Stable)
	}
	if len(rd.TopicStable) > 0 {
		r.settlePublished(rd.TopicStable)
	}
	if v.det != nil {
		r.detectorReady()
	}
	return true
}

// recordLags records how far the view's barriers trail: the delivery and
// commit barriers this member's clock (Unordered mode has none), the
// durable barrier its log. A barrier below the view's opening (none yet
// in the view) trails by the time since.
func (r *runner) recordLags() {
	g, v, ctx := r.g, r.v, r.g.ctx
	if g.cfg.Mode != Unordered {
		now := g.cfg.Clock()
		opened := ordering.Timestamp(v.opened)
		g.m.barrierLag.Record(ctx, lag(now, max(v.core.Frontier(), opened)), g.m.delivery.rec...)
		g.m.barrierLag.Record(ctx, lag(now, max(v.core.CommitBarrier(), opened)), g.m.commit.rec...)
	}
	if v.dur != nil {
		g.m.durableLag.Record(ctx, int64(g.disk.Last()-min(v.dur.Barrier(), g.disk.Last())))
	}
}

// multicast sends the records and control records of rd.
func (r *runner) multicast(rd ordering.Ready) error {
	g, v, ctx := r.g, r.v, r.g.ctx
	for i := range rd.Records {
		rec := &rd.Records[i]
		frame := ordering.AppendRecord(g.frame(rec.Size()), rec)
		if rec.Kind == ordering.KindPublish {
			if err := v.net.publish(ctx, int(rec.Topic), frame); err != nil {
				return err
			}
			continue
		}
		if err := v.net.multicast(ctx, frame); err != nil {
			return err
		}
		switch rd.Records[i].Kind {
		case ordering.KindBeacon, ordering.KindTopicBeacon:
			g.m.control.Add(ctx, int64(len(v.ids)-1), g.m.beacon.add...)
		case ordering.KindWant:
			g.m.control.Add(ctx, int64(len(v.ids)-1), g.m.want.add...)
		}
	}
	var lastDown ordering.Timestamp
	for _, e := range rd.Control {
		if e.Record.Kind == ordering.KindDown {
			// One record reaches every child through the down group.
			if e.Record.TS == lastDown {
				continue
			}
			lastDown = e.Record.TS
			if err := v.net.down(ctx, ordering.AppendRecord(nil, &e.Record)); err != nil {
				return err
			}
			g.m.control.Add(ctx, int64(v.net.children()), g.m.down.add...)
			continue
		}
		if err := v.net.up(ctx, ordering.AppendRecord(nil, &e.Record)); err != nil {
			return err
		}
		g.m.control.Add(ctx, 1, g.m.up.add...)
	}
	return nil
}

// deliver hands deliveries of the current view to the application, or
// holds them while this member's state is being restored.
func (r *runner) deliver(ds []ordering.Delivery) {
	v := r.v
	for _, d := range ds {
		out := Delivery{
			Epoch: d.Epoch, Index: d.Index, Sender: v.ids[d.Sender],
			Seq: v.rec.Sent[d.Sender] + d.Seq, Timestamp: uint64(d.TS), Payload: d.Payload,
		}
		if d.Topic > 0 {
			t := &v.topics[d.Topic-1]
			out.Topic, out.Seq = t.name, t.sent[d.Sender]+d.Seq
			after := max(r.ordered, v.rec.Start)
			if r.holding() {
				// In durable delivery the log takes it at once, as a
				// group message that follows the log: the topic's
				// durable delivery must not wait either.
				it := durItem{d: out, after: after}
				if r.g.disk != nil {
					it.pos = r.appendTopic(out, after)
					it.logged = true
				}
				r.held = append(r.held, it)
			} else {
				r.handTopic(out, after, d.Sender == v.self)
			}
			continue
		}
		r.ordered = max(r.ordered, out.Index)
		r.g.msgs.ordered(msgKey{out.Sender, out.Seq}, out.Index, out.Epoch)
		if r.holding() {
			// In durable delivery the log takes it at once when it
			// follows what the log holds: the group's durable delivery
			// must not wait while this member's state is restored or
			// snapshotted, only its application does. (A joiner that
			// catches up from a suffix appends the suffix first: what
			// comes meanwhile waits for it.)
			logged := r.g.disk != nil && r.g.disk.Last()+1 == out.Index
			if logged {
				r.appendLog(out)
			}
			r.held = append(r.held, durItem{d: out, logged: logged})
			continue
		}
		r.hand(out, d.Sender == v.self)
	}
}

// hand passes one delivery on: to the durable log first when delivery is
// durable, straight to the application otherwise.
func (r *runner) hand(d Delivery, own bool) {
	if r.g.disk != nil {
		r.logDelivery(d, 0, 0)
		return
	}
	r.handNow(d, own)
}

// handTopic is hand for a topic delivery that follows group index after.
func (r *runner) handTopic(d Delivery, after uint64, own bool) {
	if r.g.disk != nil {
		r.logDelivery(d, after, 0)
		return
	}
	r.handNow(d, own)
}

// handNow gives one delivery to the application and settles own messages.
func (r *runner) handNow(d Delivery, own bool) {
	g := r.g
	if d.Topic != "" {
		g.m.delivered(len(d.Payload))
		h := g.handlers.get(d.Topic)
		if h == nil {
			h = g.h
		}
		if h != nil {
			h(d)
		}
		if own {
			g.ownTopicDelivered(&d)
		}
		return
	}
	g.m.delivered(len(d.Payload))
	g.msgs.delivered(msgKey{d.Sender, d.Seq})
	// An own message's latency ends as it is handed over, and is recorded
	// with the delivery counts, before the handler: what the handler
	// does (answer a request) may be watched for it.
	if own {
		if i := d.Seq - r.sentBase; i < uint64(len(r.sendTimes)) {
			g.m.latency.Record(g.ctx, time.Duration(g.cfg.Clock()-r.sendTimes[i]).Seconds(), g.m.mode.rec...)
		}
	}
	if g.h != nil {
		g.h(d)
	}
	r.applied = d.Index
	g.delivered.Store(d.Index)
	// Own messages count as delivered once the handler has seen them.
	if own {
		r.trimSendTimes(d.Seq)
		g.ownDelivered(&d)
	}
}

// trimSendTimes forgets send times of own messages up to seq.
func (r *runner) trimSendTimes(seq uint64) {
	drop := int(seq + 1 - r.sentBase)
	if drop <= 0 || drop > len(r.sendTimes) {
		return
	}
	r.sendTimes = r.sendTimes[drop:]
	r.sentBase = seq + 1
}
