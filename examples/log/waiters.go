package sharedlog

import "sync"

// waiter is a request waiting for its command to be applied on this
// member.
type waiter struct {
	key string
	// done receives the outcome once (buffered: the delivery handler
	// never waits for the request).
	done chan outcome
	// unsure is set when Send failed in a way that leaves open whether
	// the command was sent: the waiter then also ends when this member
	// next restores its state (see waiters.restored).
	unsure bool
}

// outcome is how a waiter ends: its request's result, or an error.
type outcome struct {
	r   result
	err error
}

// waiters holds the requests of this member waiting for their commands,
// by request key. Several may wait under one key (a client retrying on
// the same member): one application answers them all.
type waiters struct {
	mu sync.Mutex
	m  map[string][]*waiter
}

// add registers a waiter for request key.
func (ws *waiters) add(key string) *waiter {
	w := &waiter{key: key, done: make(chan outcome, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = make(map[string][]*waiter)
	}
	ws.m[key] = append(ws.m[key], w)
	return w
}

// remove unregisters w, if it is still registered.
func (ws *waiters) remove(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	list := ws.m[w.key]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(ws.m, w.key)
	} else {
		ws.m[w.key] = list
	}
}

// markUnsure records that w's command may or may not have been sent.
func (ws *waiters) markUnsure(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.unsure = true
}

// complete answers every waiter of request key with r.
func (ws *waiters) complete(key string, r result) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.m[key] {
		w.done <- outcome{r: r}
	}
	delete(ws.m, key)
}

// failAll ends every waiter with err.
func (ws *waiters) failAll(err error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for key, list := range ws.m {
		for _, w := range list {
			w.done <- outcome{err: err}
		}
		delete(ws.m, key)
	}
}

// restored settles the waiters after this member's state was replaced
// by a transfer: a waiter whose request the new state has a result for
// gets it (its command was applied while this member was out); an
// unsure one without a result ends with err (its command was not sent
// in this incarnation). The others wait on: their commands were sent in
// the view being joined and are still to be delivered.
func (ws *waiters) restored(lookup func(key string) (result, bool), err error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for key, list := range ws.m {
		r, ok := lookup(key)
		keep := list[:0]
		for _, w := range list {
			switch {
			case ok:
				w.done <- outcome{r: r}
			case w.unsure:
				w.done <- outcome{err: err}
			default:
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(ws.m, key)
		} else {
			ws.m[key] = keep
		}
	}
}
