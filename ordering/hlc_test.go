package ordering

import (
	"math/rand/v2"
	"testing"
)

func TestHLC(t *testing.T) {
	type op struct {
		observe bool
		lead    Timestamp // a promise this far ahead of physical time
		v       int64     // physical time, or the stamp observed
		want    Timestamp
	}
	stamp := func(now int64, want Timestamp) op { return op{v: now, want: want} }
	observe := func(ts int64) op { return op{observe: true, v: ts} }
	promise := func(now int64, lead, want Timestamp) op { return op{lead: lead, v: now, want: want} }
	tests := []struct {
		name string
		ops  []op
	}{
		{"physical time plus one", []op{stamp(100, 101), stamp(200, 201)}},
		{"strictly increasing at one time", []op{stamp(100, 101), stamp(100, 102), stamp(100, 103)}},
		{"catches up with physical time", []op{stamp(100, 101), stamp(100, 102), stamp(150, 151)}},
		{"jumps past an observed stamp", []op{stamp(100, 101), observe(500), stamp(110, 501), stamp(120, 502)}},
		{"ignores an observed stamp behind it", []op{stamp(100, 101), observe(50), stamp(100, 102)}},
		{"an observed stamp behind physical time", []op{observe(50), stamp(100, 101)}},
		{"physical time overtakes an observed stamp", []op{observe(500), stamp(100, 501), stamp(1000, 1001)}},
		{"negative time counts as zero", []op{stamp(-5, 1), stamp(-1, 2)}},
		{"a promise ahead holds the stamps to it", []op{stamp(100, 101), promise(110, 50, 160), stamp(120, 160), stamp(130, 161), stamp(200, 201)}},
		{"a promise ahead of a clock further on", []op{observe(500), promise(100, 50, 501), stamp(100, 501)}},
		{"promises ahead of each other", []op{promise(100, 50, 150), promise(120, 50, 170), promise(120, 10, 170), stamp(150, 170)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c hlc
			for i, o := range tt.ops {
				if o.observe {
					c.observe(Timestamp(o.v))
					continue
				}
				if o.lead > 0 {
					if got := c.lead(o.v, o.lead); got != o.want {
						t.Fatalf("op %d: lead(%d, %d) = %d, want %d", i, o.v, o.lead, got, o.want)
					}
					continue
				}
				p := c.peek(o.v)
				if got := c.stamp(o.v); got != o.want || got != p {
					t.Fatalf("op %d: stamp(%d) = %d after peek %d, want %d", i, o.v, got, p, o.want)
				}
			}
		})
	}
}

// TestHLCRandom drives the clock with random physical times (never going
// backwards, as the core guarantees) and random observed stamps, and checks
// its promises: every stamp is above the last one, above physical time, and
// above every stamp observed; and a peek is a valid promise — no stamp
// issued at the same time or later is below it.
func TestHLCRandom(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		var (
			c        hlc
			now      int64
			last     Timestamp // last stamp issued
			observed Timestamp // highest stamp observed
			peeks    []Timestamp
		)
		for step := 0; step < 500; step++ {
			switch a := r.IntN(10); {
			case a < 3:
				now += int64(r.IntN(20))
			case a < 5:
				ts := Timestamp(max(now+int64(r.IntN(200))-100, 0))
				c.observe(ts)
				observed = max(observed, ts)
			case a < 7:
				peeks = append(peeks, c.peek(now))
			default:
				ts := c.stamp(now)
				if ts <= last {
					t.Fatalf("seed %d: stamp %d after %d", seed, ts, last)
				}
				if ts < Timestamp(now)+1 {
					t.Fatalf("seed %d: stamp %d at physical time %d", seed, ts, now)
				}
				if ts <= observed {
					t.Fatalf("seed %d: stamp %d after observing %d", seed, ts, observed)
				}
				for _, p := range peeks {
					if ts < p {
						t.Fatalf("seed %d: stamp %d below the earlier promise %d", seed, ts, p)
					}
				}
				last = ts
			}
		}
	}
}
