package paxos

import (
	"runtime"
	"runtime/debug"
	"time"
)

// releaseWhenIdle runs until the node closes: once the member has served
// requests and then none for Options.IdleRelease, it calls release
// (freeOSMemory) once, until it serves requests again. After a
// load, what the requests, connections and streams held is garbage the
// garbage collector would leave in place while the process allocates
// nothing: no collection runs then (the runtime forces one only every
// two minutes), and the memory stays at the heap goal the load set.
func (n *Node) releaseWhenIdle(release func()) {
	defer n.wg.Done()
	tick := max(n.opts.IdleRelease/4, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var seen uint64 // the requests admitted as of the last tick
	busy, quiet := false, time.Now()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		total := n.admit.Total()
		inFlight, _ := n.admit.Load()
		switch {
		case total != seen || inFlight > 0:
			seen, busy, quiet = total, true, now
		case busy && now.Sub(quiet) >= n.opts.IdleRelease:
			busy = false
			release()
			n.log.Debug("idle: returned the memory the requests held to the system")
		}
	}
}

// freeOSMemory is what a member releases with: two collections, then every
// free page returned to the system. What the sync.Pools of the process
// hold (buffers of requests, connections, streams and messages) goes
// at the second collection: the first only moves it to their victim
// caches.
func freeOSMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}
