package ordering

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// cluster runs several cores over a simulated network of FIFO links, as
// the runtime would: every record a member multicasts goes to every other
// member on the link between them, in order; control records go to one.
type cluster struct {
	t     testing.TB
	cores []*Core
	skew  []int64 // added to the common time to get each member's clock
	links map[[2]int][]Record
	// delivered[i] is what member i delivered, in order.
	delivered [][]Delivery
	out       *strings.Builder
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
	c := &cluster{t: t, links: make(map[[2]int][]Record), delivered: make([][]Delivery, n), skew: make([]int64, n)}
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
		for j := range c.cores {
			if j != i {
				// Records must outlive the core's reuse of its slices.
				r.Payload = append([]byte(nil), r.Payload...)
				c.links[[2]int{i, j}] = append(c.links[[2]int{i, j}], r)
			}
		}
	}
	for _, e := range rd.Control {
		c.printf("m%d -> m%d %s\n", i, e.To, describeRecord(e.Record))
		c.links[[2]int{i, e.To}] = append(c.links[[2]int{i, e.To}], e.Record)
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
	c.cores[i].Send(c.clock(i, at), []byte(payload))
	c.collect(i)
}

func (c *cluster) tick(i int, at int64) {
	c.cores[i].Tick(c.clock(i, at))
	c.collect(i)
}

// deliverLink steps up to n records (all if n < 0) queued from member
// from to member to. It reports whether it stepped any.
func (c *cluster) deliverLink(from, to int, n int, at int64) bool {
	key := [2]int{from, to}
	q := c.links[key]
	if n < 0 || n > len(q) {
		n = len(q)
	}
	if c.overtake != nil && len(q) >= 2 && q[0].Kind == KindData && c.overtake() {
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
			moved = c.deliverLink(key[0], key[1], -1, at) || moved
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

func (c *cluster) pending() bool {
	for _, q := range c.links {
		if len(q) > 0 {
			return true
		}
	}
	return false
}

func (c *cluster) linkKeys() [][2]int {
	var keys [][2]int
	for k, q := range c.links {
		if len(q) > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a][0] != keys[b][0] {
			return keys[a][0] < keys[b][0]
		}
		return keys[a][1] < keys[b][1]
	})
	return keys
}

func describeRecord(r Record) string {
	switch r.Kind {
	case KindData:
		return fmt.Sprintf("data #%d ts=%d R=%d %q", r.Seq, r.TS, r.Frontier, r.Payload)
	case KindBeacon:
		return fmt.Sprintf("beacon #%d T=%d R=%d", r.Seq, r.TS, r.Frontier)
	case KindUp:
		return fmt.Sprintf("up %d", r.TS)
	case KindDown:
		return fmt.Sprintf("down %d", r.TS)
	}
	return fmt.Sprintf("%v", r)
}

func describeDelivery(d Delivery) string {
	return fmt.Sprintf("%d/%d m%d#%d ts=%d %q", d.Epoch, d.Index, d.Sender, d.Seq, d.TS, d.Payload)
}

// nopTB lets the cluster run outside a test (in property checks that
// report their own errors); its Fatal panics.
type nopTB struct{ testing.TB }

func (nopTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }
