package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/convoy-gcs/convoy/membership"
)

// host runs a member without goroutines of its own: set (Group.host)
// only by the package's deterministic whole-group simulation
// (stepsim_test.go), which drives every member's runner — handle, settle,
// deadline — on its one goroutine and virtual clock. What production
// hands to goroutines of the member, the host schedules instead.
type host interface {
	// post queues ev for g's loop (Group.post); it never blocks.
	post(g *Group, ev event)
	// etcdWrite makes fn, an etcd write for g's loop, after wait, with
	// the retries runner.async makes (asyncRetry), and calls done once
	// it is made (nil) or given up (its last error).
	etcdWrite(g *Group, wait time.Duration, what string, fn func(ctx context.Context, s *membership.Store) error, done func(error))
	// spawn runs fn, work of g's that production runs on a goroutine of
	// its own (Group.spawn), and then runs g's loop, which takes what fn
	// left in its channels. It returns hurry, which runs fn at once if
	// it has not run yet: the loop calls it before it waits for fn's end.
	spawn(g *Group, fn func()) (hurry func())
	// fetch starts a state transfer of g's (membership.StartFetch) and
	// calls done with its end, in place of a goroutine that runs
	// membership.Fetch; stop ends it as the end of Fetch's context
	// would.
	fetch(g *Group, cfg membership.FetchConfig, done func(parts [][]byte, err error)) (stop func())
	// afterFunc calls f after d on the host's scheduler: the timers of
	// g's state transfers (transferClock).
	afterFunc(d time.Duration, f func()) membership.Timer
	// rand is the source of the jitter of g's state transfers.
	rand() *rand.Rand
}

// spawn runs fn on a goroutine of the member's, which Close waits for
// (member.wg), or as the host schedules it. The loop calls the returned
// hurry before it waits for fn's end: on its own goroutine fn needs no
// help, but a host that runs everything on one goroutine must run fn
// then, or the wait would never end.
func (g *Group) spawn(fn func()) (hurry func()) {
	if g.host != nil {
		return g.host.spawn(g, fn)
	}
	g.mem.wg.Add(1)
	go func() {
		defer g.mem.wg.Done()
		fn()
	}()
	return func() {}
}

// startFetch runs a state transfer (membership.Fetch) for view v, with
// ctx (from v.transfers), and calls done with its end, on another
// goroutine than the loop's (or as the host schedules it). The transfer
// ends when v closes, if not before.
func (g *Group) startFetch(v *view, ctx context.Context, cfg membership.FetchConfig, done func(parts [][]byte, err error)) {
	cfg.Clock, cfg.Rand = g.transferClock()
	if g.host != nil {
		v.stopFetches = append(v.stopFetches, g.host.fetch(g, cfg, done))
		return
	}
	g.spawn(func() { done(membership.Fetch(ctx, cfg)) })
}

// transferClock returns the clock the member's state transfers run on
// (Config.Clock, with the host's timers if it has a host), and the source
// of their jitter (nil: their own).
func (g *Group) transferClock() (membership.Clock, *rand.Rand) {
	if g.host != nil {
		return groupClock{g}, g.host.rand()
	}
	return groupClock{g}, nil
}

// groupClock is Config.Clock as a membership.Clock, with the machine's
// timers or the host's.
type groupClock struct{ g *Group }

func (c groupClock) Now() time.Time { return time.Unix(0, c.g.cfg.Clock()) }

func (c groupClock) AfterFunc(d time.Duration, f func()) membership.Timer {
	if c.g.host != nil {
		return c.g.host.afterFunc(d, f)
	}
	return time.AfterFunc(d, f)
}
