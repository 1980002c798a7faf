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
	t        *testing.T
	ds       []*Detector
	now      int64
	crashed  map[int]bool
	cut      map[[2]int]bool
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
	for _, m := range msgs {
		if n.blocked(m) {
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
		if !n.crashed[i] {
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
				n = &detectorNet{t: t, crashed: map[int]bool{}, cut: map[[2]int]bool{}, verdicts: map[int][]Verdict{}}
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
