//go:build fabric

package rdma

import (
	"container/list"
	"runtime"
	"slices"
	"sync"
	"unsafe"
)

// regCache registers the buffers of transfers with the domain and keeps
// the registrations for reuse: a buffer sent, received into or relayed
// again is registered once.
//
// A registration covers a buffer from its start to the end of its
// capacity, so that the blocks of one message, sliced from it in turn,
// share the registration of the first. The Go object holding the memory
// is pinned for as long as the registration exists: the garbage collector
// then neither frees it nor returns its pages to the system, either of
// which would leave a NIC writing into pages the process no longer uses.
// Registrations no transfer uses are kept up to RegCacheBytes, the least
// recently used released first.
type regCache struct {
	f     *fiFabric
	limit int // idle bytes kept; negative: none

	mu struct {
		sync.Mutex
		closed    bool
		byStart   []*regEntry // sorted by start; may overlap
		idle      list.List   // of *regEntry with refs == 0, oldest first
		idleBytes int
		nextKey   uint64
	}
}

// regEntry is one registration.
type regEntry struct {
	start, end uintptr // [start, end) is registered
	mr         fiMR
	pin        runtime.Pinner
	refs       int           // transfers using it; guarded by regCache.mu
	idle       *list.Element // in regCache.mu.idle while refs == 0
}

func newRegCache(f *fiFabric, limit int) *regCache {
	return &regCache{f: f, limit: limit}
}

// maxRegScan bounds how many registrations that start before a buffer
// are looked at for one that covers it.
const maxRegScan = 8

// acquire returns a registration covering buf, registering it if there is
// none, and holds it until release. An empty buf needs none: it returns
// nil.
func (r *regCache) acquire(buf []byte) (*regEntry, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	p := uintptr(unsafe.Pointer(&buf[0]))
	end := p + uintptr(len(buf))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	// The registrations starting at or before p, nearest first.
	i, _ := slices.BinarySearchFunc(r.mu.byStart, p+1, func(e *regEntry, t uintptr) int {
		switch {
		case e.start < t:
			return -1
		case e.start > t:
			return 1
		}
		return 0
	})
	for j := i - 1; j >= 0 && j >= i-maxRegScan; j-- {
		if e := r.mu.byStart[j]; e.end >= end {
			r.holdLocked(e)
			return e, nil
		}
	}
	whole := buf[:cap(buf)]
	e := &regEntry{start: p, end: p + uintptr(len(whole))}
	e.pin.Pin(&whole[0])
	r.mu.nextKey++
	mr, err := r.f.register(unsafe.Pointer(&whole[0]), len(whole), r.mu.nextKey)
	if err != nil {
		e.pin.Unpin()
		return nil, err
	}
	e.mr = mr
	e.refs = 1
	r.mu.byStart = slices.Insert(r.mu.byStart, i, e)
	return e, nil
}

// holdLocked takes a reference on e. REQUIRES: r.mu.
func (r *regCache) holdLocked(e *regEntry) {
	if e.refs == 0 {
		r.mu.idle.Remove(e.idle)
		e.idle = nil
		r.mu.idleBytes -= int(e.end - e.start)
	}
	e.refs++
}

// release drops a reference taken by acquire; e may be nil.
func (r *regCache) release(e *regEntry) {
	if e == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return
	}
	e.refs--
	if e.refs > 0 {
		return
	}
	e.idle = r.mu.idle.PushBack(e)
	r.mu.idleBytes += int(e.end - e.start)
	for r.mu.idleBytes > max(r.limit, 0) {
		old := r.mu.idle.Front().Value.(*regEntry)
		r.dropLocked(old)
	}
}

// dropLocked deregisters e, which no transfer uses. REQUIRES: r.mu.
func (r *regCache) dropLocked(e *regEntry) {
	r.mu.idle.Remove(e.idle)
	e.idle = nil
	r.mu.idleBytes -= int(e.end - e.start)
	if i := slices.Index(r.mu.byStart, e); i >= 0 {
		r.mu.byStart = slices.Delete(r.mu.byStart, i, i+1)
	}
	_ = e.mr.close()
	e.pin.Unpin()
}

// closeAll deregisters and unpins everything, in use or not. The
// endpoints that used the registrations must be closed.
func (r *regCache) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.closed = true
	for _, e := range r.mu.byStart {
		_ = e.mr.close()
		e.pin.Unpin()
	}
	r.mu.byStart = nil
	r.mu.idle.Init()
	r.mu.idleBytes = 0
}

// stats returns the number of registrations and of those idle; tests use
// it.
func (r *regCache) stats() (n, idle int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.byStart), r.mu.idle.Len()
}

// desc returns the local descriptor of e, or nil.
func (e *regEntry) desc() unsafe.Pointer {
	if e == nil {
		return nil
	}
	return e.mr.desc
}
