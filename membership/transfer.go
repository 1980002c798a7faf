package membership

// State transfer to joiners (a snapshot taken at the end of the view
// before the one that admits them), streamed in parallel from several
// members as in CubicRing's recovery (§4.2): the state is cut into k
// parts, member i of the k donors sends part i, and each donor also holds
// the next part, (i+1) mod k, as the backup of donor i+1. A joiner fetches
// all k parts at once, one from each donor, and re-requests a part from
// the previous donor on the ring when its donor fails or stalls.
//
// Neither side need hold a large part in memory: a donor may read a part
// as it sends it (AddPartReader), a chunk at a time, and a joiner may
// hand each chunk to a sink as it arrives (FetchConfig.Sink).
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
// When the connection under a queue pair breaks, both sides open the
// stream again (on a new connection, after a pause that grows with each
// failure), and the joiner asks again for what it still misses: a
// partition or a reconnection costs a pause, not the donor. A joiner
// closes all its queue pairs when it is done; a donor takes the close as
// the end of that joiner's transfer.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
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
	// readers of it. What it writes is streamed (to a joiner, to a file,
	// to the durable log) and need not fit in memory. A StateMachine that
	// also implements Checkpointer is never held still this way.
	Snapshot(w io.Writer, part, of int) error
	// Restore installs the state from all parts of a snapshot, in order.
	// The parts stream from where they were kept (memory, a file, the
	// durable log): a part is read as Restore reads it.
	Restore(parts []io.Reader) error
}

// Checkpointer is implemented by a StateMachine that can fix its state
// at a point and write it from there while deliveries go on changing it:
// a copy-on-write structure cloned, or a storage engine's snapshot. The
// runtime then takes its snapshots (for joiners, and for a durable
// group's Snapshot) without holding deliveries back.
type Checkpointer interface {
	// Checkpoint returns the state as it is now: as of the last message
	// delivered, exactly where StateMachine.Snapshot would write it. The
	// runtime calls it on the delivery goroutine, between two
	// deliveries, and must be quick: deliveries wait for it, not for the
	// checkpoint's Snapshot.
	Checkpoint() (StateSnapshot, error)
}

