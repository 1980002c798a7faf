package ordering

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestViewEndProperties ends random atomic views abruptly — some members
// crash with records still in flight, the survivors wedge wherever they
// are — and checks how a view ends on the survivors: with the cut taken as
// the minimum of their final reports, every survivor ends the view with
// the same sequence of deliveries, nothing delivered before the wedge is
// outside the cut, every own message beyond the cut comes back for
// re-sending in order, and every message a survivor sent is either
// delivered or re-sent (none lost, none twice), and the others' messages
// beyond the cut are counted as discarded. Throughout, no member's commit
// barrier passes another's receive frontier. A planted fault (the cut as
// a maximum) must be caught.
func TestViewEndProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for _, fanOut := range []int{0, 2} {
		t.Run(fmt.Sprintf("fanout=%d", fanOut), func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				if err := runViewEnd(seed, fanOut, minCut); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
	t.Run("planted fault is caught", func(t *testing.T) {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			if runViewEnd(seed, 0, maxCut) != nil {
				return
			}
		}
		t.Fatal("a cut taken as the maximum of the reports went unnoticed")
	})
}

func minCut(reports [][]uint64) []uint64 {
	cut := slices.Clone(reports[0])
	for _, r := range reports[1:] {
		for s := range cut {
			cut[s] = min(cut[s], r[s])
		}
	}
	return cut
}

func maxCut(reports [][]uint64) []uint64 {
	cut := slices.Clone(reports[0])
	for _, r := range reports[1:] {
		for s := range cut {
			cut[s] = max(cut[s], r[s])
		}
	}
	return cut
}

func runViewEnd(seed uint64, fanOut int, cutOf func([][]uint64) []uint64) error {
	r := rand.New(rand.NewPCG(seed, 7))
	n := 3 + r.IntN(5)
	cfg := Config{Mode: Atomic, Epoch: 4, Start: 1000, BeaconInterval: 100, BeaconGap: time.Duration(5 + r.IntN(20)), FanOut: fanOut, MaxAhead: 10000}
	c := newCluster(nil, n, cfg, nil)
	c.overtake = func() bool { return r.IntN(4) == 0 }
	sent := make([][]string, n)
	now := int64(1000)
	for step := 0; step < 100+r.IntN(300); step++ {
		now += int64(r.IntN(8))
		switch a := r.IntN(10); {
		case a < 3:
			i := r.IntN(n)
			p := fmt.Sprintf("%d.%d", i, len(sent[i]))
			sent[i] = append(sent[i], p)
			c.send(i, now, p)
		case a < 8:
			keys := c.linkKeys()
			if len(keys) == 0 {
				continue
			}
			k := keys[r.IntN(len(keys))]
			c.deliverOn(k, 1+r.IntN(3), now)
		default:
			c.tick(r.IntN(n), now)
		}
		// Every member holds every message below any member's commit
		// barrier.
		for i, core := range c.cores {
			for j, other := range c.cores {
				if b, f := core.CommitBarrier(), other.Frontier(); b > f {
					return fmt.Errorf("step %d: m%d's commit barrier %d is beyond m%d's receive frontier %d", step, i, b, j, f)
				}
			}
		}
	}
	// Up to a minority crash; whatever is in flight from them is lost.
	crashed := make(map[int]bool)
	for len(crashed) < r.IntN((n+1)/2) {
		crashed[r.IntN(n)] = true
	}
	var survivors []int
	var reports [][]uint64
	for i, core := range c.cores {
		if crashed[i] {
			continue
		}
		core.Wedge()
		survivors = append(survivors, i)
		reports = append(reports, core.Held())
	}
	cut := cutOf(reports)
	ended := make([][]Delivery, 0, len(survivors))
	for k, i := range survivors {
		rest, resendMsgs, err := c.cores[i].Finish(Cut{Senders: cut})
		if err != nil {
			return fmt.Errorf("m%d: %w", i, err)
		}
		// The others' messages it held beyond the cut are discarded: at
		// least those of the prefixes it reported, at most all sent
		// beyond the cut (some may have arrived out of order).
		var least, most uint64
		for s, held := range reports[k] {
			if s != i {
				least += held - cut[s]
				most += uint64(len(sent[s])) - cut[s]
			}
		}
		if got := c.cores[i].Stats().Discarded; got < least || got > most {
			return fmt.Errorf("m%d discarded %d messages, want %d to %d", i, got, least, most)
		}
		all := append(slices.Clone(c.delivered[i]), rest...)
		for k, d := range all {
			if d.Index != cfg.Start+uint64(k)+1 || d.Epoch != cfg.Epoch {
				return fmt.Errorf("m%d: delivery %d has index %d/%d", i, k, d.Epoch, d.Index)
			}
			if d.Seq > cut[d.Sender] {
				return fmt.Errorf("m%d delivered m%d#%d beyond the cut %d", i, d.Sender, d.Seq, cut[d.Sender])
			}
		}
		// Own messages: delivered 1..cut, re-sent cut+1..sent, in order.
		if resend := payloadsOf(resendMsgs); !slices.Equal(texts(resend), sent[i][cut[i]:]) {
			return fmt.Errorf("m%d re-sends %q, want %q", i, texts(resend), sent[i][cut[i]:])
		}
		ended = append(ended, all)
	}
	if err := sameSequences(ended); err != nil {
		return err
	}
	var total uint64
	for _, s := range cut {
		total += s
	}
	if len(ended) > 0 && uint64(len(ended[0])) != total {
		return fmt.Errorf("the view ended with %d deliveries, the cut holds %d", len(ended[0]), total)
	}
	return nil
}

func payloadsOf(ms []Message) [][]byte {
	var out [][]byte
	for _, m := range ms {
		out = append(out, m.Payload)
	}
	return out
}

func texts(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func TestFinishRejects(t *testing.T) {
	c := newCluster(t, 2, Config{Mode: Atomic, BeaconInterval: 100}, nil)
	c.send(0, 10, "a")
	core := c.cores[1]
	if _, _, err := core.Finish(Cut{Senders: []uint64{0, 0}}); !errors.Is(err, ErrCut) {
		t.Fatalf("Finish before Wedge: %v, want ErrCut", err)
	}
	core.Wedge()
	for _, cut := range [][]uint64{{0}, {1, 0}, {0, 1}} {
		if _, _, err := core.Finish(Cut{Senders: cut}); !errors.Is(err, ErrCut) {
			t.Errorf("Finish(%v) with nothing held: %v, want ErrCut", cut, err)
		}
	}
	if err := core.Step(20, 0, Record{Kind: KindBeacon, Seq: 0, TS: 5}); err != nil {
		t.Fatalf("a wedged core must drop records quietly: %v", err)
	}
	if core.HasReady() {
		t.Fatal("a wedged core produced output")
	}
}

// TestWedgedDeadline: a wedged core has nothing to do, whatever the time
// — its deadline stays ahead of the clock the runtime ticks it with, or
// the runtime's timer would fire at once, again and again, once the core
// had been wedged for longer than the deadline's horizon.
func TestWedgedDeadline(t *testing.T) {
	c := newCluster(t, 2, Config{Mode: Atomic, BeaconInterval: 100}, nil)
	c.send(0, 10, "a")
	core := c.cores[1]
	core.Wedge()
	for _, now := range []int64{20, int64(time.Hour), 5 * int64(time.Hour)} {
		core.Tick(now)
		if d := core.Deadline(); d <= now {
			t.Errorf("wedged, ticked at %d: deadline %d", now, d)
		}
	}
}
