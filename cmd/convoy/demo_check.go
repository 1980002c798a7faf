package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	logclient "github.com/convoy-gcs/convoy/examples/log/client"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
)

// Bounds of the demo's checks.
const (
	// checkReaders is how many reads the checks have in flight at once.
	checkReaders = 16
	// checkReadTimeout bounds one read; the members are idle by then.
	checkReadTimeout = 10 * time.Second
	// settleTimeout bounds the wait for the members of a group to agree
	// on their view and applied index once the clients stopped.
	settleTimeout = 10 * time.Second
	// maxExamples bounds the differences a failed check describes.
	maxExamples = 3
)

// demoCheck is the outcome of one check.
type demoCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// checker reads back what the demo's clients wrote from every member of
// a group, each member on its own (no failover), and compares.
type checker struct {
	api apiClient
	// read, if set, sees every value read back before it is compared
	// (cli.demoRead).
	read func(app string, member uint64, what string, data []byte) []byte
}

// readBack passes data read from member through the test hook.
func (ck *checker) readBack(app string, member uint64, what string, data []byte) []byte {
	if ck.read == nil {
		return data
	}
	return ck.read(app, member, what, data)
}

// problems collects the differences a check finds: their number and the
// first few.
type problems struct {
	mu       sync.Mutex
	n        int
	examples []string
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if len(p.examples) < maxExamples {
		p.examples = append(p.examples, fmt.Sprintf(format, args...))
	}
}

// check returns the check named name: passed with detail if there were
// no problems, else failed with how many of total and the examples.
func (p *problems) check(name string, total int, detail string) demoCheck {
	if p.n == 0 {
		return demoCheck{Name: name, OK: true, Detail: detail}
	}
	more := ""
	if p.n > len(p.examples) {
		more = fmt.Sprintf("; and %d more", p.n-len(p.examples))
	}
	return demoCheck{Name: name, Detail: fmt.Sprintf("%d of %d wrong: %s%s", p.n, total, strings.Join(p.examples, "; "), more)}
}

// settle waits until every member serves in one view that holds them all
// and they have applied the same deliveries; it returns the two checks.
func (ck *checker) settle(ctx context.Context, app string, members []*memberProc) []demoCheck {
	deadline := time.Now().Add(settleTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last []memberStatus
	var lastErr error
	for {
		last, lastErr = statusAll(ctx, ck.api, members)
		if lastErr == nil && sameView(last, members) && sameApplied(last) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return []demoCheck{{Name: app + ": the members settle", Detail: context.Cause(ctx).Error()}}
		case <-tick.C:
		}
	}
	viewName := app + ": every member serves in one view holding them all"
	appliedName := app + ": every member applied the same deliveries"
	if lastErr != nil {
		return []demoCheck{{Name: viewName, Detail: lastErr.Error()}, {Name: appliedName, Detail: lastErr.Error()}}
	}
	views := make([]string, len(last))
	applied := make([]string, len(last))
	for i, s := range last {
		views[i] = fmt.Sprintf("%d: view %d %v serving=%v", members[i].id, s.Epoch, s.Members, s.Serving)
		applied[i] = fmt.Sprintf("%d: %d", members[i].id, s.Applied)
	}
	out := []demoCheck{{Name: viewName, OK: sameView(last, members)}, {Name: appliedName, OK: sameApplied(last)}}
	if out[0].OK {
		out[0].Detail = fmt.Sprintf("view %d %v", last[0].Epoch, last[0].Members)
	} else {
		out[0].Detail = strings.Join(views, "; ")
	}
	if out[1].OK {
		out[1].Detail = fmt.Sprintf("applied index %d on all %d", last[0].Applied, len(last))
	} else {
		out[1].Detail = "applied index " + strings.Join(applied, ", ")
	}
	return out
}

// statusAll returns every member's status.
func statusAll(ctx context.Context, api apiClient, members []*memberProc) ([]memberStatus, error) {
	out := make([]memberStatus, len(members))
	for i, m := range members {
		s, err := fetchStatus(ctx, api, m.url)
		if err != nil {
			return nil, fmt.Errorf("member %d: %w", m.id, err)
		}
		out[i] = s
	}
	return out, nil
}

// sameView reports whether every status is serving in the same view and
// that view holds every member.
func sameView(sts []memberStatus, members []*memberProc) bool {
	for _, s := range sts {
		if !s.Serving || s.Epoch != sts[0].Epoch {
			return false
		}
		for _, m := range members {
			if !s.has(m.id) {
				return false
			}
		}
	}
	return true
}

// sameApplied reports whether every status has the same applied index.
func sameApplied(sts []memberStatus) bool {
	for _, s := range sts {
		if s.Applied != sts[0].Applied {
			return false
		}
	}
	return true
}

// checkKV checks that every acknowledged put is on every member: it
// makes each member catch up with one linearizable read, then reads
// every key from every member's local state (a stale read, served
// without going through the group) and compares it with the value put.
func (ck *checker) checkKV(ctx context.Context, members []*memberProc, acks []ack) []demoCheck {
	name := "kv: every acknowledged put holds its value on every member (local reads)"
	if len(acks) == 0 {
		return []demoCheck{{Name: name, Detail: "no put was acknowledged"}}
	}
	clients := make([]*kvclient.Client, len(members))
	var p problems
	for i, m := range members {
		clients[i] = ck.api.kv([]string{m.url})
		rctx, cancel := context.WithTimeout(ctx, checkReadTimeout)
		_, _, err := clients[i].Get(rctx, acks[len(acks)-1].key)
		cancel()
		if err != nil {
			p.add("member %d: linearizable read: %v", m.id, err)
		}
	}
	if p.n > 0 {
		return []demoCheck{p.check(name, len(members), "")}
	}
	forEachRead(len(acks)*len(members), func(i int) {
		a, mi := acks[i/len(members)], i%len(members)
		id := members[mi].id
		rctx, cancel := context.WithTimeout(ctx, checkReadTimeout)
		defer cancel()
		got, _, err := clients[mi].GetStale(rctx, a.key)
		switch {
		case errors.Is(err, kvclient.ErrNotFound):
			p.add("member %d lacks key %s", id, a.key)
		case err != nil:
			p.add("member %d, key %s: %v", id, a.key, err)
		default:
			if got = ck.readBack(appKV, id, a.key, got); !bytes.Equal(got, a.data) {
				p.add("member %d, key %s: %s", id, a.key, describeDiff(got, a.data))
			}
		}
	})
	return []demoCheck{p.check(name, len(acks)*len(members),
		fmt.Sprintf("%d keys read from each of %d members: every value as put", len(acks), len(members)))}
}

// checkLog checks the shared log: every member reports the same tail
// (a linearizable read), holds the same entries below it (read in ranges
// from its own replica), and holds every acknowledged append at its
// position, byte for byte.
func (ck *checker) checkLog(ctx context.Context, members []*memberProc, acks []ack) []demoCheck {
	var out []demoCheck
	clients := make([]*logclient.Client, len(members))
	tails := make([]uint64, len(members))
	var tp problems
	for i, m := range members {
		clients[i] = ck.api.log([]string{m.url})
		rctx, cancel := context.WithTimeout(ctx, checkReadTimeout)
		t, err := clients[i].Tail(rctx)
		cancel()
		if err != nil {
			tp.add("member %d: %v", m.id, err)
		}
		tails[i] = t
	}
	if tp.n > 0 {
		return append(out, tp.check("log: every member reports the same tail", len(members), ""))
	}
	tailCheck := demoCheck{Name: "log: every member reports the same tail", OK: true,
		Detail: fmt.Sprintf("tail %d on all %d members", tails[0], len(members))}
	for i, t := range tails {
		if t != tails[0] {
			tailCheck.OK = false
			tailCheck.Detail = fmt.Sprintf("member %d: tail %d, member %d: tail %d", members[0].id, tails[0], members[i].id, t)
		}
	}
	out = append(out, tailCheck)

	// Every member's entries, from its own replica.
	entries := make([]map[uint64][]byte, len(members))
	var rp problems
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() {
			es, err := readAll(ctx, clients[i], tails[i])
			if err != nil {
				rp.add("member %d: %v", m.id, err)
			}
			entries[i] = es
		})
	}
	wg.Wait()
	if rp.n > 0 {
		return append(out, rp.check("log: every member holds the same entries", len(members), ""))
	}
	var sp problems
	for i, m := range members {
		if len(entries[i]) != len(entries[0]) {
			sp.add("member %d holds %d entries, member %d %d", m.id, len(entries[i]), members[0].id, len(entries[0]))
		}
		for pos, data := range entries[0] {
			got, ok := entries[i][pos]
			switch {
			case !ok:
				sp.add("member %d lacks position %d", m.id, pos)
			case !bytes.Equal(got, data):
				sp.add("position %d: member %d: %s", pos, m.id, describeDiff(got, data))
			}
		}
	}
	out = append(out, sp.check("log: every member holds the same entries", len(entries[0])*len(members),
		fmt.Sprintf("%d entries, the same bytes on all %d members", len(entries[0]), len(members))))

	// Every acknowledged append, at its own position.
	name := "log: every acknowledged append is at its position on every member"
	if len(acks) == 0 {
		return append(out, demoCheck{Name: name, Detail: "no append was acknowledged"})
	}
	var ap problems
	seen := make(map[uint64]bool, len(acks))
	for _, a := range acks {
		if seen[a.pos] {
			ap.add("position %d acknowledged to two appends", a.pos)
		}
		seen[a.pos] = true
		for i, m := range members {
			got, ok := entries[i][a.pos]
			what := "position " + strconv.FormatUint(a.pos, 10)
			if ok {
				got = ck.readBack(appLog, m.id, what, got)
			}
			switch {
			case !ok:
				ap.add("member %d lacks acknowledged %s", m.id, what)
			case !bytes.Equal(got, a.data):
				ap.add("member %d, %s: %s", m.id, what, describeDiff(got, a.data))
			}
		}
	}
	return append(out, ap.check(name, len(acks)*len(members),
		fmt.Sprintf("%d appends read back from each of %d members: every entry as appended", len(acks), len(members))))
}

// readAll reads the entries below tail from one member, in ranges.
func readAll(ctx context.Context, c *logclient.Client, tail uint64) (map[uint64][]byte, error) {
	out := make(map[uint64][]byte, tail)
	for from := uint64(0); from < tail; {
		rctx, cancel := context.WithTimeout(ctx, checkReadTimeout)
		es, err := c.ReadRange(rctx, from, tail)
		cancel()
		if err != nil {
			return out, fmt.Errorf("reading from position %d: %w", from, err)
		}
		if len(es) == 0 {
			return out, fmt.Errorf("no entries from position %d to the tail %d", from, tail)
		}
		for _, e := range es {
			out[e.Position] = e.Data
		}
		from = es[len(es)-1].Position + 1
	}
	return out, nil
}

// forEachRead calls f(0) ... f(n-1) from checkReaders goroutines.
func forEachRead(n int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(checkReaders, n) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// describeDiff says how got differs from want.
func describeDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	i := 0
	for i < len(got) && got[i] == want[i] {
		i++
	}
	if i == len(got) {
		return "identical"
	}
	return fmt.Sprintf("byte %d is %#02x, want %#02x", i, got[i], want[i])
}
