package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// crashAndRestart kills the victim of group g, waits until the survivors
// go on without it, restarts it and waits until it serves again in a
// view with every member.
func (d *demoCmd) crashAndRestart(ctx context.Context, c *cli, p *printer, api apiClient, g *demoGroup, a *demoAppSummary) error {
	procs := g.procs()
	victim := procs[d.victim-1]
	var survivors []*memberProc
	for _, m := range procs {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	killed := time.Now()
	victim.kill()
	a.Killed = d.victim
	p.say("%s: killed member %d (pid %d) with SIGKILL", g.app, d.victim, victim.pid())

	xctx, cancel := context.WithTimeoutCause(ctx, demoExcludeTimeout,
		fmt.Errorf("%s: the survivors did not go on without member %d within %v", g.app, d.victim, demoExcludeTimeout))
	defer cancel()
	without, err := waitAll(xctx, api, survivors, func(s memberStatus) bool { return s.Serving && !s.has(d.victim) })
	if err != nil {
		return err
	}
	a.ExcludedMs = round(msOf(time.Since(killed)), 1)
	a.EpochWithout = without.Epoch
	g.addView(without, time.Since(p.t0))
	p.say("%s: view change: the survivors serve in view %d %v without member %d, %.0f ms after the kill",
		g.app, without.Epoch, without.Members, d.victim, a.ExcludedMs)

	restarted := time.Now()
	np, err := g.start(c, d.victim)
	if err != nil {
		return err
	}
	p.say("%s: restarted member %d (pid %d) on its data directory", g.app, d.victim, np.pid())
	rctx, cancel := context.WithTimeoutCause(ctx, demoRejoinTimeout,
		fmt.Errorf("%s: member %d did not serve again within %v of its restart", g.app, d.victim, demoRejoinTimeout))
	defer cancel()
	back, err := waitAll(rctx, api, g.procs(), func(s memberStatus) bool { return s.Serving && s.has(d.victim) })
	if err != nil {
		return err
	}
	a.RejoinedMs = round(msOf(time.Since(restarted)), 1)
	a.EpochBack = back.Epoch
	g.addView(back, time.Since(p.t0))
	p.say("%s: member %d is back: it replayed its own log, rejoined as a new incarnation and caught up from the others; view %d %v, %.1fs after its restart",
		g.app, d.victim, back.Epoch, back.Members, a.RejoinedMs/1000)
	return nil
}

// waitAll waits until ok accepts the status of every member in ms and
// returns the status of the one with the highest epoch.
func waitAll(ctx context.Context, api apiClient, ms []*memberProc, ok func(memberStatus) bool) (memberStatus, error) {
	var wg sync.WaitGroup
	sts := make([]memberStatus, len(ms))
	errs := make([]error, len(ms))
	for i, m := range ms {
		wg.Go(func() {
			sts[i], errs[i] = waitStatus(ctx, api, m, m.url, ok)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", m.name, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return memberStatus{}, err
	}
	best := sts[0]
	for _, s := range sts[1:] {
		if s.Epoch > best.Epoch {
			best = s
		}
	}
	return best, nil
}
