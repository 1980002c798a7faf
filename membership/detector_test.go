package membership

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// detectorNet runs detectors over a simulated network where messages take
// one step to arrive, members can crash and links can be cut.
type detectorNet struct {
	t       *testing.T
	ds      []*Detector
	now     int64
	crashed map[int]bool
	cut     map[[2]int]bool
	// paused[m] is when paused member m runs again; held[m] the messages
	// that reached it meanwhile, taken in after its first tick.
	paused map[int]int64
	held   map[int][]Message
	// windows[m] are m's pauses to come, [start, end), in order.
	windows  map[int][][2]int64
	inflight []Message
	out      *strings.Builder
	verdicts map[int][]Verdict // by confirming member
}

func (n *detectorNet) blocked(m Message) bool {
	return n.crashed[m.From] || n.crashed[m.To] || n.cut[[2]int{min(m.From, m.To), max(m.From, m.To)}]
}

// step delivers the messages in flight, then ticks every live member.
func (n *detectorNet) step() {
	msgs := n.inflight
	n.inflight = nil
	for i := range n.ds {
		if _, ok := n.paused[i]; !ok && len(n.windows[i]) > 0 && n.windows[i][0][0] <= n.now {
			n.paused[i] = n.windows[i][0][1]
			n.windows[i] = n.windows[i][1:]
		}
		if until, ok := n.paused[i]; ok && n.now >= until {
			// Its timer fires first, then it takes in what waited.
			delete(n.paused, i)
			n.ds[i].Tick(n.now)
			n.collect(i)
			msgs = append(n.held[i], msgs...)
			delete(n.held, i)
		}
	}
	for _, m := range msgs {
		if n.blocked(m) {
			continue
		}
		if _, ok := n.paused[m.To]; ok {
			n.held[m.To] = append(n.held[m.To], m)
			continue
		}
		if m.Kind != MsgHeartbeat {
			fmt.Fprintf(n.out, "t=%d m%d -> m%d %v about m%d alive=%v\n", n.now, m.From, m.To, m.Kind, m.Suspect, m.Alive)
		}
		if err := n.ds[m.To].Step(n.now, m); err != nil {
			fmt.Fprintf(n.out, "t=%d m%d rejects %v: %v\n", n.now, m.To, m.Kind, err)
		}
		n.collect(m.To)
	}
	for i, d := range n.ds {
		if _, paused := n.paused[i]; !n.crashed[i] && !paused {
			d.Tick(n.now)
			n.collect(i)
		}
	}
}

func (n *detectorNet) collect(i int) {
	rd := n.ds[i].Ready()
	n.inflight = append(n.inflight, rd.Messages...)
	for _, r := range rd.Raised {
		fmt.Fprintf(n.out, "t=%d m%d suspects m%d\n", n.now, i, r)
	}
	for _, v := range rd.Confirmed {
		fmt.Fprintf(n.out, "t=%d m%d confirms m%d failed: %s\n", n.now, i, v.Rank, v.Reason)
		n.verdicts[i] = append(n.verdicts[i], v)
	}
	for _, r := range rd.Refuted {
		fmt.Fprintf(n.out, "t=%d m%d: suspicion of m%d refuted\n", n.now, i, r)
	}
}

// TestDetectorScenarios runs the scripts in testdata/detector. Commands:
//
//	init n=5 [interval=10] [timeout=50] [stall=0] [probes=2]
//	crash m=2            the member stops; nothing reaches it or leaves it
//	pause m=1 for=60 [every=80 until=400]
//	                     the member does not run for a while (and again
//	                     every so often, until a time): it neither ticks
//	                     nor takes in messages, which wait for it
//	cut a=0 b=2          the link between two members drops everything
//	frontier m=1 f=10    a member's receive frontier
//	run until=200 [step=5]
//
// Times are nanoseconds; every step delivers what was sent in the last one.
func TestDetectorScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/detector", func(t *testing.T, path string) {
		var n *detectorNet
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			var out strings.Builder
			arg := func(key string, def int) int {
				for _, a := range td.CmdArgs {
					if a.Key == key && len(a.Vals) > 0 {
						v, err := strconv.Atoi(a.Vals[0])
						if err != nil {
							t.Fatal(err)
						}
						return v
					}
				}
				return def
			}
			switch td.Cmd {
			case "init":
				size := arg("n", 5)
				n = &detectorNet{t: t, crashed: map[int]bool{}, cut: map[[2]int]bool{}, verdicts: map[int][]Verdict{},
					paused: map[int]int64{}, held: map[int][]Message{}, windows: map[int][][2]int64{}}
				for i := 0; i < size; i++ {
					d, err := NewDetector(DetectorConfig{Self: i, Members: size,
						HeartbeatInterval: time.Duration(arg("interval", 10)), Timeout: time.Duration(arg("timeout", 50)),
						StallTimeout: time.Duration(arg("stall", 0)), Probes: arg("probes", 2)}, 0)
					if err != nil {
						t.Fatal(err)
					}
					n.ds = append(n.ds, d)
				}
				for i := range n.ds {
					fmt.Fprintf(&out, "m%d watches %v\n", i, Neighbours(size, i))
				}
			case "crash":
				n.crashed[arg("m", 0)] = true
			case "pause":
				m, d := arg("m", 0), int64(arg("for", 0))
				every, until := int64(arg("every", 0)), int64(arg("until", 0))
				for at := n.now; ; at += every {
					n.windows[m] = append(n.windows[m], [2]int64{at, at + d})
					if every <= 0 || at+every >= until {
						break
					}
				}
			case "disconnect":
				// Member m learns that its connection to peer broke.
				n.ds[arg("m", 0)].Disconnected(arg("peer", 1))
				n.out = &out
				n.collect(arg("m", 0))
			case "cut":
				a, b := arg("a", 0), arg("b", 1)
				n.cut[[2]int{min(a, b), max(a, b)}] = true
			case "frontier":
				n.ds[arg("m", 0)].SetFrontier(uint64(arg("f", 0)))
			case "run":
				n.out = &out
				for until, step := int64(arg("until", 100)), int64(arg("step", 5)); n.now < until; {
					n.now += step
					n.step()
				}
			default:
				t.Fatalf("unknown command %q", td.Cmd)
			}
			if out.Len() == 0 {
				return "ok"
			}
			return out.String()
		})
	})
}

// TestDetectorPauseCredit: a member whose every tick comes late (its loop
// always behind) puts at most MaxPauseCredit timeouts of a silent
// neighbour's silence down to its pauses: it still suspects the
// neighbour, within the timeout and that credit of the suspicion's due
// time.
func TestDetectorPauseCredit(t *testing.T) {
	const interval, timeout, step = 10, 50, 100 // each tick 90 late
	d, err := NewDetector(DetectorConfig{Self: 0, Members: 2, HeartbeatInterval: interval, Timeout: timeout, Probes: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	due := int64(3*timeout) + MaxPauseCredit*timeout // StartGrace, then the credit
	for now := int64(step); ; now += step {
		d.Tick(now)
		if rd := d.Ready(); len(rd.Raised) > 0 || len(rd.Confirmed) > 0 {
			if now > due+step {
				t.Fatalf("suspected at %d, want by %d", now, due+step)
			}
			if now < due {
				t.Fatalf("suspected at %d, before the credit ran out (%d): pauses not put down", now, due)
			}
			return
		}
		if now > 100*due {
			t.Fatal("never suspected")
		}
	}
}
