package paxos

import (
	"context"
	"sync"
)

// reads batches linearizable reads onto barriers: at most one barrier is
// in flight; the reads that arrive meanwhile share the next one, sent
// once the first is applied. A read joins only a batch whose barrier has
// not been sent yet, so its barrier is ordered after the read began.
type reads struct {
	// barrier sends one barrier and returns the index it was applied at.
	barrier func() (uint64, error)
	wg      *sync.WaitGroup

	mu struct {
		sync.Mutex
		// next collects the reads for the next barrier (nil: none yet).
		next *readBatch
		// running says a goroutine is sending barriers.
		running bool
		closed  error
	}
}

// readBatch is the reads that share one barrier.
type readBatch struct {
	// reads counts the reads in the batch (guarded by reads.mu).
	reads int
	done  chan struct{}
	// index and err are set before done is closed.
	index uint64
	err   error
}

// wait returns once a barrier sent after the call began is applied, with
// the index it was applied at: local state at or beyond that index
// reflects every write acknowledged before the call.
func (r *reads) wait(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	if r.mu.closed != nil {
		r.mu.Unlock()
		return 0, r.mu.closed
	}
	b := r.mu.next
	if b == nil {
		b = &readBatch{done: make(chan struct{})}
		r.mu.next = b
		if !r.mu.running {
			r.mu.running = true
			r.wg.Add(1)
			go r.run()
		}
	}
	b.reads++
	r.mu.Unlock()
	select {
	case <-b.done:
		return b.index, b.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run sends one barrier per batch until no reads wait.
func (r *reads) run() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		b := r.mu.next
		r.mu.next = nil
		if b == nil {
			r.mu.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		b.index, b.err = r.barrier()
		close(b.done)
	}
}

// close fails every later read with err; the caller then waits for wg
// (the barrier in flight ends once the node's context does).
func (r *reads) close(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.closed = err
}