// StateSnapshot is the state as of a Checkpoint.
type StateSnapshot interface {
	// Snapshot writes part `part` of `of` parts of the state as of the
	// checkpoint, as StateMachine.Snapshot does of the state when it is
	// called. The runtime calls it on goroutines of its own, for one or
	// several parts one after the other, while deliveries change the
	// state; calls for different checkpoints may run at once.
	Snapshot(w io.Writer, part, of int) error
	// Release says the runtime is done with the checkpoint: what the
	// application keeps for it may go. The runtime calls it once, after
	// the last Snapshot of it has returned.
	Release()
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
	// maxDonorBuffers bounds the chunks a donor has in flight to one
	// joiner from a part it reads as it sends (AddPartReader): each
	// needs a buffer of its own until its send completes.
	maxDonorBuffers = 2 * transferCredits
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
	// AddPart or AddPartReader: requests for them wait (in order) instead
	// of being answered "missing", so that a donor can start serving its
	// first part while it still snapshots the next.
	Pending []int
	// Of is the number of parts of the snapshot.
	Of int
	// ChunkBytes is the largest chunk the donor sends; a joiner may ask for
	// smaller ones. Default DefaultTransferChunkBytes, at most
	// MaxTransferChunkBytes.
	ChunkBytes int
	// Clock is the time the donor runs on: the pauses before it serves a
	// joiner again on a new queue pair; it also makes the calls that close
	// failed queue pairs. Default SystemClock().
	Clock Clock
	// Rand, if set, draws the jitter of those pauses: a simulation's
	// seeded source, with a Clock and a transport that run everything on
	// one goroutine (a *rand.Rand is not safe for concurrent use).
	// Default: the backoff's own source.
	Rand *rand.Rand
	// Logger receives the donor's logs. Default: discard.
	Logger *slog.Logger
	// OnSent, if set, is called with the size of each chunk of part data
	// the donor posts to a joiner (chunks sent again over a new
	// connection count again), for metrics. It is called with the
	// donor's locks held: it must return quickly and not call the donor.
	OnSent func(bytes int)
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
	if c.Clock == nil {
		c.Clock = SystemClock()
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
	done chan struct{} // closed when every joiner's transfer has ended (see Done)
	// wg counts the calls scheduled on the clock (later) that have not
	// ended.
	wg sync.WaitGroup
	// parts holds the parts served, pending those announced but not yet
	// added. Lock order: a donorConn's mu, then partsMu.
	partsMu sync.Mutex
	parts   map[int]partSource
	pending map[int]bool

	mu struct {
		sync.Mutex
		closed bool
		conns  []*donorConn
		live   int // conns not ended
		// tasks are the calls scheduled on the clock that have not
		// started; seq numbers them.
		tasks map[*donorTask]bool
		seq   uint64
	}
}

// donorTask is a call a donor scheduled on its clock (later).
type donorTask struct {
	t   Timer
	seq uint64 // the order of scheduling
	// always: Close makes the call itself if it has not started (closing
	// a failed queue pair).
	always bool
	fn     func()
}

// later calls fn after wait on the donor's clock: on another goroutine
// than the caller's, which may be a handler (and a handler must not
// close its own queue pair). Close stops the calls that have not
// started, making those marked always itself. REQUIRES: not d.mu.
func (d *Donor) later(wait time.Duration, always bool, fn func()) {
	task := &donorTask{always: always, fn: fn}
	d.wg.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.seq++
	task.seq = d.mu.seq
	d.mu.tasks[task] = true
	task.t = d.cfg.Clock.AfterFunc(wait, func() {
		d.mu.Lock()
		delete(d.mu.tasks, task)
		d.mu.Unlock()
		defer d.wg.Done()
		fn()
	})
}

// donorConn serves one joiner.
type donorConn struct {
	d    *Donor
	peer rdma.NodeID

	mu struct {
		sync.Mutex
		// qp is the current queue pair, nil until Open returns; link is
		// its handler. Calls from the handlers of earlier queue pairs
		// (whose connection broke) are ignored.
		qp        rdma.QueuePair
		link      *donorLink
		backoff   *reopenBackoff // pause before a new queue pair
		ended     bool
		credits   int
		requested map[int]bool
		queue     []donorRequest // requests not yet answered, oldest first
		// The part being sent, if sending: src, from offset off.
		sending  bool
		src      partSource
		curPart  int
		curChunk int
		off      int64
		wr       uint64
		// inflight are the sends of the current queue pair whose buffers
		// the transport holds, oldest first; free are buffers to reuse.
		inflight []donorSend
		free     [][]byte
	}
}

// donorRequest is a request waiting for its answer.
type donorRequest struct {
	part  int
	chunk int
}

// partSource is a part a donor serves: bytes in memory, or size bytes
// read from r as they are sent.
type partSource struct {
	data []byte
	r    io.ReaderAt
	size int64
}

// donorSend is a chunk read from a part's io.ReaderAt and posted, whose
// buffer the transport holds until the send completes.
type donorSend struct {
	wr  uint64
	buf []byte
}

// NewDonor opens a queue pair to each joiner on cfg.Stream and serves the
// joiners' requests until they close their queue pairs or Close is called.
// A joiner whose connection breaks is served again on a new queue pair, as
// its Fetch asks; one that breaks the protocol is not served again.
func NewDonor(ctx context.Context, cfg DonorConfig) (*Donor, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Donor{
		cfg:     c,
		log:     c.Logger.With("node", c.Endpoint.ID(), "stream", c.Stream),
		parts:   make(map[int]partSource, len(c.Parts)),
		pending: make(map[int]bool, len(c.Pending)),
		done:    make(chan struct{}),
	}
	d.mu.tasks = make(map[*donorTask]bool)
	for p, b := range c.Parts {
		d.parts[p] = partSource{data: b, size: int64(len(b))}
	}
	for _, p := range c.Pending {
		d.pending[p] = true
	}
	conns := make([]*donorConn, len(c.Joiners))
	for i, j := range c.Joiners {
		dc := &donorConn{d: d, peer: j}
		dc.mu.requested = make(map[int]bool)
		dc.mu.backoff = newReopenBackoff(c.Rand)
		conns[i] = dc
	}
	d.mu.conns = conns
	d.mu.live = len(conns)
	if len(conns) == 0 {
		close(d.done)
	}
	for _, dc := range conns {
		if err := dc.open(ctx); err != nil {
			d.Close()
			return nil, err
		}
	}
	d.log.Debug("membership: donor serving", "joiners", c.Joiners, "of", c.Of, "parts", len(d.parts))
	return d, nil
}

// open opens a new queue pair to dc's joiner.
func (dc *donorConn) open(ctx context.Context) error {
	d := dc.d
	l := &donorLink{dc: dc}
	dc.mu.Lock()
	if dc.mu.ended {
		dc.mu.Unlock()
		return nil
	}
	dc.mu.link = l
	dc.mu.Unlock()
	// Open may run handler calls before it returns; they find no queue
	// pair and leave the answers to the pump below.
	qp, err := d.cfg.Endpoint.Open(ctx, dc.peer, d.cfg.Stream, l)
	if err != nil {
		return fmt.Errorf("membership: donor: open transfer stream %d to node %d: %w", d.cfg.Stream, dc.peer, err)
	}
	dc.mu.Lock()
	current := dc.mu.link == l && !dc.mu.ended // else it failed already
	if current {
		dc.mu.qp = qp
		dc.pumpLocked()
	}
	dc.mu.Unlock()
	if !current {
		qp.Close()
	}
	return nil
}

// AddPart hands the donor a part announced in DonorConfig.Pending and
// answers the requests that waited for it. The donor keeps and reads
// data; it must not be modified while the donor runs.
func (d *Donor) AddPart(part int, data []byte) error {
	return d.addPart(part, partSource{data: data, size: int64(len(data))})
}

// AddPartReader is AddPart for a part of size bytes that the donor reads
// from r a chunk at a time, as it sends them, so that a large part need
// not be held in memory: each joiner costs the donor a few chunk buffers
// at most. r must hold the part unchanged while the donor runs (its
// ReadAt may be called concurrently, for several joiners); a read that
// fails ends the transfer of that joiner from this donor, who then asks
// the part's other holder.
func (d *Donor) AddPartReader(part int, r io.ReaderAt, size int64) error {
	if size < 0 {
		return fmt.Errorf("membership: donor part %d of %d bytes", part, size)
	}
	return d.addPart(part, partSource{r: r, size: size})
}

func (d *Donor) addPart(part int, src partSource) error {
	if src.size > maxTransferPartSize {
		return fmt.Errorf("membership: donor part %d of %d bytes is too large", part, src.size)
	}
	d.partsMu.Lock()
	if !d.pending[part] {
		d.partsMu.Unlock()
		return fmt.Errorf("membership: donor part %d was not pending", part)
	}
	delete(d.pending, part)
	d.parts[part] = src
	d.partsMu.Unlock()
	d.pumpAll()
	return nil
}

// DropPart withdraws a part announced in DonorConfig.Pending that this
// donor cannot produce after all (its snapshot failed): the requests for
// it, waiting or to come, are answered that the donor does not hold it,
// and joiners ask the part's other holder.
func (d *Donor) DropPart(part int) error {
	d.partsMu.Lock()
	if !d.pending[part] {
		d.partsMu.Unlock()
		return fmt.Errorf("membership: donor part %d was not pending", part)
	}
	delete(d.pending, part)
	d.partsMu.Unlock()
	d.pumpAll()
	return nil
}

// pumpAll answers the requests that can be answered now, on every queue
// pair.
func (d *Donor) pumpAll() {
	d.mu.Lock()
	conns := d.mu.conns
	d.mu.Unlock()
	for _, dc := range conns {
		dc.mu.Lock()
		dc.pumpLocked()
		dc.mu.Unlock()
	}
}

// part returns part p, whether it is held, and whether it is still
// pending.
func (d *Donor) part(p int) (src partSource, ok, pending bool) {
	d.partsMu.Lock()
	defer d.partsMu.Unlock()
	src, ok = d.parts[p]
	return src, ok, d.pending[p]
}

// Done is closed once every joiner's transfer has ended: the joiner closed
// its queue pair (it is done or gave up on this donor), broke the
// protocol, or Close was called.
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
		dc.mu.link = nil
		dc.endLocked(nil)
		dc.mu.Unlock()
		if qp != nil {
			qp.Close()
		}
	}
	// Every joiner's transfer has ended, so nothing schedules calls any
	// more: those not started are stopped (or made, to close a queue
	// pair), and those started are waited for. On a simulation's clock,
	// none has started.
	var run []func()
	d.mu.Lock()
	// In the order they were scheduled: on a simulation's clock and
	// transport, what they do must not depend on a map's order.
	tasks := make([]*donorTask, 0, len(d.mu.tasks))
	for task := range d.mu.tasks {
		tasks = append(tasks, task)
	}
	slices.SortFunc(tasks, func(a, b *donorTask) int { return cmp.Compare(a.seq, b.seq) })
	for _, task := range tasks {
		if task.t.Stop() {
			delete(d.mu.tasks, task)
			if task.always {
				run = append(run, task.fn)
			}
			d.wg.Done()
		}
	}
	d.mu.Unlock()
	for _, fn := range run {
		fn()
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
	dc.mu.sending, dc.mu.src = false, partSource{}
	dc.mu.inflight, dc.mu.free = nil, nil
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

// failLocked drops dc's queue pair after bad input, a failed post or a
// queue pair failure, and has it closed by a call on the clock (a handler
// must not close its own), or by Close. After a broken connection, the joiner is served
// again on a new queue pair after a pause; after anything else, its
// transfer ends. REQUIRES: dc.mu (not d.mu).
func (dc *donorConn) failLocked(err error) {
	d := dc.d
	qp := dc.mu.qp
	dc.mu.qp = nil
	dc.mu.link = nil
	d.mu.Lock()
	closed := d.mu.closed
	d.mu.Unlock()
	again := connBroke(err) && !dc.mu.ended && !closed
	var wait time.Duration
	if again {
		// The joiner asks again, on the new queue pair, for what it
		// still misses.
		wait = dc.mu.backoff.next()
		d.log.Info("membership: donor: connection to joiner broke: serving it on a new one", "joiner", dc.peer, "retry_in", wait, "err", err)
		dc.mu.credits = 0
		dc.mu.requested = make(map[int]bool)
		dc.mu.queue = nil
		dc.mu.sending, dc.mu.src = false, partSource{}
		// The old queue pair's sends are abandoned with it, and their
		// buffers with them.
		dc.mu.inflight = nil
	} else {
		dc.endLocked(err)
	}
	// Close has not ended dc (it takes dc.mu to do so), so it finds these
	// calls scheduled.
	if qp != nil {
		d.later(0, true, func() { qp.Close() })
	}
	if again {
		d.later(wait, false, func() {
			// dc.open does nothing once Close has ended dc.
			if err := dc.open(context.Background()); err != nil {
				dc.mu.Lock()
				dc.endLocked(err)
				dc.mu.Unlock()
			}
		})
	}
}

// donorLink is the handler of one queue pair to a joiner.
type donorLink struct{ dc *donorConn }

// current reports whether l is the handler of dc's current queue pair and
// the transfer goes on. REQUIRES: dc.mu.
func (l *donorLink) current() bool { return l.dc.mu.link == l && !l.dc.mu.ended }

// Signal handles a request or a credit from the joiner.
func (l *donorLink) Signal(imm uint64) {
	dc := l.dc
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if !l.current() {
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
		dc.mu.backoff.reset()
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
		if !dc.mu.sending {
			if len(dc.mu.queue) == 0 {
				return
			}
			req := dc.mu.queue[0]
			src, ok, pending := dc.d.part(req.part)
			if pending {
				return // answered once AddPart brings it
			}
			dc.mu.queue = dc.mu.queue[1:]
			var err error
			if !ok {
				dc.d.log.Debug("membership: donor: part not held", "joiner", dc.peer, "part", req.part)
				err = qp.Signal(encodeTransferImm(transferImm{kind: transferMissing, part: req.part}))
			} else {
				err = qp.Signal(encodeTransferImm(transferImm{kind: transferBegin, part: req.part, arg: uint64(src.size)}))
			}
			if err != nil {
				dc.failLocked(err)
				return
			}
			if src.size == 0 {
				continue
			}
			dc.mu.sending, dc.mu.src, dc.mu.curPart, dc.mu.curChunk, dc.mu.off = true, src, req.part, req.chunk, 0
		}
		if dc.mu.credits == 0 {
			return
		}
		src, off := dc.mu.src, dc.mu.off
		n := min(int64(dc.mu.curChunk), src.size-off)
		last := off+n == src.size
		var flag uint64
		if last {
			flag = 1
		}
		var buf []byte
		if src.r == nil {
			buf = src.data[off : off+n : off+n]
		} else {
			if len(dc.mu.inflight) >= maxDonorBuffers {
				return // SendComplete frees a buffer and pumps again
			}
			buf = dc.bufferLocked(int(n))
			if k, err := src.r.ReadAt(buf, off); k < len(buf) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				dc.failLocked(fmt.Errorf("membership: donor: reading part %d at %d: %w", dc.mu.curPart, off, err))
				return
			}
		}
		dc.mu.wr++
		imm := encodeTransferImm(transferImm{kind: transferChunk, part: dc.mu.curPart, arg: flag})
		if err := qp.PostSend(buf, imm, dc.mu.wr); err != nil {
			dc.failLocked(err)
			return
		}
		if src.r != nil {
			dc.mu.inflight = append(dc.mu.inflight, donorSend{wr: dc.mu.wr, buf: buf})
		}
		dc.mu.credits--
		dc.mu.off += n
		if last {
			dc.mu.sending, dc.mu.src = false, partSource{}
		}
		if on := dc.d.cfg.OnSent; on != nil {
			on(int(n))
		}
	}
}

// bufferLocked returns a buffer of n bytes for a chunk read from a part.
// REQUIRES: dc.mu.
func (dc *donorConn) bufferLocked(n int) []byte {
	for len(dc.mu.free) > 0 {
		b := dc.mu.free[len(dc.mu.free)-1]
		dc.mu.free = dc.mu.free[:len(dc.mu.free)-1]
		if cap(b) >= n {
			return b[:n]
		}
	}
	return make([]byte, n, dc.mu.curChunk)
}

// RecvComplete cannot happen: a donor posts no receive buffers, so the
// transport fails the queue pair instead.
func (l *donorLink) RecvComplete(wr uint64, n int, imm uint64) {
	dc := l.dc
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if l.current() {
		dc.failLocked(fmt.Errorf("%w: transfer from a joiner", ErrTransferProtocol))
	}
}

// SendComplete hands back the buffers of chunks read from a part, and
// sends more if it waited for one; other part data stays with the donor.
func (l *donorLink) SendComplete(wr uint64) {
	dc := l.dc
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if !l.current() || len(dc.mu.inflight) == 0 {
		return
	}
	n := 0
	for n < len(dc.mu.inflight) && dc.mu.inflight[n].wr <= wr {
		dc.mu.free = append(dc.mu.free, dc.mu.inflight[n].buf)
		n++
	}
	if n == 0 {
		return
	}
	dc.mu.inflight = slices.Delete(dc.mu.inflight, 0, n)
	dc.pumpLocked()
}

// Failed drops the queue pair: the transfer ends, or goes on on a new one
// if the connection broke.
func (l *donorLink) Failed(err error) {
	dc := l.dc
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if l.current() {
		dc.failLocked(err)
	}
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
	// an answer) while it owes some before its parts are asked of their
	// other holder too; after three in a row over a connection that
	// holds, the donor is given up. Default DefaultStallTimeout.
	StallTimeout time.Duration
	// MaxPartBytes bounds the size of a part a donor may announce. Default
	// DefaultMaxPartBytes.
	MaxPartBytes int64
	// Clock is the time the transfer runs on: stall timeouts, and the
	// pauses before a broken connection is opened again. Default
	// SystemClock().
	Clock Clock
	// Rand, if set, draws the jitter of those pauses: a simulation's
	// seeded source, with a Clock and a transport that run everything on
	// one goroutine (a *rand.Rand is not safe for concurrent use).
	// Default: the backoff's own source.
	Rand *rand.Rand
	// Logger receives the joiner's logs. Default: discard.
	Logger *slog.Logger
	// OnReceived, if set, is called with the size of each chunk of part
	// data the joiner receives (from every donor asked, a part received
	// twice included), for metrics. It is called with the transfer's lock
	// held: it must return quickly and not call the transfer.
	OnReceived func(bytes int)
	// Sink, if set, receives the parts as they arrive, in place of Fetch
	// holding them in memory: the transfer then ends with no parts
	// (nil), and the state is in what the sink's writers completed.
	Sink PartSink
}

// PartSink receives the parts of a state transfer as they arrive
// (FetchConfig.Sink).
type PartSink interface {
	// Begin starts receiving part `part`, of size bytes, from one donor:
	// its chunks go to the writer returned, in order, and the writer is
	// closed once they are all in, or aborted if the donor fails before.
	// A part may be begun more than once, from several donors, even at
	// once: the transfer closes the first attempt that completes and
	// aborts the others. An error fails the transfer. Begin is called
	// with the transfer's lock held: it must return quickly and not call
	// the transfer.
	Begin(part int, size int64) (PartWriter, error)
}

// PartWriter receives one attempt at a part (PartSink.Begin). Write and
// Close are called one at a time, by the handler of the queue pair the
// part arrives on; Abort may come from another goroutine, also while a
// Write runs, after which Writes may fail. An error from Write or Close
// fails the transfer, unless the attempt was aborted meanwhile.
type PartWriter interface {
	io.Writer
	// Close completes the attempt: the part is what was written.
	Close() error
	// Abort gives the attempt up. It must not block.
	Abort()
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
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Fetch runs on a joiner and obtains all parts of the state, one from each
// donor in parallel, over queue pairs on cfg.Stream. Part i is requested
// from Donors[i]. When that donor's connection breaks, the part is
// requested from Donors[i-1] (which holds it as backup), then Donors[i-2],
// and so on around the ring; when the donor makes no progress for
// StallTimeout, the part is requested of the next donor too, and the first
// to send it whole serves it. A donor whose connection broke is opened
// again on a new connection, after a pause that grows with each failure,
// and may be asked again: the donor does the same on its side. A donor
// that closed its queue pair (it stopped serving), broke the protocol,
// made no progress for three StallTimeouts in a row over a connection
// that holds, or answered that it does not hold a part is not asked again
// (for that part).
//
// Fetch returns the parts in order (none with a Sink), or an error
// wrapping ErrTransfer if some part has no donor left to ask. It waits through broken connections
// for as long as ctx lasts; when ctx ends first, the
// error wraps ErrTransfer, the context's error, and why the donors asked
// for the missing parts did not deliver. The caller bounds the transfer.
//
// The stall clock of a donor starts when it is first asked for something,
// so donors should be serving (NewDonor) within StallTimeout of Fetch.
func Fetch(ctx context.Context, cfg FetchConfig) ([][]byte, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTransfer, err)
	}
	type result struct {
		parts [][]byte
		err   error
	}
	ch := make(chan result, 1)
	t, err := StartFetch(ctx, cfg, func(parts [][]byte, err error) { ch <- result{parts, err} })
	if err != nil {
		return nil, err
	}
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		t.Stop(ctx.Err())
		r = <-ch
	}
	return r.parts, r.err
}

// Transfer is a joiner's state transfer in progress (StartFetch).
type Transfer struct{ f *fetcher }

// StartFetch starts the transfer Fetch makes, and returns at once. done is
// called once, when the transfer ends: with the parts in order (nil with
// a Sink), or with the error Fetch would return (Stop in place of ctx's end). It is called
// on one of cfg.Clock's calls, after every queue pair of the transfer was
// closed. ctx bounds only the setup of queue pairs (rdma.Endpoint.Open):
// Stop ends the transfer. If ctx has ended already, or cfg is invalid,
// StartFetch returns an error (wrapping ErrTransfer and ctx's error for
// the former) and done is never called.
func StartFetch(ctx context.Context, cfg FetchConfig, done func(parts [][]byte, err error)) (*Transfer, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTransfer, err)
	}
	f := newFetcher(ctx, c, done)
	f.start()
	return &Transfer{f: f}, nil
}

// Stop ends the transfer unless it has ended: done is then called with an
// error wrapping ErrTransfer, cause (context.Canceled if nil), and why the
// donors asked for the missing parts did not deliver them.
func (t *Transfer) Stop(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.finished || f.mu.stopped != nil {
		return
	}
	f.mu.stopped = cause
	f.wakeUpLocked()
}

// Bounds of a joiner's reconnections to a donor.
const (
	fetchReopenMin = 20 * time.Millisecond
	fetchReopenMax = 2 * time.Second
	// fetchGiveUpStalls is how many stall timeouts in a row a donor whose
	// connection holds may make no progress before the joiner gives it up.
	fetchGiveUpStalls = 3
	// maxPartErrs bounds the causes kept for one part.
	maxPartErrs = 8
)

// newFetcher returns the joiner's state for a transfer with configuration
// c (with defaults applied); done is called when it ends.
func newFetcher(ctx context.Context, c FetchConfig, done func([][]byte, error)) *fetcher {
	k := len(c.Donors)
	f := &fetcher{
		ctx:  ctx,
		cfg:  c,
		log:  c.Logger.With("node", c.Endpoint.ID(), "stream", c.Stream),
		done: done,
	}
	f.mu.parts = make([]fetchPart, k*c.Slices)
	for p := range f.mu.parts {
		f.mu.parts[p].refused = make([]bool, k)
	}
	f.mu.remaining = k * c.Slices
	f.conns = make([]*fetchConn, k)
	for i, d := range c.Donors {
		fc := &fetchConn{f: f, i: i, peer: d}
		fc.mu.cur = -1
		fc.mu.backoff = newReopenBackoff(c.Rand)
		f.conns[i] = fc
	}
	return f
}

// start asks each donor for its part, opens the queue pairs (which send
// the requests), and starts polling (poll).
func (f *fetcher) start() {
	// The parts are asked for first, so that a donor whose queue pair
	// cannot be opened hands them on with the cause (failLocked).
	f.mu.Lock()
	for p := range f.mu.parts {
		f.assignLocked(p)
	}
	f.mu.Unlock()
	for _, fc := range f.conns {
		fc.open()
	}
	f.mu.Lock()
	f.wakeUpLocked()
	f.mu.Unlock()
}

// fetcher is the joiner's side of one transfer.
type fetcher struct {
	ctx   context.Context // bounds the setup of queue pairs
	cfg   FetchConfig
	log   *slog.Logger
	done  func([][]byte, error) // called once, by poll, when it ends
	conns []*fetchConn          // by donor index; fixed

	// mu guards the fields in mu and the mu fields of every fetchConn.
	mu struct {
		sync.Mutex
		finished  bool
		parts     []fetchPart
		remaining int
		// closing counts the sink's writers being closed: the transfer
		// does not end before they are.
		closing int
		err     error // set when a part has no donor left, or the sink failed
		stopped error // Stop's cause
		// timer calls poll at timerAt (nil: no call is pending). polling:
		// poll runs; again: something changed meanwhile, and it looks
		// again before it ends.
		timer   Timer
		timerAt time.Time
		polling bool
		again   bool
	}
}

// fetchPart is the joiner's state of one part.
type fetchPart struct {
	// next counts the donors asked so far: the next to ask is
	// donorFor(p, next).
	next    int
	refused []bool // by donor index: the donor does not hold the part
	data    []byte
	done    bool
	errs    []error // why donors asked did not deliver, the last few
}

// addErr records why a donor asked for the part did not deliver it.
func (p *fetchPart) addErr(err error) {
	if len(p.errs) == maxPartErrs {
		p.errs = append(p.errs[:0], p.errs[1:]...)
	}
	p.errs = append(p.errs, err)
}

// fetchConn is the joiner's link to one donor: its current queue pair,
// and what it owes.
type fetchConn struct {
	f    *fetcher
	i    int // donor index
	peer rdma.NodeID

	mu struct { // guarded by f.mu
		// qp is the current queue pair, nil while none is open; link is
		// its handler (set before Open returns). Calls from the handlers
		// of earlier queue pairs are ignored.
		qp   rdma.QueuePair
		link *fetchLink
		// dead: the donor is not asked again. broken: its connection
		// broke, and poll opens a new queue pair at reopenAt.
		dead     bool
		broken   bool
		reopenAt time.Time
		backoff  *reopenBackoff
		toClose  []rdma.QueuePair // failed queue pairs poll closes
		pending  []int            // requested parts not yet answered, oldest first
		last     time.Time        // last progress, or when it began to owe
		cur      int              // part being received, or -1
		// Part cur's size, and where its bytes go: buf, filled only by
		// handler calls, or without one, the sink's writer pw (nil once
		// another donor completed the part first: the rest is dropped).
		size     int
		buf      []byte
		pw       PartWriter
		got      int
		received int64 // bytes received, for logs
		// stalls counts the stall timeouts since the donor's last progress
		// (at the first, its parts are asked of others too).
		stalls int
	}
}

// fetchLink is the handler of one queue pair to a donor, with the receive
// buffers posted on it.
type fetchLink struct {
	fc   *fetchConn
	bufs [][]byte // receive buffers; wr is the index
}

// wakeUpLocked makes poll look at once (after the poll in progress, if
// one is): something changed. REQUIRES: f.mu.
func (f *fetcher) wakeUpLocked() {
	if f.mu.polling {
		f.mu.again = true
		return
	}
	f.scheduleLocked(f.cfg.Clock.Now())
}

// scheduleLocked makes poll run at at, unless a call is pending for no
// later. REQUIRES: f.mu.
func (f *fetcher) scheduleLocked(at time.Time) {
	if f.mu.finished || f.mu.timer != nil && !f.mu.timerAt.After(at) {
		return
	}
	if f.mu.timer != nil {
		f.mu.timer.Stop() // if it runs anyway, it finds nothing to do
	}
	f.mu.timerAt = at
	f.mu.timer = f.cfg.Clock.AfterFunc(max(at.Sub(f.cfg.Clock.Now()), 0), f.poll)
}

// donorFor returns the donor asked for part p on attempt a (0-based).
func (f *fetcher) donorFor(p, a int) int {
	k := len(f.cfg.Donors)
	return ((p/f.cfg.Slices-a)%k + k) % k
}

// connBroke reports whether err means the connection under a queue pair
// broke (the peer may be back on a new one), rather than that the peer
// stopped serving or misbehaved.
func connBroke(err error) bool {
	return (errors.Is(err, rdma.ErrConnectionLost) || errors.Is(err, rdma.ErrUnreachable)) &&
		!errors.Is(err, rdma.ErrProtocol) // the transport closed it over bad input
}

