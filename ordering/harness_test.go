package ordering

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// cluster runs several cores over a simulated network of FIFO links, as
// the runtime would: every record a member multicasts goes to every other
// member on the link between them, in order; control records go to one.
// A publish record goes to its topic's subscribers only, on a link of
// its own per topic (a link is [from, to, topic], topic 0 the group's),
// which is not ordered with the others: a sender's groups are distinct
// RDMC groups.
type cluster struct {
	t     testing.TB
	cores []*Core
	cfg   Config
	skew  []int64 // added to the common time to get each member's clock
	links map[[3]int][]Record
	// delivered[i] is what member i delivered, in order; sent is what
	// the members sent and published.
	delivered [][]Delivery
	sent      []sentMsg
	out       *strings.Builder
	// held are the links stabilize and settle leave alone (a slow one).
	held map[[3]int]bool
	// onDeliver, if set, is called for every delivery (for invariants).
	onDeliver func(member int, d Delivery)
	// overtake, if set, is asked before each record is stepped whether the
	// next record on the link should go first when the current one is a
	// data record: a large message overtaken by what its sender sent next.
	overtake func() bool
}

func newCluster(t testing.TB, n int, cfg Config, skew []int64) *cluster {
	if t == nil {
		t = nopTB{}
	}
	c := &cluster{t: t, cfg: cfg, links: make(map[[3]int][]Record), delivered: make([][]Delivery, n), skew: make([]int64, n)}
	copy(c.skew, skew)
	for i := 0; i < n; i++ {
		cc := cfg
		cc.Self, cc.Members = i, n
		core, err := NewCore(cc, c.skew[i])
		if err != nil {
			t.Fatal(err)
		}
		c.cores = append(c.cores, core)
	}
	return c
}

func (c *cluster) printf(format string, args ...any) {
	if c.out != nil {
		fmt.Fprintf(c.out, format, args...)
	}
}

// collect carries out member i's Ready.
func (c *cluster) collect(i int) {
	rd := c.cores[i].Ready()
	for _, r := range rd.Records {
		c.printf("m%d multicasts %s\n", i, describeRecord(r))
		to := func(j int) bool { return j != i }
		if r.Kind == KindPublish {
			subs := c.cfg.Topics[r.Topic-1].Subscribers
			to = func(j int) bool { return j != i && slices.Contains(subs, j) }
		}
		for j := range c.cores {
			if to(j) {
				// Records must outlive the core's reuse of its slices.
				r.Payload = append([]byte(nil), r.Payload...)
				r.Bounds = slices.Clone(r.Bounds)
				k := [3]int{i, j, int(r.Topic)}
				c.links[k] = append(c.links[k], r)
			}
		}
	}
	for _, e := range rd.Control {
		c.printf("m%d -> m%d %s\n", i, e.To, describeRecord(e.Record))
		c.links[[3]int{i, e.To, 0}] = append(c.links[[3]int{i, e.To, 0}], e.Record)
	}
	for _, d := range rd.Deliveries {
		d.Payload = append([]byte(nil), d.Payload...)
		c.printf("m%d delivers %s\n", i, describeDelivery(d))
		c.delivered[i] = append(c.delivered[i], d)
		if c.onDeliver != nil {
			c.onDeliver(i, d)
		}
	}
}

func (c *cluster) clock(i int, at int64) int64 { return at + c.skew[i] }

func (c *cluster) send(i int, at int64, payload string) {
	c.sent = append(c.sent, sentMsg{i, 0, payload})
	c.cores[i].Send(c.clock(i, at), []byte(payload))
	c.collect(i)
}

func (c *cluster) publish(i int, at int64, topic int, payload string) {
	c.sent = append(c.sent, sentMsg{i, topic, payload})
	if _, _, err := c.cores[i].Publish(c.clock(i, at), topic, []byte(payload)); err != nil {
		c.printf("m%d cannot publish: %v\n", i, err)
	}
	c.collect(i)
}

func (c *cluster) tick(i int, at int64) {
	c.cores[i].Tick(c.clock(i, at))
	c.collect(i)
}

