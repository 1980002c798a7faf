package paxos

import "sync"

// outcome is how a request waiting for its command ends: the command's
// result, or why this member cannot tell.
type outcome struct {
	res result
	err error
}

// pending holds the requests of this member waiting for their commands
// to be applied, by request id. Two requests may wait for one id (a
// retry racing its original): both get the result.
type pending struct {
	mu struct {
		sync.Mutex
		waiters map[string][]waiter
		// closed, once set, fails every new wait.
		closed error
	}
}

func newPending() *pending {
	p := &pending{}
	p.mu.waiters = make(map[string][]waiter)
	return p
}

// waiter is a request waiting: the issued time of its command, and the
// channel that gets its outcome.
type waiter struct {
	issued int64
	ch     chan outcome
}

// add registers a wait for request id, whose command was issued at
// issued. The channel receives exactly one outcome, unless remove takes
// it back first.
func (p *pending) add(id string, issued int64) (chan outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed != nil {
		return nil, p.mu.closed
	}
	ch := make(chan outcome, 1)
	p.mu.waiters[id] = append(p.mu.waiters[id], waiter{issued: issued, ch: ch})
	return ch, nil
}

// remove takes back a wait that add registered, if it is still waiting.
func (p *pending) remove(id string, ch chan outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.mu.waiters[id]
	for i, w := range ws {
		if w.ch == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(p.mu.waiters, id)
	} else {
		p.mu.waiters[id] = ws
	}
}

// complete hands res, the result of request id's command issued at
// issued, to the requests waiting for id. An expired result goes only to
// those whose commands were issued no later, which expire too; one issued
// later (a retry that carried no issued time, stamped by the member that
// read it) may still be applied, and goes on waiting.
func (p *pending) complete(id string, issued int64, res result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.mu.waiters[id]
	rest := ws[:0]
	for _, w := range ws {
		if res.expired && w.issued > issued {
			rest = append(rest, w)
			continue
		}
		w.ch <- outcome{res: res}
	}
	if len(rest) == 0 {
		delete(p.mu.waiters, id)
	} else {
		p.mu.waiters[id] = rest
	}
}

// failAll ends every wait with err.
func (p *pending) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAllLocked(err)
}

func (p *pending) failAllLocked(err error) {
	for id, ws := range p.mu.waiters {
		for _, w := range ws {
			w.ch <- outcome{err: err}
		}
		delete(p.mu.waiters, id)
	}
}

// close ends every wait with err, and every later one.
func (p *pending) close(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.closed = err
	p.failAllLocked(err)
}

// ids returns the request ids waited for.
func (p *pending) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.mu.waiters))
	for id := range p.mu.waiters {
		out = append(out, id)
	}
	return out
}
