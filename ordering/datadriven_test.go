package ordering

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestCoreScenarios runs the scripts in testdata/core. Commands:
//
//	init n=3 mode=atomic|total|unordered [interval=100] [gap=10] [fanout=2] [skew=0,5,-3] [ahead=1000] [window=0]
//	     [topics=01/12/-] [topic-modes=atomic/total/atomic]
//	                                topics (from 1) by their subscribers' ranks
//	                                (- for none), and their modes (default atomic)
//	send m=0 at=5 [data=x]          member 0 sends at common time 5
//	publish m=0 t=1 at=5 [data=x]   member 0 publishes on topic 1
//	tick [m=1] at=100               one member (or all) ticks
//	want m=0 at=5 [ts=3]            member 0 asks for the barriers to pass ts
//	                                (default: its frontier), as Sync does
//	deliver from=0 to=1 at=7 [n=1] [topic=1]
//	                                step records queued on a link (the
//	                                group's, or a topic's)
//	inject from=0 to=1 at=7 kind=data seq=1 ts=3 [frontier=0]
//	hold from=0 to=1 [topic=1]      stabilize and settle leave that link alone
//	release                         until this
//	stabilize at=200                deliver everything, tick everyone, repeat
//	settle at=200 [until=1200]      stabilize, advancing time to each deadline,
//	                                until everything is delivered
//	state                           frontiers, barriers and buffers
//	check                           every member delivered the same sequence
//	                                (with topics: the guarantees of topics)
//
// Times are nanoseconds of the common clock; a member's clock adds its skew.
func TestCoreScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		var c *cluster
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var out strings.Builder
			if c != nil {
				c.out = &out
			}
			at := int64(intArg(t, d, "at", 0))
			switch d.Cmd {
			case "init":
				mode, err := ParseMode(strArg(d, "mode", "atomic"))
				if err != nil {
					t.Fatal(err)
				}
				cfg := Config{
					Mode:           mode,
					BeaconInterval: time.Duration(intArg(t, d, "interval", 100)),
					BeaconGap:      time.Duration(intArg(t, d, "gap", 10)),
					FanOut:         intArg(t, d, "fanout", 0),
					MaxAhead:       time.Duration(intArg(t, d, "ahead", 1000)),
					Window:         uint64(intArg(t, d, "window", 0)),
				}
				if s := strArg(d, "topics", ""); s != "" {
					modes := strings.Split(strArg(d, "topic-modes", ""), "/")
					for i, subs := range strings.Split(s, "/") {
						topic := Topic{Mode: Atomic}
						if i < len(modes) && modes[i] != "" {
							if topic.Mode, err = ParseMode(modes[i]); err != nil {
								t.Fatal(err)
							}
						}
						for _, r := range strings.TrimPrefix(subs, "-") {
							topic.Subscribers = append(topic.Subscribers, int(r-'0'))
						}
						cfg.Topics = append(cfg.Topics, topic)
					}
				}
				var skew []int64
				if s := strArg(d, "skew", ""); s != "" {
					for _, f := range strings.Split(s, ",") {
						v, err := strconv.ParseInt(f, 10, 64)
						if err != nil {
							t.Fatal(err)
						}
						skew = append(skew, v)
					}
				}
				c = newCluster(t, intArg(t, d, "n", 3), cfg, skew)
				return fmt.Sprintf("%d members, %v", len(c.cores), mode)
			case "send":
				c.out = &out
				c.send(intArg(t, d, "m", 0), at, strArg(d, "data", ""))
			case "publish":
				c.out = &out
				c.publish(intArg(t, d, "m", 0), at, intArg(t, d, "t", 1), strArg(d, "data", ""))
			case "tick":
				c.out = &out
				if d.HasArg("m") {
					c.tick(intArg(t, d, "m", 0), at)
				} else {
					for i := range c.cores {
						c.tick(i, at)
					}
				}
			case "want":
				c.out = &out
				m := intArg(t, d, "m", 0)
				core := c.cores[m]
				ts := core.Frontier()
				if d.HasArg("ts") {
					ts = Timestamp(intArg(t, d, "ts", 0))
				}
				core.Want(ts)
				c.collect(m)
			case "deliver":
				c.deliverOn([3]int{intArg(t, d, "from", 0), intArg(t, d, "to", 0), intArg(t, d, "topic", 0)}, intArg(t, d, "n", -1), at)
			case "inject":
				kind := map[string]Kind{"data": KindData, "beacon": KindBeacon, "want": KindWant, "up": KindUp, "down": KindDown}[strArg(d, "kind", "data")]
				r := Record{Kind: kind, Seq: uint64(intArg(t, d, "seq", 1)), TS: Timestamp(intArg(t, d, "ts", 0)), Frontier: Timestamp(intArg(t, d, "frontier", 0))}
				if kind == KindData {
					r.Payload = []byte(strArg(d, "data", "bad"))
				}
				from, to := intArg(t, d, "from", 0), intArg(t, d, "to", 1)
				if err := c.cores[to].Step(c.clock(to, at), from, r); err != nil {
					fmt.Fprintf(&out, "m%d rejects %s: %v\n", to, describeRecord(r), err)
				}
				c.collect(to)
			case "hold":
				if c.held == nil {
					c.held = make(map[[3]int]bool)
				}
				c.held[[3]int{intArg(t, d, "from", 0), intArg(t, d, "to", 0), intArg(t, d, "topic", 0)}] = true
			case "release":
				c.held = nil
			case "stabilize":
				c.stabilize(at)
			case "settle":
				end := c.settle(at, int64(intArg(t, d, "until", int(at)+1000)))
				fmt.Fprintf(&out, "settled at %d\n", end)
			case "state":
				for i, core := range c.cores {
					fmt.Fprintf(&out, "m%d: frontier=%s barrier=%s buffered=%d delivered=%d stable=%d rejected=%d",
						i, tsString(core.Frontier()), tsString(core.Barrier()), core.Buffered(), core.delivered, core.own.stable, core.stats.Rejected)
					for k := range core.topics {
						tp := &core.topics[k]
						fmt.Fprintf(&out, " | t%d: barrier=%s delivered=%d stable=%d", k+1, tsString(core.TopicBarrier(k+1)), tp.delivered, tp.own.stable)
					}
					fmt.Fprintln(&out)
				}
			case "check":
				if len(c.cfg.Topics) > 0 {
					if err := checkTopicDeliveries(c.cfg, c.delivered, c.sent, false); err != nil {
						return err.Error()
					}
					var b strings.Builder
					for i, ds := range c.delivered {
						fmt.Fprintf(&b, "m%d delivered %d\n", i, len(ds))
					}
					return "ok: the guarantees of topics hold\n" + b.String()
				}
				if err := sameSequences(c.delivered); err != nil {
					return err.Error()
				}
				return fmt.Sprintf("ok: %d messages in the same order on every member", len(c.delivered[0]))
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			if out.Len() == 0 {
				return "ok"
			}
			return out.String()
		})
	})
}

func tsString(ts Timestamp) string {
	if ts == ^Timestamp(0) {
		return "inf"
	}
	return strconv.FormatUint(uint64(ts), 10)
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var s string
	d.ScanArgs(t, key, &s)
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, s, err)
	}
	return v
}

func strArg(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

// sameSequences checks that every member delivered the same messages in
// the same order with the same indexes.
func sameSequences(delivered [][]Delivery) error {
	for i := 1; i < len(delivered); i++ {
		a, b := delivered[0], delivered[i]
		if len(a) != len(b) {
			return fmt.Errorf("m0 delivered %d messages, m%d %d", len(a), i, len(b))
		}
		for k := range a {
			if a[k].Index != b[k].Index || a[k].Sender != b[k].Sender || a[k].Seq != b[k].Seq || a[k].TS != b[k].TS || string(a[k].Payload) != string(b[k].Payload) {
				return fmt.Errorf("position %d: m0 %s, m%d %s", k, describeDelivery(a[k]), i, describeDelivery(b[k]))
			}
		}
	}
	return nil
}
