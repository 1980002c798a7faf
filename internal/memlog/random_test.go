package memlog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/convoy-gcs/convoy/persistence"
)

// TestRandomAgainstPersistence runs random operations, drawn from a
// seed, on persistence.Log and on memlog.Log side by side and requires
// the same outcome from both after every one: the same error (by
// sentinel) or the same result. As in TestConformance, an operation
// whose result depends on syncs first waits for them.
func TestRandomAgainstPersistence(t *testing.T) {
	seeds, steps := 24, 300
	if testing.Short() {
		seeds = 6
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			disks := []disk{openPebble(t), openMem(t)}
			defer func() {
				for _, d := range disks {
					d.close()
				}
			}()
			rng := rand.New(rand.NewPCG(seed, 7))
			var history []string
			for step := range steps {
				op := randomOp(rng)
				outs := make([]string, len(disks))
				for i, d := range disks {
					outs[i] = op.run(d)
				}
				history = append(history, fmt.Sprintf("%d %s: %s", step, op.name, outs[1]))
				if outs[0] != outs[1] {
					t.Fatalf("seed %d, step %d, %s:\npersistence: %s\nmemlog:      %s\nhistory:\n%s",
						seed, step, op.name, outs[0], outs[1], strings.Join(history[max(0, len(history)-30):], "\n"))
				}
			}
		})
	}
}

// op is an operation with its arguments drawn; run carries it out on a
// disk and describes the outcome.
type op struct {
	name string
	run  func(d disk) string
}

func randomOp(rng *rand.Rand) op {
	// Arguments are drawn here, once for both logs; indexes are relative
	// to each log's own state, which is the same in both.
	n := uint64(1 + rng.IntN(6))
	off := rng.Int64N(9) - 4
	epoch := uint64(1 + rng.IntN(4))
	variant := uint64(rng.IntN(2))
	meta := []string{"", "a", "state"}[rng.IntN(3)]
	switch r := rng.IntN(100); {
	case r < 30:
		return op{fmt.Sprintf("append %d", n), func(d disk) string {
			l := d.log()
			from := l.Last() + 1
			return fmt.Sprintf("%s %s", errName(l.Append(entries(from, from+n-1)...)), bounds(l, false))
		}}
	case r < 35:
		return op{fmt.Sprintf("append out of order %+d", off), func(d disk) string {
			l := d.log()
			idx := l.Last() + 1 + uint64(off)
			if off == 0 || int64(l.Last())+1+off < 1 {
				idx = l.Last() + 1 + n
			}
			return fmt.Sprintf("%s %s", errName(l.Append(entryFor(idx))), bounds(l, false))
		}}
	case r < 45:
		return op{"sync", func(d disk) string {
			return bounds(d.log(), true)
		}}
	case r < 53:
		return op{fmt.Sprintf("get %+d", off), func(d disk) string {
			l := d.log()
			syncAll(l)
			e, err := l.Get(uint64(max(int64(l.Last())+off, 0)))
			if err != nil {
				return errName(err)
			}
			return describe(e)
		}}
	case r < 60:
		return op{fmt.Sprintf("scan %+d %d", off, n), func(d disk) string {
			l := d.log()
			syncAll(l)
			from := uint64(max(int64(l.First())+off, 0))
			var got []string
			err := l.Scan(context.Background(), from, from+2*n, func(e persistence.Entry) error {
				got = append(got, describe(e))
				return nil
			})
			return fmt.Sprintf("%s %v", errName(err), got)
		}}
	case r < 65:
		return op{fmt.Sprintf("trim %+d", off), func(d disk) string {
			l := d.log()
			idx := uint64(max(int64(l.First())+2*off+4, 0))
			return fmt.Sprintf("%s %s", errName(l.TrimBefore(context.Background(), idx)), bounds(l, false))
		}}
	case r < 69:
		return op{fmt.Sprintf("set snapshot %+d %q", off, meta), func(d disk) string {
			l := d.log()
			idx := uint64(max(int64(l.Last())+off, 0))
			return fmt.Sprintf("%s %s", errName(l.SetSnapshot(context.Background(), idx, []byte(meta))), bounds(l, true))
		}}
	case r < 72:
		return op{"snapshot", func(d disk) string {
			i, m, err := d.log().Snapshot()
			return fmt.Sprintf("%s %d %q %v", errName(err), i, m, m == nil)
		}}
	case r < 78:
		return op{fmt.Sprintf("put view %d/%d", epoch, variant), func(d disk) string {
			l := d.log()
			v := viewFor(epoch)
			v.Start += variant
			return fmt.Sprintf("%s %s", errName(l.PutView(context.Background(), v)), bounds(l, true))
		}}
	case r < 81:
		return op{"views", func(d disk) string {
			vs, err := d.log().Views(context.Background())
			return fmt.Sprintf("%s %+v", errName(err), vs)
		}}
	case r < 84:
		return op{fmt.Sprintf("install snapshot %+d %q", 3*off, meta), func(d disk) string {
			l := d.log()
			idx := uint64(max(int64(l.Last())+3*off, 0))
			err := l.InstallSnapshot(context.Background(), idx, []byte(meta))
			return fmt.Sprintf("%s %s durable %d", errName(err), bounds(l, true), l.Durable())
		}}
	case r < 90:
		return op{fmt.Sprintf("set durable %+d", off), func(d disk) string {
			l := d.log()
			l.SetDurable(uint64(max(int64(l.Last())+off, 0)))
			return fmt.Sprint(l.Durable())
		}}
	case r < 94:
		return op{fmt.Sprintf("crash with %d unsynced", n), func(d disk) string {
			d.crashWith(func(l durableLog) {
				from := l.Last() + 1
				_ = l.Append(entries(from, from+n-1)...)
			})
			l := d.log()
			return fmt.Sprintf("%s durable %d", bounds(l, false), l.Durable())
		}}
	case r < 97:
		return op{"reopen", func(d disk) string {
			d.reopen()
			l := d.log()
			return fmt.Sprintf("%s durable %d", bounds(l, false), l.Durable())
		}}
	default:
		return op{"wait for an index not appended", func(d disk) string {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			l := d.log()
			return errName(l.WaitSynced(ctx, l.Last()+n))
		}}
	}
}

// syncAll waits until everything appended to l is synced.
func syncAll(l durableLog) string { return errName(l.WaitSynced(context.Background(), l.Last())) }

// bounds describes First and Last, and Synced after waiting for it if
// synced is set (without waiting it depends on when persistence.Log's
// writer ran).
func bounds(l durableLog, synced bool) string {
	if !synced {
		return fmt.Sprintf("[%d, %d]", l.First(), l.Last())
	}
	err := syncAll(l)
	return fmt.Sprintf("[%d, %d] synced %d %s", l.First(), l.Last(), l.Synced(), err)
}