// deliverOn steps up to n records (all if n < 0) queued on link key
// (from, to, topic). It reports whether it stepped any.
func (c *cluster) deliverOn(key [3]int, n int, at int64) bool {
	from, to := key[0], key[1]
	q := c.links[key]
	if n < 0 || n > len(q) {
		n = len(q)
	}
	if c.overtake != nil && len(q) >= 2 && (q[0].Kind == KindData || q[0].Kind == KindPublish) && c.overtake() {
		q[0], q[1] = q[1], q[0]
	}
	for _, r := range q[:n] {
		if err := c.cores[to].Step(c.clock(to, at), from, r); err != nil {
			c.printf("m%d rejects %s: %v\n", to, describeRecord(r), err)
		}
		c.collect(to)
	}
	c.links[key] = q[n:]
	return n > 0
}

// stabilize delivers every queued record, repeatedly, at time at.
func (c *cluster) stabilize(at int64) {
	for {
		moved := false
		for _, key := range c.linkKeys() {
			if !c.held[key] {
				moved = c.deliverOn(key, -1, at) || moved
			}
		}
		for i := range c.cores {
			c.tick(i, at)
		}
		if !moved && !c.pending() {
			return
		}
	}
}

// settle runs the cluster from time at, ticking every member when its
// deadline comes, until every message is delivered everywhere and no record
// is in flight, or until time until. It returns the time it stopped.
func (c *cluster) settle(at, until int64) int64 {
	for t := at; ; {
		c.stabilize(t)
		if !c.pending() && c.quiet() {
			return t
		}
		next := until + 1
		for i, core := range c.cores {
			next = min(next, core.Deadline()-c.skew[i])
		}
		if next > until {
			return t
		}
		t = max(t+1, next)
	}
}

// quiet reports whether no member has a message waiting for a barrier,
// or a record waiting for its clock.
func (c *cluster) quiet() bool {
	for _, core := range c.cores {
		if core.Buffered() > 0 || core.Ahead() > 0 {
			return false
		}
	}
	return true
}

// pending reports whether records are in flight on links not held.
func (c *cluster) pending() bool {
	for k, q := range c.links {
		if len(q) > 0 && !c.held[k] {
			return true
		}
	}
	return false
}

func (c *cluster) linkKeys() [][3]int {
	var keys [][3]int
	for k, q := range c.links {
		if len(q) > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(a, b int) bool {
		for i := range keys[a] {
			if keys[a][i] != keys[b][i] {
				return keys[a][i] < keys[b][i]
			}
		}
		return false
	})
	return keys
}

func describeRecord(r Record) string {
	switch r.Kind {
	case KindData:
		return fmt.Sprintf("data #%d ts=%d R=%d %q", r.Seq, r.TS, r.Frontier, r.Payload)
	case KindBeacon:
		return fmt.Sprintf("beacon #%d T=%d R=%d", r.Seq, r.TS, r.Frontier)
	case KindWant:
		return fmt.Sprintf("want #%d W=%d R=%d", r.Seq, r.TS, r.Frontier)
	case KindUp:
		return fmt.Sprintf("up %d", r.TS)
	case KindDown:
		return fmt.Sprintf("down %d", r.TS)
	case KindPublish:
		return fmt.Sprintf("publish t%d #%d ts=%d %q", r.Topic, r.Seq, r.TS, r.Payload)
	case KindTopicBeacon:
		var b strings.Builder
		for _, x := range r.Bounds {
			fmt.Fprintf(&b, " t%d:%d", x.Topic, x.Seq)
		}
		return fmt.Sprintf("topic-beacon #%d T=%d R=%d%s", r.Seq, r.TS, r.Frontier, b.String())
	}
	return fmt.Sprintf("%v", r)
}

func describeDelivery(d Delivery) string {
	if d.Topic != 0 {
		return fmt.Sprintf("t%d %d/%d m%d#%d ts=%d %q", d.Topic, d.Epoch, d.Index, d.Sender, d.Seq, d.TS, d.Payload)
	}
	return fmt.Sprintf("%d/%d m%d#%d ts=%d %q", d.Epoch, d.Index, d.Sender, d.Seq, d.TS, d.Payload)
}

// nopTB lets the cluster run outside a test (in property checks that
// report their own errors); its Fatal panics.
type nopTB struct{ testing.TB }

func (nopTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }
