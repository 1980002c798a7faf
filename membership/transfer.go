package membership

// State transfer to joiners (a snapshot taken at the end of the view
// before the one that admits them), streamed in parallel from several
// members as in CubicRing's recovery (§4.2): the state is cut into k
// parts, member i of the k donors sends part i, and each donor also holds
// the next part, (i+1) mod k, as the backup of donor i+1. A joiner fetches
// all k parts at once, one from each donor, and re-requests a part from
// the previous donor on the ring when its donor fails or stalls.
//
// # Wire protocol
//
// One queue pair per (donor, joiner) pair, on the transfer stream of the
// view (both sides open it). Every message is described by its 64-bit
// immediate value:
//
//	bits 63..60  kind
//	bits 59..40  part index (< 2^20)
//	bits 39..0   argument
//
// Joiner → donor, always signals (zero-length):
//
//	request(part, maxChunk)  send part; chunks of at most maxChunk bytes
//	credit(0, n)             n more receive buffers are posted
//
// Donor → joiner:
//
//	begin(part, size)        signal: the answer to the oldest request not yet
//	                         answered; size bytes of part follow
//	missing(part, 0)         signal: the answer to the oldest request not yet
//	                         answered; this donor does not hold part
//	chunk(part, last)        transfer of 1..maxChunk bytes of part, in order;
//	                         the argument is 1 on the part's final chunk
//
// The donor answers requests in the order it received them and sends the
// chunks of one part before it answers the next request. Every chunk uses
// one credit; the donor never sends a chunk without one. The joiner posts
// its receive buffers (of its chunk size) before it grants credits for
// them, and grants one credit back for each chunk it has consumed, so a
// transfer always finds a posted buffer. Signals need no credit.
//
// The joiner checks everything it receives: the kind, that an answer is for
// the oldest outstanding request, that size is within MaxPartBytes, that
// each chunk belongs to the part being received, is not empty, does not go
// past the announced size, and carries the final flag exactly when it
// completes the part. Anything else fails the queue pair with an error
// wrapping ErrTransferProtocol; the parts it carried are re-requested from
// the next donor. The donor likewise ends a queue pair whose joiner sends
// an unknown kind, a part out of range, a repeated request, or more credits
// than it may hold.
//
// A joiner closes all its queue pairs when it is done; a donor takes the
// close as the end of that joiner's transfer.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/rdma"
)

// StateMachine is implemented by applications whose state joiners need.
type StateMachine interface {
	// Snapshot writes part `part` (0-based) of `of` parts of the state as
	// of the moment it is called. The runtime calls it right after
	// delivering the previous view's last message, before delivering
	// anything of the new view. The parts of one snapshot, concatenated in
	// order by Restore, must describe the whole state; how the state is cut
	// is the application's choice. It may run on another goroutine than
	// the delivery handler's, for several parts one after the other; no
	// delivery reaches the application while it runs, but it must not
	// modify the state and must synchronize with the application's own
	// readers of it.
	Snapshot(w io.Writer, part, of int) error
	// Restore installs the state from all parts of a snapshot, in order.
	Restore(parts []io.Reader) error
}

// Errors of state transfer.
var (
	// ErrTransfer means a joiner could not obtain some part of the state
	// from any donor. Errors returned by Fetch wrap it, and the causes.
	ErrTransfer = errors.New("membership: state transfer failed")
	// ErrTransferProtocol means the peer of a transfer queue pair sent
	// something the protocol does not allow.
	ErrTransferProtocol = errors.New("membership: state transfer protocol violation")
	// ErrDonorStalled means a donor made no progress for StallTimeout.
	ErrDonorStalled = errors.New("membership: state transfer donor stalled")
)

// Defaults and bounds of state transfer.
const (
	// DefaultTransferChunkBytes is the default chunk size.
	DefaultTransferChunkBytes = 256 << 10
	// MaxTransferChunkBytes bounds the chunk size; it keeps a chunk within
	// one transport frame.
	MaxTransferChunkBytes = 8 << 20
	// DefaultStallTimeout is how long a joiner waits for progress from a
	// donor before it asks another.
	DefaultStallTimeout = 2 * time.Second
	// DefaultMaxPartBytes bounds the size of one part a joiner accepts.
	DefaultMaxPartBytes = 1 << 30
	// MaxTransferParts bounds the number of parts (and donors).
	MaxTransferParts = 1 << transferPartBits
	// maxTransferPartSize is the largest size the wire can announce.
	maxTransferPartSize = 1<<transferArgBits - 1
	// transferCredits is how many receive buffers a joiner keeps posted on
	// each queue pair.
	transferCredits = 4
	// maxDonorCredits bounds the credits a donor accepts from one joiner.
	maxDonorCredits = 1024
)

// Immediate value layout; see the package comment on the wire protocol.
const (
	transferKindShift = 60
	transferPartShift = 40
	transferPartBits  = 20
	transferArgBits   = 40
	transferPartMask  = 1<<transferPartBits - 1
	transferArgMask   = 1<<transferArgBits - 1
)

// transferKind is the kind of a transfer message.
type transferKind uint8

const (
	transferRequest transferKind = iota + 1 // joiner → donor signal
	transferCredit                          // joiner → donor signal
	transferBegin                           // donor → joiner signal
	transferMissing                         // donor → joiner signal
	transferChunk                           // donor → joiner transfer
)

func (k transferKind) String() string {
	switch k {
	case transferRequest:
		return "request"
	case transferCredit:
		return "credit"
	case transferBegin:
		return "begin"
	case transferMissing:
		return "missing"
	case transferChunk:
		return "chunk"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// transferImm is a decoded immediate value.
type transferImm struct {
	kind transferKind
	part int
	arg  uint64
}

// encodeTransferImm encodes m. m must be valid (decodeTransferImm of the
// result gives m back).
func encodeTransferImm(m transferImm) uint64 {
	return uint64(m.kind)<<transferKindShift |
		uint64(m.part&transferPartMask)<<transferPartShift |
		m.arg&transferArgMask
}

// decodeTransferImm decodes and checks an immediate value received from a
// peer. It checks what holds for every message of a kind; whether the
// message fits the state of the queue pair is the caller's business.
func decodeTransferImm(imm uint64) (transferImm, error) {
	m := transferImm{
		kind: transferKind(imm >> transferKindShift),
		part: int(imm >> transferPartShift & transferPartMask),
		arg:  imm & transferArgMask,
	}
	bad := func(reason string) (transferImm, error) {
		return transferImm{}, fmt.Errorf("%w: immediate %#x: %s", ErrTransferProtocol, imm, reason)
	}
	switch m.kind {
	case transferRequest:
		if m.arg == 0 || m.arg > MaxTransferChunkBytes {
			return bad(fmt.Sprintf("request with a chunk size of %d bytes", m.arg))
		}
	case transferCredit:
		if m.part != 0 {
			return bad("credit with a part index")
		}
		if m.arg == 0 || m.arg > maxDonorCredits {
			return bad(fmt.Sprintf("grant of %d credits", m.arg))
		}
	case transferBegin:
	case transferMissing:
		if m.arg != 0 {
			return bad("missing with an argument")
		}
	case transferChunk:
		if m.arg > 1 {
			return bad("chunk with unknown flags")
		}
	default:
		return bad("unknown kind")
	}
	return m, nil
}

// SnapshotParts calls sm.Snapshot for each of parts (indexes out of of
// parts) and returns the bytes of each, by index. A donor serves the
// result.
func SnapshotParts(sm StateMachine, parts []int, of int) (map[int][]byte, error) {
	if of <= 0 || of > MaxTransferParts {
		return nil, fmt.Errorf("membership: snapshot into %d parts", of)
	}
	out := make(map[int][]byte, len(parts))
	for _, p := range parts {
		if p < 0 || p >= of {
			return nil, fmt.Errorf("membership: snapshot part %d of %d", p, of)
		}
		if _, ok := out[p]; ok {
			continue
		}
		var w blockWriter
		if err := sm.Snapshot(&w, p, of); err != nil {
			return nil, fmt.Errorf("membership: snapshot part %d of %d: %w", p, of, err)
		}
		out[p] = w.bytes()
	}
	return out, nil
}

// blockWriter collects a snapshot in blocks, so that a large one is not
// copied over and over as a growing buffer would, and joins them once at
// the end. Each block holds as much as those before it together, from
// minSnapshotBlock up to snapshotBlockBytes: a small part (a state is cut
// into many) costs a small buffer.
type blockWriter struct {
	blocks [][]byte
	n      int
}

const (
	minSnapshotBlock   = 4 << 10
	snapshotBlockBytes = 1 << 20
)

func (w *blockWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(w.blocks) == 0 || len(w.blocks[len(w.blocks)-1]) == cap(w.blocks[len(w.blocks)-1]) {
			size := min(max(w.n, minSnapshotBlock), snapshotBlockBytes)
			w.blocks = append(w.blocks, make([]byte, 0, size))
		}
		last := &w.blocks[len(w.blocks)-1]
		k := copy((*last)[len(*last):cap(*last)], p)
		*last = (*last)[:len(*last)+k]
		p = p[k:]
		w.n += k
	}
	return n, nil
}

func (w *blockWriter) bytes() []byte {
	if len(w.blocks) == 1 {
		return w.blocks[0]
	}
	out := make([]byte, 0, w.n)
	for _, b := range w.blocks {
		out = append(out, b...)
	}
	return out
}

// DonorSlices generalizes DonorParts to shares cut into s slices: donor i
// of k serves parts i×s to (i+1)×s−1 and, as backup, the next donor's
// (none when k is 1), its own first.
func DonorSlices(i, k, s int) []int {
	var out []int
	for j := range s {
		out = append(out, i*s+j)
	}
	if k > 1 {
		for j := range s {
			out = append(out, (i+1)%k*s+j)
		}
	}
	return out
}

// DonorParts returns the indexes of the parts donor number i of k serves:
// its own part i and, as backup of donor i+1, part (i+1) mod k.
func DonorParts(i, k int) []int {
	if k <= 1 {
		return []int{i}
	}
	return []int{i, (i + 1) % k}
}

// DonorConfig configures a [Donor].
type DonorConfig struct {
	// Endpoint is this node's transport endpoint.
	Endpoint rdma.Endpoint
	// Stream is the transfer stream of the view; the runtime picks it and
	// joiners use the same.
	Stream rdma.StreamID
	// Joiners are the nodes to serve.
	Joiners []rdma.NodeID
	// Parts holds the snapshot parts this donor serves, by part index (see
	// SnapshotParts and DonorParts). The donor keeps and reads the byte
	// slices; they must not be modified while it runs.
	Parts map[int][]byte
	// Pending lists parts this donor will serve once they are handed to
	// AddPart: requests for them wait (in order) instead of being answered
	// "missing", so that a donor can start serving its first part while it
	// still snapshots the next.
	Pending []int
	// Of is the number of parts of the snapshot.
	Of int
	// ChunkBytes is the largest chunk the donor sends; a joiner may ask for
	// smaller ones. Default DefaultTransferChunkBytes, at most
	// MaxTransferChunkBytes.
	ChunkBytes int
	// Logger receives the donor's logs. Default: discard.
	Logger *slog.Logger
}

func (c DonorConfig) withDefaults() (DonorConfig, error) {
	if c.Endpoint == nil {
		return c, errors.New("membership: donor without an endpoint")
	}
	if c.Of <= 0 || c.Of > MaxTransferParts {
		return c, fmt.Errorf("membership: donor of %d parts", c.Of)
	}
	for p, b := range c.Parts {
		if p < 0 || p >= c.Of {
			return c, fmt.Errorf("membership: donor holds part %d of %d", p, c.Of)
		}
		if len(b) > maxTransferPartSize {
			return c, fmt.Errorf("membership: donor part %d of %d bytes is too large", p, len(b))
		}
	}
	for _, p := range c.Pending {
		if _, ok := c.Parts[p]; ok || p < 0 || p >= c.Of {
			return c, fmt.Errorf("membership: donor part %d of %d pending twice or out of range", p, c.Of)
		}
	}
	seen := make(map[rdma.NodeID]bool, len(c.Joiners))
	for _, j := range c.Joiners {
		if j == c.Endpoint.ID() || seen[j] {
			return c, fmt.Errorf("membership: donor %d: bad joiner list %v", c.Endpoint.ID(), c.Joiners)
		}
		seen[j] = true
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultTransferChunkBytes
	}
	if c.ChunkBytes < 0 || c.ChunkBytes > MaxTransferChunkBytes {
		return c, fmt.Errorf("membership: donor chunk size %d out of range", c.ChunkBytes)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Donor serves snapshot parts, taken at one point, to joiners. The runtime
// creates one per view change that admits joiners, on every donor, with
// the parts that donor is responsible for. Its methods are safe for
// concurrent use.
type Donor struct {
	cfg  DonorConfig
	log  *slog.Logger
	done chan struct{} // closed when every joiner's queue pair has ended
	wg   sync.WaitGroup
	// parts holds the parts served, pending those announced but not yet
	// added. Lock order: a donorConn's mu, then partsMu.
	partsMu sync.Mutex
	parts   map[int][]byte
	pending map[int]bool

	mu struct {
		sync.Mutex
		closed bool
		conns  []*donorConn
		live   int // conns not ended
	}
}

// donorConn serves one joiner.
type donorConn struct {
	d    *Donor
	peer rdma.NodeID

	mu struct {
		sync.Mutex
		qp        rdma.QueuePair // nil until Open returns
		ended     bool
		credits   int
		requested map[int]bool
		queue     []donorRequest // requests not yet answered, oldest first
		// The part being sent: cur is its data, or nil if none.
		cur      []byte
		curPart  int
		curChunk int
		off      int
		wr       uint64
	}
}

// donorRequest is a request waiting for its answer.
type donorRequest struct {
	part  int
	chunk int
}

// NewDonor opens a queue pair to each joiner on cfg.Stream and serves the
// joiners' requests until they close their queue pairs or Close is called.
// The joiners' endpoints must be up: a joiner whose queue pair fails is not
// served again, and its Fetch turns to the other donors.
func NewDonor(ctx context.Context, cfg DonorConfig) (*Donor, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Donor{
		cfg:     c,
		log:     c.Logger.With("node", c.Endpoint.ID(), "stream", c.Stream),
		parts:   make(map[int][]byte, len(c.Parts)),
		pending: make(map[int]bool, len(c.Pending)),
		done:    make(chan struct{}),
	}
	for p, b := range c.Parts {
		d.parts[p] = b
	}
	for _, p := range c.Pending {
		d.pending[p] = true
	}
	conns := make([]*donorConn, len(c.Joiners))
	for i, j := range c.Joiners {
		dc := &donorConn{d: d, peer: j}
		dc.mu.requested = make(map[int]bool)
		conns[i] = dc
	}
	d.mu.conns = conns
	d.mu.live = len(conns)
	if len(conns) == 0 {
		close(d.done)
	}
	for _, dc := range conns {
		// Open may run handler calls before it returns; they find no queue
		// pair and leave the answers to the pump below.
		qp, err := c.Endpoint.Open(ctx, dc.peer, c.Stream, dc)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("membership: donor: open transfer stream %d to node %d: %w", c.Stream, dc.peer, err)
		}
		dc.mu.Lock()
		ended := dc.mu.ended // Open reported a failure already
		if !ended {
			dc.mu.qp = qp
			dc.pumpLocked()
		}
		dc.mu.Unlock()
		if ended {
			qp.Close()
		}
	}
	d.log.Debug("membership: donor serving", "joiners", c.Joiners, "of", c.Of, "parts", len(d.parts))
	return d, nil
}

// AddPart hands the donor a part announced in DonorConfig.Pending and
// answers the requests that waited for it.
func (d *Donor) AddPart(part int, data []byte) error {
	if len(data) > maxTransferPartSize {
		return fmt.Errorf("membership: donor part %d of %d bytes is too large", part, len(data))
	}
	d.partsMu.Lock()
	if !d.pending[part] {
		d.partsMu.Unlock()
		return fmt.Errorf("membership: donor part %d was not pending", part)
	}
	delete(d.pending, part)
	d.parts[part] = data
	d.partsMu.Unlock()
	d.mu.Lock()
	conns := d.mu.conns
	d.mu.Unlock()
	for _, dc := range conns {
		dc.mu.Lock()
		dc.pumpLocked()
		dc.mu.Unlock()
	}
	return nil
}

// part returns part p, whether it is held, and whether it is still
// pending.
func (d *Donor) part(p int) (data []byte, ok, pending bool) {
	d.partsMu.Lock()
	defer d.partsMu.Unlock()
	data, ok = d.parts[p]
	return data, ok, d.pending[p]
}

// Done is closed once every joiner's queue pair has ended: the joiner closed
// it (it is done or gave up on this donor), it failed, or Close was called.
func (d *Donor) Done() <-chan struct{} { return d.done }

// Close stops serving and closes every queue pair. It is idempotent.
func (d *Donor) Close() error {
	d.mu.Lock()
	d.mu.closed = true
	conns := d.mu.conns
	d.mu.Unlock()
	for _, dc := range conns {
		dc.mu.Lock()
		qp := dc.mu.qp
		dc.mu.qp = nil
		dc.endLocked(nil)
		dc.mu.Unlock()
		if qp != nil {
			qp.Close()
		}
	}
	d.wg.Wait()
	return nil
}

// endLocked marks dc ended, once, and closes Done after the last one.
// REQUIRES: dc.mu (and not d.mu).
func (dc *donorConn) endLocked(err error) {
	if dc.mu.ended {
		return
	}
	dc.mu.ended = true
	dc.mu.queue = nil
	dc.mu.cur = nil
	d := dc.d
	switch {
	case err == nil:
	case errors.Is(err, rdma.ErrPeerClosed):
		d.log.Debug("membership: donor: joiner closed the transfer", "joiner", dc.peer)
	default:
		d.log.Warn("membership: donor: transfer to joiner ended", "joiner", dc.peer, "err", err)
	}
	d.mu.Lock()
	d.mu.live--
	if d.mu.live == 0 {
		close(d.done)
	}
	d.mu.Unlock()
}

// failLocked ends dc after bad input, a failed post or a queue pair
// failure, and closes its queue pair on another goroutine (a handler must
// not close its own). REQUIRES: dc.mu.
func (dc *donorConn) failLocked(err error) {
	qp := dc.mu.qp
	dc.mu.qp = nil
	dc.endLocked(err)
	if qp == nil {
		return
	}
	// Close has not taken this queue pair (it takes dc.mu to do so), so
	// its Wait comes after this Add.
	d := dc.d
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		qp.Close()
	}()
}

// Signal handles a request or a credit from the joiner.
func (dc *donorConn) Signal(imm uint64) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.mu.ended {
		return
	}
	m, err := decodeTransferImm(imm)
	if err != nil {
		dc.failLocked(err)
		return
	}
	switch m.kind {
	case transferRequest:
		if m.part >= dc.d.cfg.Of || dc.mu.requested[m.part] {
			dc.failLocked(fmt.Errorf("%w: request for part %d of %d (repeated: %v)",
				ErrTransferProtocol, m.part, dc.d.cfg.Of, dc.mu.requested[m.part]))
			return
		}
		dc.mu.requested[m.part] = true
		dc.mu.queue = append(dc.mu.queue, donorRequest{part: m.part, chunk: min(dc.d.cfg.ChunkBytes, int(m.arg))})
	case transferCredit:
		dc.mu.credits += int(m.arg)
		if dc.mu.credits > maxDonorCredits {
			dc.failLocked(fmt.Errorf("%w: more than %d credits", ErrTransferProtocol, maxDonorCredits))
			return
		}
	default:
		dc.failLocked(fmt.Errorf("%w: %v signal from a joiner", ErrTransferProtocol, m.kind))
		return
	}
	dc.pumpLocked()
}

// pumpLocked answers requests and sends chunks while credits last.
// REQUIRES: dc.mu.
func (dc *donorConn) pumpLocked() {
	qp := dc.mu.qp
	if qp == nil || dc.mu.ended {
		return
	}
	for {
		if dc.mu.cur == nil {
			if len(dc.mu.queue) == 0 {
				return
			}
			req := dc.mu.queue[0]
			data, ok, pending := dc.d.part(req.part)
			if pending {
				return // answered once AddPart brings it
			}
			dc.mu.queue = dc.mu.queue[1:]
			var err error
			if !ok {
				dc.d.log.Debug("membership: donor: part not held", "joiner", dc.peer, "part", req.part)
				err = qp.Signal(encodeTransferImm(transferImm{kind: transferMissing, part: req.part}))
			} else {
				err = qp.Signal(encodeTransferImm(transferImm{kind: transferBegin, part: req.part, arg: uint64(len(data))}))
			}
			if err != nil {
				dc.failLocked(err)
				return
			}
			if len(data) == 0 {
				continue
			}
			dc.mu.cur, dc.mu.curPart, dc.mu.curChunk, dc.mu.off = data, req.part, req.chunk, 0
		}
		if dc.mu.credits == 0 {
			return
		}
		data, off := dc.mu.cur, dc.mu.off
		n := min(dc.mu.curChunk, len(data)-off)
		last := off+n == len(data)
		var flag uint64
		if last {
			flag = 1
		}
		dc.mu.wr++
		imm := encodeTransferImm(transferImm{kind: transferChunk, part: dc.mu.curPart, arg: flag})
		if err := qp.PostSend(data[off:off+n:off+n], imm, dc.mu.wr); err != nil {
			dc.failLocked(err)
			return
		}
		dc.mu.credits--
		dc.mu.off += n
		if last {
			dc.mu.cur = nil
		}
	}
}

// RecvComplete cannot happen: a donor posts no receive buffers, so the
// transport fails the queue pair instead.
func (dc *donorConn) RecvComplete(wr uint64, n int, imm uint64) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if !dc.mu.ended {
		dc.failLocked(fmt.Errorf("%w: transfer from a joiner", ErrTransferProtocol))
	}
}

// SendComplete needs no action: part data stays with the donor.
func (dc *donorConn) SendComplete(wr uint64) {}

// Failed ends the joiner's transfer.
func (dc *donorConn) Failed(err error) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	dc.failLocked(err)
}

// FetchConfig configures [Fetch].
type FetchConfig struct {
	// Endpoint is the joiner's transport endpoint.
	Endpoint rdma.Endpoint
	// Stream is the transfer stream of the view (the donors use the same).
	Stream rdma.StreamID
	// Donors lists the donors in part order: Donors[i] serves part i and
	// holds part i+1 as backup, so there are len(Donors) parts — or, with
	// Slices, the Slices parts of share i and those of share i+1.
	Donors []rdma.NodeID
	// Slices cuts each donor's share into that many parts (default 1),
	// so that a donor starts sending its first while it still snapshots
	// the others: there are len(Donors)×Slices parts, and donor i serves
	// parts i×Slices to (i+1)×Slices−1 (see DonorSlices).
	Slices int
	// ChunkBytes is the size of the receive buffers, the largest chunk the
	// joiner accepts. Default DefaultTransferChunkBytes, at most
	// MaxTransferChunkBytes.
	ChunkBytes int
	// StallTimeout is how long a donor may go without progress (a chunk or
	// an answer) while it owes some before its parts are asked of others.
	// Default DefaultStallTimeout.
	StallTimeout time.Duration
	// MaxPartBytes bounds the size of a part a donor may announce. Default
	// DefaultMaxPartBytes.
	MaxPartBytes int64
	// Logger receives the joiner's logs. Default: discard.
	Logger *slog.Logger
}