// open opens a new queue pair to fc's donor, grants the initial credits,
// and asks again for what fc owes.
func (fc *fetchConn) open() {
	f := fc.f
	link := &fetchLink{fc: fc, bufs: make([][]byte, transferCredits)}
	for i := range link.bufs {
		link.bufs[i] = make([]byte, f.cfg.ChunkBytes)
	}
	f.mu.Lock()
	if fc.mu.dead || f.mu.finished {
		f.mu.Unlock()
		return
	}
	fc.mu.broken = false
	fc.mu.link = link
	f.mu.Unlock()
	// Open may run handler calls (Failed) before it returns: not under
	// f.mu.
	qp, err := f.cfg.Endpoint.Open(f.ctx, fc.peer, f.cfg.Stream, link)
	f.mu.Lock()
	if err == nil && f.mu.finished {
		// The transfer ended meanwhile.
		f.mu.Unlock()
		qp.Close()
		return
	}
	defer f.mu.Unlock()
	if err != nil {
		if fc.mu.link == link {
			fc.failLocked(fmt.Errorf("open transfer stream to node %d: %w", fc.peer, err))
		}
		return
	}
	if fc.mu.link != link {
		// It failed already: poll closes it.
		fc.mu.toClose = append(fc.mu.toClose, qp)
		f.wakeUpLocked()
		return
	}
	fc.mu.qp = qp
	for i, b := range link.bufs {
		if err := qp.PostRecv(b, uint64(i)); err != nil {
			fc.failLocked(err)
			return
		}
	}
	if err := qp.Signal(encodeTransferImm(transferImm{kind: transferCredit, arg: transferCredits})); err != nil {
		fc.failLocked(err)
		return
	}
	for _, p := range fc.mu.pending {
		if !fc.signalRequestLocked(p) {
			return
		}
	}
}

// owesLocked reports whether part p is asked of fc and not yet in from
// it. REQUIRES: f.mu.
func (fc *fetchConn) owesLocked(p int) bool {
	return fc.mu.cur == p || slices.Contains(fc.mu.pending, p)
}

// owedLocked returns the parts fc owes, the one being received first.
// REQUIRES: f.mu.
func (fc *fetchConn) owedLocked() []int {
	owed := slices.Clone(fc.mu.pending)
	if fc.mu.cur >= 0 {
		owed = slices.Insert(owed, 0, fc.mu.cur)
	}
	return owed
}

// assignLocked asks for part p the next of the donors that hold it (its
// own and its backup) that may serve it and does not owe it already, one
// whose connection holds before one whose broke. If there is none, p
// waits for the donors that owe it, or, if none does, the transfer fails.
// REQUIRES: f.mu.
func (f *fetcher) assignLocked(p int) {
	holders := min(len(f.conns), 2)
	part := &f.mu.parts[p]
	if part.done || f.mu.err != nil {
		return
	}
	good, fallback := -1, -1
	owed := false
	for a := part.next; a < part.next+holders && good < 0; a++ {
		fc := f.conns[f.donorFor(p, a%holders)]
		switch {
		case fc.mu.dead || part.refused[fc.i]:
		case fc.owesLocked(p):
			owed = true
		case fc.mu.broken:
			if fallback < 0 {
				fallback = a
			}
		default:
			good = a
		}
	}
	pick := good
	if pick < 0 {
		pick = fallback
	}
	if pick >= 0 {
		part.next = pick + 1
		f.conns[f.donorFor(p, pick%holders)].requestLocked(p)
		return
	}
	if owed {
		return
	}
	f.mu.err = fmt.Errorf("%w: part %d of %d: no donor left: %w", ErrTransfer, p, len(f.mu.parts), errors.Join(part.errs...))
	f.wakeUpLocked()
}

// requestLocked asks fc for part p: at once if its queue pair is open,
// else when it opens one. REQUIRES: f.mu.
func (fc *fetchConn) requestLocked(p int) {
	if len(fc.mu.pending) == 0 && fc.mu.cur < 0 {
		fc.mu.last = fc.f.cfg.Clock.Now()
	}
	fc.mu.pending = append(fc.mu.pending, p)
	if fc.mu.qp != nil {
		fc.signalRequestLocked(p)
	}
}

// signalRequestLocked sends the request for part p and reports whether it
// went out; if not, fc has failed. REQUIRES: f.mu.
func (fc *fetchConn) signalRequestLocked(p int) bool {
	f := fc.f
	err := fc.mu.qp.Signal(encodeTransferImm(transferImm{kind: transferRequest, part: p, arg: uint64(f.cfg.ChunkBytes)}))
	if err != nil {
		fc.failLocked(err)
		return false
	}
	f.log.Debug("membership: fetch: requested part", "part", p, "donor", fc.peer)
	return true
}

// failLocked ends fc's current queue pair and asks other donors for what
// it owed. After a broken connection, fc opens a new one later and may be
// asked again; after anything else it is dead. REQUIRES: f.mu.
func (fc *fetchConn) failLocked(err error) {
	if fc.mu.dead {
		return
	}
	f := fc.f
	owed := fc.owedLocked()
	fc.mu.pending = nil
	fc.abortLocked()
	if fc.mu.qp != nil {
		fc.mu.toClose = append(fc.mu.toClose, fc.mu.qp)
		fc.mu.qp = nil
	}
	fc.mu.link = nil
	if connBroke(err) && !f.mu.finished {
		fc.mu.broken = true
		wait := fc.mu.backoff.next()
		fc.mu.reopenAt = f.cfg.Clock.Now().Add(wait)
		f.log.Info("membership: fetch: connection to donor broke", "donor", fc.peer, "received", fc.mu.received, "owed", owed, "retry_in", wait, "err", err)
	} else {
		fc.mu.dead = true
		if !f.mu.finished {
			f.log.Info("membership: fetch: giving up on donor", "donor", fc.peer, "received", fc.mu.received, "owed", owed, "err", err)
		}
	}
	f.wakeUpLocked() // poll closes the queue pair
	if f.mu.finished {
		return
	}
	for _, p := range owed {
		f.mu.parts[p].addErr(fmt.Errorf("donor %d: %w", fc.peer, err))
		f.assignLocked(p)
	}
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
	fc.progressLocked()
}

