//go:build fabric

package rdma

import (
	"sync"
	"unsafe"
)

// fepState is the life cycle of a libfabric endpoint: connecting (after
// fi_connect or fi_accept) → up (FI_CONNECTED) → down, or connecting →
// down. A down endpoint was shut down, refused or broken: its outstanding
// operations complete (flushed) and it is then closed and freed.
type fepState uint8

const (
	fepConnecting fepState = iota
	fepUp
	fepDown
)

// opSlotBits is how many low bits of an operation id number the slot;
// the endpoint id is above them.
const opSlotBits = 20

// fep is one connected libfabric endpoint: a peer's control endpoint, or
// a stream's data endpoint. It owns, in C memory, one operation context
// and one slot per queue entry: slots hold data headers or control
// packets and are registered once.
//
// Operation ids are id<<opSlotBits | slot; receives use slots [0, rxN),
// sends [rxN, rxN+txN).
type fep struct {
	e       *FabricEndpoint
	id      uint64
	kind    fabConnKind
	c       *fabConn
	q       *fabQP // data endpoints only
	ep      fiEP
	rxN     int
	txN     int
	slotLen int
	ops     []cOp // rxN+txN, in C memory
	opsMem  cMem
	slab    cMem // (rxN+txN)*slotLen bytes of slots
	mr      fiMR // of slab

	mu struct {
		sync.Mutex
		state       fepState
		outstanding int // operations posted and not yet completed
		freeRx      []int
		freeTx      []int
		finalized   bool
	}
}

// newFep makes an endpoint of info (a peer's address, or a connection
// request) and registers it with e. It is not connected yet.
func (e *FabricEndpoint) newFep(kind fabConnKind, c *fabConn, q *fabQP, info fiInfo, rxN, txN, slotLen int) (*fep, error) {
	p := &fep{e: e, kind: kind, c: c, q: q, rxN: rxN, txN: txN, slotLen: slotLen}
	n := rxN + txN
	p.opsMem = allocC(n * opSize)
	p.ops = p.opsMem.ops(n)
	p.slab = allocC(n * slotLen)
	mr, err := e.f.register(p.slab.p, p.slab.n, e.nextKey())
	if err != nil {
		p.opsMem.free()
		p.slab.free()
		return nil, err
	}
	p.mr = mr
	e.mu.Lock()
	e.mu.nextID++
	p.id = e.mu.nextID
	e.mu.eps[p.id] = p
	e.mu.Unlock()
	for i := range p.ops {
		setOpID(&p.ops[i], p.id<<opSlotBits|uint64(i))
	}
	p.mu.freeRx = make([]int, 0, rxN)
	for i := rxN - 1; i >= 0; i-- {
		p.mu.freeRx = append(p.mu.freeRx, i)
	}
	p.mu.freeTx = make([]int, 0, txN)
	for i := n - 1; i >= rxN; i-- {
		p.mu.freeTx = append(p.mu.freeTx, i)
	}
	ep, err := e.f.openEP(info, p.id, txN, rxN)
	if err != nil {
		p.free()
		return nil, err
	}
	p.ep = ep
	return p, nil
}

// slot returns the bytes of slot i.
func (p *fep) slot(i int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(p.slab.p, i*p.slotLen)), p.slotLen)
}

// markUp moves a connecting endpoint to up and reports whether it did.
func (p *fep) markUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.state != fepConnecting {
		return false
	}
	p.mu.state = fepUp
	return true
}

// postRecv posts a receive into the slot's first hdrLen bytes and buf. It
// returns the slot, or ok false if p is not up or has no free receive
// slot.
func (p *fep) postRecv(hdrLen int, buf []byte, desc unsafe.Pointer) (slot int, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.state != fepUp || len(p.mu.freeRx) == 0 {
		return 0, false, nil
	}
	slot = p.mu.freeRx[len(p.mu.freeRx)-1]
	if err := p.ep.postRecv(&p.ops[slot], p.slot(slot)[:hdrLen], p.mr.desc, buf, desc); err != nil {
		return 0, false, err
	}
	p.mu.freeRx = p.mu.freeRx[:len(p.mu.freeRx)-1]
	p.mu.outstanding++
	return slot, true, nil
}

// postSend posts a send of the first hdrLen bytes of a slot, filled by
// fill, followed by buf. It returns ok false if p is not up or has no
// free send slot, or the send queue is full.
func (p *fep) postSend(hdrLen int, fill func(hdr []byte), buf []byte, desc unsafe.Pointer, data uint64, withData bool) (slot int, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.state != fepUp || len(p.mu.freeTx) == 0 {
		return 0, false, nil
	}
	slot = p.mu.freeTx[len(p.mu.freeTx)-1]
	hdr := p.slot(slot)[:hdrLen]
	fill(hdr)
	if err := p.ep.postSend(&p.ops[slot], hdr, p.mr.desc, buf, desc, data, withData); err != nil {
		if errAgain(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	p.mu.freeTx = p.mu.freeTx[:len(p.mu.freeTx)-1]
	p.mu.outstanding++
	return slot, true, nil
}

// isRecvSlot reports whether slot belongs to receives.
func (p *fep) isRecvSlot(slot int) bool { return slot < p.rxN }

// completed returns slot to the free lists once its completion has been
// handled, and frees p if it is down and this was its last outstanding
// operation.
func (p *fep) completed(slot int) {
	p.mu.Lock()
	if p.isRecvSlot(slot) {
		p.mu.freeRx = append(p.mu.freeRx, slot)
	} else {
		p.mu.freeTx = append(p.mu.freeTx, slot)
	}
	p.mu.outstanding--
	done := p.mu.state == fepDown && p.mu.outstanding == 0
	p.mu.Unlock()
	if done {
		p.finalize()
	}
}

// shutdown takes p down: fi_shutdown flushes its outstanding operations,
// and once their completions are in, p is closed and freed. It reports
// whether p was not down already. When it returns, the provider places no
// more data into the buffers of p's receives: the tcp provider shuts down
// under the endpoint's lock, which its receive path holds; verbs moves the
// queue pair to the error state, in which the NIC places nothing (not
// exercised here). The buffers stay pinned until their flushed
// completions come in.
func (p *fep) shutdown() bool {
	p.mu.Lock()
	if p.mu.state == fepDown {
		p.mu.Unlock()
		return false
	}
	p.mu.state = fepDown
	_ = p.ep.shutdown()
	done := p.mu.outstanding == 0
	p.mu.Unlock()
	if done {
		p.finalize()
	}
	return true
}

// finalize hands a down endpoint whose operations are all complete to the
// event loop, which closes and frees it. It runs once.
func (p *fep) finalize() {
	p.mu.Lock()
	if p.mu.finalized {
		p.mu.Unlock()
		return
	}
	p.mu.finalized = true
	p.mu.Unlock()
	p.e.doom(p)
}

// free closes p and frees its memory. Only the event loop calls it (or
// Close, once the loops have stopped): an event read for p is then always
// handled before p goes.
func (p *fep) free() {
	if p.ep.p != nil {
		_ = p.ep.close()
	}
	_ = p.mr.close()
	p.opsMem.free()
	p.slab.free()
	e := p.e
	e.mu.Lock()
	delete(e.mu.eps, p.id)
	e.mu.Unlock()
}