func (c FetchConfig) withDefaults() (FetchConfig, error) {
	if c.Endpoint == nil {
		return c, errors.New("membership: fetch without an endpoint")
	}
	if len(c.Donors) == 0 || len(c.Donors) > MaxTransferParts {
		return c, fmt.Errorf("membership: fetch from %d donors", len(c.Donors))
	}
	seen := make(map[rdma.NodeID]bool, len(c.Donors))
	for _, d := range c.Donors {
		if d == c.Endpoint.ID() || seen[d] {
			return c, fmt.Errorf("membership: fetch: bad donor list %v", c.Donors)
		}
		seen[d] = true
	}
	if c.Slices == 0 {
		c.Slices = 1
	}
	if c.Slices < 0 || c.Slices > MaxTransferParts/len(c.Donors) {
		return c, fmt.Errorf("membership: fetch %d slices from each of %d donors", c.Slices, len(c.Donors))
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultTransferChunkBytes
	}
	if c.ChunkBytes < 0 || c.ChunkBytes > MaxTransferChunkBytes {
		return c, fmt.Errorf("membership: fetch chunk size %d out of range", c.ChunkBytes)
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.StallTimeout < 0 {
		return c, fmt.Errorf("membership: fetch stall timeout %v", c.StallTimeout)
	}
	if c.MaxPartBytes == 0 {
		c.MaxPartBytes = DefaultMaxPartBytes
	}
	if c.MaxPartBytes < 0 {
		return c, fmt.Errorf("membership: fetch part bound %d", c.MaxPartBytes)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Fetch runs on a joiner and obtains all parts of the state, one from each
// donor in parallel, over queue pairs on cfg.Stream. Part i is requested
// from Donors[i]; if that donor fails, breaks the protocol, does not hold
// the part, or makes no progress for StallTimeout, the part is requested
// from Donors[i-1] (which holds it as backup), then Donors[i-2], and so on
// around the ring. A donor that failed once is not asked again. Fetch
// returns the parts in order, or an error wrapping ErrTransfer if some part
// could not be obtained from any donor, or the context's error.
//
// The stall clock of a donor starts when it is first asked for something,
// so donors should be serving (NewDonor) within StallTimeout of Fetch.
func Fetch(ctx context.Context, cfg FetchConfig) ([][]byte, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("membership: fetch: %w", err)
	}
	f := newFetcher(c)
	defer f.closeAll()
	f.start(ctx)
	return f.run(ctx)
}

// newFetcher returns the joiner's state for a transfer with configuration
// c (with defaults applied).
func newFetcher(c FetchConfig) *fetcher {
	k := len(c.Donors)
	f := &fetcher{
		cfg:  c,
		log:  c.Logger.With("node", c.Endpoint.ID(), "stream", c.Stream),
		wake: make(chan struct{}, 1),
	}
	f.mu.parts = make([]fetchPart, k*c.Slices)
	f.mu.remaining = k * c.Slices
	f.conns = make([]*fetchConn, k)
	for i, d := range c.Donors {
		fc := &fetchConn{f: f, peer: d}
		fc.mu.cur = -1
		f.conns[i] = fc
	}
	return f
}

// start opens the queue pairs and asks each donor for its part.
func (f *fetcher) start(ctx context.Context) {
	for _, fc := range f.conns {
		fc.open(ctx)
	}
	f.mu.Lock()
	for p := range f.mu.parts {
		f.assignLocked(p)
	}
	f.mu.Unlock()
}

// fetcher is the joiner's side of one transfer.
type fetcher struct {
	cfg   FetchConfig
	log   *slog.Logger
	wake  chan struct{} // capacity 1: something changed
	conns []*fetchConn  // by donor index; fixed

	// mu guards the fields in mu and the mu fields of every fetchConn.
	mu struct {
		sync.Mutex
		finished  bool
		parts     []fetchPart
		remaining int
		err       error // set when a part has no donor left
	}
}

// fetchPart is the joiner's state of one part.
type fetchPart struct {
	tried int // donors asked so far; the current one is donorFor(p, tried-1)
	data  []byte
	done  bool
	errs  []error // why each asked donor did not deliver
}

// fetchConn is the joiner's queue pair to one donor.
type fetchConn struct {
	f    *fetcher
	peer rdma.NodeID
	bufs [][]byte // receive buffers; wr is the index

	mu struct { // guarded by f.mu
		qp       rdma.QueuePair
		dead     bool
		err      error
		closed   bool
		pending  []int // requested parts not yet answered, oldest first
		last     time.Time
		cur      int    // part being received, or -1
		buf      []byte // its bytes; filled only by handler calls
		got      int
		received int64 // bytes received, for logs
	}
}

// wakeUp tells run that something changed.
func (f *fetcher) wakeUp() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// donorFor returns the donor asked for part p on attempt a (0-based).
func (f *fetcher) donorFor(p, a int) int {
	k := len(f.cfg.Donors)
	return ((p/f.cfg.Slices-a)%k + k) % k
}

// open opens fc's queue pair and grants the initial credits.
func (fc *fetchConn) open(ctx context.Context) {
	f := fc.f
	fc.bufs = make([][]byte, transferCredits)
	for i := range fc.bufs {
		fc.bufs[i] = make([]byte, f.cfg.ChunkBytes)
	}
	// Open may run handler calls (Failed) before it returns: not under
	// f.mu.
	qp, err := f.cfg.Endpoint.Open(ctx, fc.peer, f.cfg.Stream, fc)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		fc.failLocked(fmt.Errorf("open transfer stream to node %d: %w", fc.peer, err))
		return
	}
	fc.mu.qp = qp
	if fc.mu.dead {
		return
	}
	for i, b := range fc.bufs {
		if err := qp.PostRecv(b, uint64(i)); err != nil {
			fc.failLocked(err)
			return
		}
	}
	if err := qp.Signal(encodeTransferImm(transferImm{kind: transferCredit, arg: transferCredits})); err != nil {
		fc.failLocked(err)
	}
}

// assignLocked asks the next donor for part p, or records that no donor
// is left. REQUIRES: f.mu.
func (f *fetcher) assignLocked(p int) {
	k := len(f.cfg.Donors)
	part := &f.mu.parts[p]
	for part.tried < k {
		fc := f.conns[f.donorFor(p, part.tried)]
		part.tried++
		if fc.mu.dead {
			part.errs = append(part.errs, fmt.Errorf("donor %d failed earlier: %w", fc.peer, fc.mu.err))
			continue
		}
		if fc.requestLocked(p) {
			return
		}
	}
	if f.mu.err == nil {
		f.mu.err = fmt.Errorf("%w: part %d of %d: %w", ErrTransfer, p, len(f.mu.parts), errors.Join(part.errs...))
		f.wakeUp()
	}
}

// requestLocked asks fc for part p and reports whether the request went
// out. REQUIRES: f.mu.
func (fc *fetchConn) requestLocked(p int) bool {
	f := fc.f
	err := fc.mu.qp.Signal(encodeTransferImm(transferImm{kind: transferRequest, part: p, arg: uint64(f.cfg.ChunkBytes)}))
	if err != nil {
		f.mu.parts[p].errs = append(f.mu.parts[p].errs, fmt.Errorf("donor %d: %w", fc.peer, err))
		fc.failLocked(err)
		return false
	}
	if len(fc.mu.pending) == 0 && fc.mu.cur < 0 {
		fc.mu.last = time.Now()
	}
	fc.mu.pending = append(fc.mu.pending, p)
	f.log.Debug("membership: fetch: requested part", "part", p, "donor", fc.peer)
	return true
}

// failLocked marks fc dead and asks other donors for its parts.
// REQUIRES: f.mu.
func (fc *fetchConn) failLocked(err error) {
	if fc.mu.dead {
		return
	}
	f := fc.f
	fc.mu.dead = true
	fc.mu.err = err
	owed := fc.mu.pending
	if fc.mu.cur >= 0 {
		owed = append([]int{fc.mu.cur}, owed...)
	}
	fc.mu.pending = nil
	fc.mu.cur = -1
	fc.mu.buf = nil
	if f.mu.finished {
		return
	}
	f.log.Info("membership: fetch: giving up on donor", "donor", fc.peer, "received", fc.mu.received, "owed", owed, "err", err)
	for _, p := range owed {
		f.mu.parts[p].errs = append(f.mu.parts[p].errs, fmt.Errorf("donor %d: %w", fc.peer, err))
		f.assignLocked(p)
	}
	f.wakeUp() // run closes the queue pair
}

// protocolLocked fails fc for bad input. REQUIRES: f.mu.
func (fc *fetchConn) protocolLocked(format string, args ...any) {
	fc.failLocked(fmt.Errorf("%w: from node %d: %s", ErrTransferProtocol, fc.peer, fmt.Sprintf(format, args...)))
}

// answerLocked checks that an answer from the donor is for the oldest
// outstanding request; if not, it fails fc. REQUIRES: f.mu.
func (fc *fetchConn) answerLocked(m transferImm) bool {
	if fc.mu.cur >= 0 || len(fc.mu.pending) == 0 || fc.mu.pending[0] != m.part {
		fc.protocolLocked("%v for part %d, expected an answer to %v (receiving %d)", m.kind, m.part, fc.mu.pending, fc.mu.cur)
		return false
	}
	return true
}

// answeredLocked consumes the oldest outstanding request, which the donor
// answered. Every part asked of fc is in pending or cur until it is
// complete or fc fails. REQUIRES: f.mu.
func (fc *fetchConn) answeredLocked() {
	fc.mu.pending = fc.mu.pending[1:]
	fc.mu.last = time.Now()
}

// completeLocked records part p. REQUIRES: f.mu.
func (fc *fetchConn) completeLocked(p int, data []byte) {
	f := fc.f
	part := &f.mu.parts[p]
	if part.done {
		return
	}
	part.done = true
	part.data = data
	f.mu.remaining--
	f.log.Debug("membership: fetch: part received", "part", p, "donor", fc.peer, "bytes", len(data))
	if f.mu.remaining == 0 {
		f.wakeUp()
	}
}

// Signal handles an answer from the donor.
func (fc *fetchConn) Signal(imm uint64) {
	f := fc.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc.mu.dead || f.mu.finished {
		return
	}
	m, err := decodeTransferImm(imm)
	if err != nil {
		fc.failLocked(fmt.Errorf("from node %d: %w", fc.peer, err))
		return
	}
	switch m.kind {
	case transferBegin:
		if !fc.answerLocked(m) {
			return
		}
		if m.arg > uint64(f.cfg.MaxPartBytes) {
			fc.protocolLocked("part %d of %d bytes exceeds the bound of %d", m.part, m.arg, f.cfg.MaxPartBytes)
			return
		}
		fc.answeredLocked()
		if m.arg == 0 {
			fc.completeLocked(m.part, []byte{})
			return
		}
		fc.mu.cur = m.part
		fc.mu.buf = make([]byte, m.arg)
		fc.mu.got = 0
	case transferMissing:
		if !fc.answerLocked(m) {
			return
		}
		fc.answeredLocked()
		f.mu.parts[m.part].errs = append(f.mu.parts[m.part].errs, fmt.Errorf("donor %d does not hold it", fc.peer))
		f.assignLocked(m.part)
	default:
		fc.protocolLocked("%v signal", m.kind)
	}
}

// RecvComplete handles a chunk: it checks it, copies it out, posts the
// buffer again and grants its credit back.
func (fc *fetchConn) RecvComplete(wr uint64, n int, imm uint64) {
	f := fc.f
	f.mu.Lock()
	if fc.mu.dead || f.mu.finished {
		f.mu.Unlock()
		return
	}
	m, err := decodeTransferImm(imm)
	switch {
	case err != nil:
		fc.failLocked(fmt.Errorf("from node %d: %w", fc.peer, err))
	case m.kind != transferChunk:
		fc.protocolLocked("%v transfer", m.kind)
	case wr >= uint64(len(fc.bufs)) || n < 0 || n > len(fc.bufs[wr]):
		fc.protocolLocked("completion of receive %d with %d bytes", wr, n) // the transport's bug, really
	case fc.mu.cur < 0 || m.part != fc.mu.cur:
		fc.protocolLocked("chunk of part %d while receiving %d", m.part, fc.mu.cur)
	case n == 0:
		fc.protocolLocked("empty chunk of part %d", m.part)
	case fc.mu.got+n > len(fc.mu.buf):
		fc.protocolLocked("chunk of part %d ends at %d, past its size %d", m.part, fc.mu.got+n, len(fc.mu.buf))
	case (m.arg == 1) != (fc.mu.got+n == len(fc.mu.buf)):
		fc.protocolLocked("chunk of part %d ends at %d of %d with final flag %d", m.part, fc.mu.got+n, len(fc.mu.buf), m.arg)
	}
	if fc.mu.dead {
		f.mu.Unlock()
		return
	}
	qp, buf, got := fc.mu.qp, fc.mu.buf, fc.mu.got
	f.mu.Unlock()

	// Only this queue pair's handler calls, which never overlap, touch buf.
	copy(buf[got:got+n], fc.bufs[wr][:n])
	postErr := qp.PostRecv(fc.bufs[wr], wr)
	if postErr == nil {
		postErr = qp.Signal(encodeTransferImm(transferImm{kind: transferCredit, arg: 1}))
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if fc.mu.dead || f.mu.finished {
		return
	}
	fc.mu.got += n
	fc.mu.received += int64(n)
	fc.mu.last = time.Now()
	if fc.mu.got == len(fc.mu.buf) {
		p, data := fc.mu.cur, fc.mu.buf
		fc.mu.cur, fc.mu.buf, fc.mu.got = -1, nil, 0
		fc.completeLocked(p, data)
	}
	if postErr != nil {
		fc.failLocked(postErr)
	}
}

// SendComplete is never called: the joiner only signals.
func (fc *fetchConn) SendComplete(wr uint64) {}

// Failed gives up on this donor.
func (fc *fetchConn) Failed(err error) {
	f := fc.f
	f.mu.Lock()
	defer f.mu.Unlock()
	fc.failLocked(err)
}

// run waits for the parts, reassigning those of stalled donors and closing
// the queue pairs of failed ones, until all parts are in or one cannot be
// had.
func (f *fetcher) run(ctx context.Context) ([][]byte, error) {
	tick := max(f.cfg.StallTimeout/4, time.Millisecond)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		f.mu.Lock()
		if f.mu.remaining == 0 {
			out := make([][]byte, len(f.mu.parts))
			for i := range f.mu.parts {
				out[i] = f.mu.parts[i].data
			}
			f.mu.finished = true
			f.mu.Unlock()
			return out, nil
		}
		if err := f.mu.err; err != nil {
			f.mu.finished = true
			f.mu.Unlock()
			return nil, err
		}
		now := time.Now()
		for _, fc := range f.conns {
			owes := len(fc.mu.pending) > 0 || fc.mu.cur >= 0
			if !fc.mu.dead && owes && now.Sub(fc.mu.last) >= f.cfg.StallTimeout {
				fc.failLocked(fmt.Errorf("%w: no progress from node %d for %v", ErrDonorStalled, fc.peer, f.cfg.StallTimeout))
			}
		}
		var toClose []rdma.QueuePair
		for _, fc := range f.conns {
			if fc.mu.dead && !fc.mu.closed && fc.mu.qp != nil {
				fc.mu.closed = true
				toClose = append(toClose, fc.mu.qp)
			}
		}
		f.mu.Unlock()
		for _, qp := range toClose {
			qp.Close()
		}
		if len(toClose) > 0 {
			continue // state may have changed meanwhile
		}
		select {
		case <-ctx.Done():
			f.mu.Lock()
			f.mu.finished = true
			f.mu.Unlock()
			return nil, fmt.Errorf("membership: fetch: %w", ctx.Err())
		case <-f.wake:
		case <-ticker.C:
		}
	}
}

// closeAll closes every queue pair; called once Fetch is done.
func (f *fetcher) closeAll() {
	f.mu.Lock()
	f.mu.finished = true
	var qps []rdma.QueuePair
	for _, fc := range f.conns {
		if fc.mu.qp != nil && !fc.mu.closed {
			fc.mu.closed = true
			qps = append(qps, fc.mu.qp)
		}
	}
	f.mu.Unlock()
	for _, qp := range qps {
		qp.Close()
	}
}