// progressLocked records progress from the donor. REQUIRES: f.mu.
func (fc *fetchConn) progressLocked() {
	fc.mu.last = fc.f.cfg.Clock.Now()
	fc.mu.stalls = 0
	fc.mu.backoff.reset()
}

// abortLocked ends the part fc is receiving, if any, giving up its
// sink's attempt. REQUIRES: f.mu.
func (fc *fetchConn) abortLocked() {
	if fc.mu.pw != nil {
		fc.mu.pw.Abort()
	}
	fc.mu.cur, fc.mu.size, fc.mu.buf, fc.mu.pw, fc.mu.got = -1, 0, nil, nil, 0
}

// completeLocked records part p, of size bytes: data, or in the sink.
// REQUIRES: f.mu.
func (fc *fetchConn) completeLocked(p int, data []byte, size int) {
	f := fc.f
	part := &f.mu.parts[p]
	if part.done {
		return // another donor it was asked of too sent it first
	}
	part.done = true
	part.data = data
	// Another donor still sending p sends for nothing.
	for _, other := range f.conns {
		if other.mu.cur == p && other.mu.pw != nil {
			other.mu.pw.Abort()
			other.mu.pw = nil
		}
	}
	f.mu.remaining--
	f.log.Debug("membership: fetch: part received", "part", p, "donor", fc.peer, "bytes", size)
	if f.mu.remaining == 0 {
		f.wakeUpLocked()
	}
}

// current reports whether l is fc's current queue pair's handler and the
// transfer goes on. REQUIRES: f.mu.
func (l *fetchLink) current() bool {
	fc := l.fc
	return fc.mu.link == l && !fc.mu.dead && !fc.f.mu.finished
}

// Signal handles an answer from the donor.
func (l *fetchLink) Signal(imm uint64) {
	fc, f := l.fc, l.fc.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !l.current() {
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
		var pw PartWriter
		if sink := f.cfg.Sink; sink != nil && !f.mu.parts[m.part].done {
			var err error
			if pw, err = sink.Begin(m.part, int64(m.arg)); err != nil {
				f.sinkFailedLocked(m.part, err)
				return
			}
		}
		if m.arg == 0 {
			if pw != nil {
				if err := pw.Close(); err != nil { // an empty part: nothing to wait for
					f.sinkFailedLocked(m.part, err)
					return
				}
			}
			fc.completeLocked(m.part, []byte{}, 0)
			return
		}
		fc.mu.cur, fc.mu.size, fc.mu.pw, fc.mu.got = m.part, int(m.arg), pw, 0
		if f.cfg.Sink == nil {
			fc.mu.buf = make([]byte, m.arg)
		}
	case transferMissing:
		if !fc.answerLocked(m) {
			return
		}
		fc.answeredLocked()
		part := &f.mu.parts[m.part]
		part.refused[fc.i] = true
		part.addErr(fmt.Errorf("donor %d does not hold it", fc.peer))
		if !fc.owesLocked(m.part) {
			f.assignLocked(m.part)
		}
	default:
		fc.protocolLocked("%v signal", m.kind)
	}
}

// RecvComplete handles a chunk: it checks it, copies it out, posts the
// buffer again and grants its credit back.
func (l *fetchLink) RecvComplete(wr uint64, n int, imm uint64) {
	fc, f := l.fc, l.fc.f
	f.mu.Lock()
	if !l.current() {
		f.mu.Unlock()
		return
	}
	m, err := decodeTransferImm(imm)
	switch {
	case err != nil:
		fc.failLocked(fmt.Errorf("from node %d: %w", fc.peer, err))
	case m.kind != transferChunk:
		fc.protocolLocked("%v transfer", m.kind)
	case wr >= uint64(len(l.bufs)) || n < 0 || n > len(l.bufs[wr]):
		fc.protocolLocked("completion of receive %d with %d bytes", wr, n) // the transport's bug, really
	case fc.mu.cur < 0 || m.part != fc.mu.cur:
		fc.protocolLocked("chunk of part %d while receiving %d", m.part, fc.mu.cur)
	case n == 0:
		fc.protocolLocked("empty chunk of part %d", m.part)
	case fc.mu.got+n > fc.mu.size:
		fc.protocolLocked("chunk of part %d ends at %d, past its size %d", m.part, fc.mu.got+n, fc.mu.size)
	case (m.arg == 1) != (fc.mu.got+n == fc.mu.size):
		fc.protocolLocked("chunk of part %d ends at %d of %d with final flag %d", m.part, fc.mu.got+n, fc.mu.size, m.arg)
	}
	if !l.current() {
		f.mu.Unlock()
		return
	}
	qp, buf, pw, got := fc.mu.qp, fc.mu.buf, fc.mu.pw, fc.mu.got
	f.mu.Unlock()

	// Only this queue pair's handler calls, which never overlap, touch buf
	// and write to pw (a new queue pair gets a new buffer or attempt).
	var werr error
	switch {
	case buf != nil:
		copy(buf[got:got+n], l.bufs[wr][:n])
	case pw != nil:
		_, werr = pw.Write(l.bufs[wr][:n])
	}
	postErr := qp.PostRecv(l.bufs[wr], wr)
	if postErr == nil {
		postErr = qp.Signal(encodeTransferImm(transferImm{kind: transferCredit, arg: 1}))
	}

	f.mu.Lock()
	if !l.current() {
		f.mu.Unlock()
		return
	}
	if werr != nil && fc.mu.pw == pw {
		// (Unless the attempt was aborted meanwhile: another donor
		// completed the part.)
		f.sinkFailedLocked(m.part, werr)
		f.mu.Unlock()
		return
	}
	fc.mu.got += n
	fc.mu.received += int64(n)
	if on := f.cfg.OnReceived; on != nil {
		on(n)
	}
	fc.progressLocked()
	var closing PartWriter
	if fc.mu.got == fc.mu.size {
		p, data, size := fc.mu.cur, fc.mu.buf, fc.mu.size
		pw = fc.mu.pw
		fc.mu.cur, fc.mu.size, fc.mu.buf, fc.mu.pw, fc.mu.got = -1, 0, nil, nil, 0
		if pw != nil && f.mu.parts[p].done {
			pw.Abort()
			pw = nil
		}
		fc.completeLocked(p, data, size)
		if pw != nil {
			// The attempt is complete: the part is done unless closing it
			// fails. Closing may take a while (the sink writes what it
			// buffered, say), so not under the lock; meanwhile the part
			// counts as done, an attempt that completes later is
			// aborted, and the transfer does not end.
			closing = pw
			f.mu.closing++
		}
	}
	if postErr != nil {
		fc.failLocked(postErr)
	}
	f.mu.Unlock()
	if closing == nil {
		return
	}
	cerr := closing.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.closing--
	if cerr != nil {
		f.sinkFailedLocked(m.part, cerr)
	}
	f.wakeUpLocked()
}

// sinkFailedLocked fails the transfer: the sink could not take part p.
// REQUIRES: f.mu.
func (f *fetcher) sinkFailedLocked(p int, err error) {
	if f.mu.err == nil {
		f.mu.err = fmt.Errorf("%w: part %d: %w", ErrTransfer, p, err)
	}
	f.wakeUpLocked()
}

// SendComplete is never called: the joiner only signals.
func (l *fetchLink) SendComplete(wr uint64) {}

// Failed ends this queue pair.
func (l *fetchLink) Failed(err error) {
	f := l.fc.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.fc.mu.link == l {
		l.fc.failLocked(err)
	}
}

// poll ends the transfer once all parts are in, one cannot be had, or Stop
// was called; until then it asks other donors too for the parts of
// stalled ones, closes failed queue pairs and opens new ones to the
// donors whose connection broke, and calls itself again on the clock. It
// runs when something changed (wakeUpLocked) and at least every quarter
// of StallTimeout; one call at a time does the work.
func (f *fetcher) poll() {
	f.mu.Lock()
	if f.mu.polling {
		f.mu.again = true
		f.mu.Unlock()
		return
	}
	f.mu.polling = true
	f.mu.timer = nil
	tick := max(f.cfg.StallTimeout/4, time.Millisecond)
	for {
		f.mu.again = false
		if parts, err, ended := f.endedLocked(); ended {
			qps := f.finishLocked()
			f.mu.Unlock()
			for _, qp := range qps {
				qp.Close()
			}
			f.done(parts, err)
			return
		}
		now := f.cfg.Clock.Now()
		for _, fc := range f.conns {
			if fc.mu.dead {
				continue
			}
			if owed := fc.owedLocked(); len(owed) > 0 && now.Sub(fc.mu.last) >= f.cfg.StallTimeout {
				fc.mu.last = now
				fc.mu.stalls++
				stalled := fmt.Errorf("%w: no progress from node %d for %v", ErrDonorStalled, fc.peer, time.Duration(fc.mu.stalls)*f.cfg.StallTimeout)
				switch {
				case fc.mu.stalls >= fetchGiveUpStalls && fc.mu.qp != nil:
					// Its connection holds, yet it sends nothing: it
					// will not (its snapshot failed, or it lost track).
					fc.failLocked(stalled)
				case fc.mu.stalls == 1:
					// Ask the other holder too; the stalled one may
					// still send.
					f.log.Info("membership: fetch: donor stalled: asking others too", "donor", fc.peer, "owed", owed, "stall", f.cfg.StallTimeout)
					for _, p := range owed {
						f.mu.parts[p].addErr(stalled)
						f.assignLocked(p)
					}
				}
			}
		}
		wait := tick
		var toClose []rdma.QueuePair
		var reopen []*fetchConn
		for _, fc := range f.conns {
			toClose = append(toClose, fc.mu.toClose...)
			fc.mu.toClose = nil
			if fc.mu.broken && !fc.mu.dead && fc.mu.link == nil {
				if d := fc.mu.reopenAt.Sub(now); d > 0 {
					wait = min(wait, d)
				} else {
					reopen = append(reopen, fc)
				}
			}
		}
		if len(toClose) == 0 && len(reopen) == 0 && !f.mu.again {
			f.mu.polling = false
			f.scheduleLocked(now.Add(wait))
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		for _, qp := range toClose {
			qp.Close()
		}
		for _, fc := range reopen {
			fc.open()
		}
		f.mu.Lock() // and look again: state may have changed meanwhile
	}
}

// endedLocked reports whether the transfer is over, and with what.
// REQUIRES: f.mu.
func (f *fetcher) endedLocked() (parts [][]byte, err error, ended bool) {
	switch {
	case f.mu.closing > 0:
		return nil, nil, false
	case f.mu.err != nil:
		return nil, f.mu.err, true
	case f.mu.remaining == 0 && f.cfg.Sink != nil:
		return nil, nil, true
	case f.mu.remaining == 0:
		out := make([][]byte, len(f.mu.parts))
		for i := range f.mu.parts {
			out[i] = f.mu.parts[i].data
		}
		return out, nil, true
	case f.mu.stopped != nil:
		var errs []error
		for p, part := range f.mu.parts {
			if !part.done {
				errs = append(errs, fmt.Errorf("part %d: %w", p, errors.Join(part.errs...)))
			}
		}
		return nil, fmt.Errorf("%w: %w: %d of %d parts missing: %w", ErrTransfer, f.mu.stopped, len(errs), len(f.mu.parts), errors.Join(errs...)), true
	}
	return nil, nil, false
}

// finishLocked ends the transfer and returns the queue pairs to close.
// REQUIRES: f.mu.
func (f *fetcher) finishLocked() []rdma.QueuePair {
	f.mu.finished = true
	if f.mu.timer != nil {
		f.mu.timer.Stop()
		f.mu.timer = nil
	}
	var qps []rdma.QueuePair
	for _, fc := range f.conns {
		fc.abortLocked()
		qps = append(qps, fc.mu.toClose...)
		fc.mu.toClose = nil
		if fc.mu.qp != nil {
			qps = append(qps, fc.mu.qp)
			fc.mu.qp = nil
		}
		fc.mu.link = nil
	}
	return qps
}

// closeAll ends the transfer without calling done, and closes every
// queue pair.
func (f *fetcher) closeAll() {
	f.mu.Lock()
	qps := f.finishLocked()
	f.mu.Unlock()
	for _, qp := range qps {
		qp.Close()
	}
}
