package memlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/internal/memlog"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/persistence"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// durableLog is the contract both logs keep: the methods the runtime
// calls.
type durableLog interface {
	Append(es ...persistence.Entry) error
	Synced() uint64
	OnSynced(fn func(index uint64))
	WaitSynced(ctx context.Context, index uint64) error
	First() uint64
	Last() uint64
	Err() error
	Failed() <-chan struct{}
	Get(index uint64) (persistence.Entry, error)
	Scan(ctx context.Context, from, to uint64, fn func(persistence.Entry) error) error
	PutView(ctx context.Context, v membership.View) error
	Views(ctx context.Context) ([]membership.View, error)
	TrimBefore(ctx context.Context, index uint64) error
	SetSnapshot(ctx context.Context, index uint64, meta []byte) error
	Snapshot() (index uint64, meta []byte, err error)
	InstallSnapshot(ctx context.Context, index uint64, meta []byte) error
	CreateSnapshot(ctx context.Context, index uint64, parts int) (persistence.SnapshotWriter, error)
	ReadSnapshot() (persistence.SnapshotReader, error)
	SetDurable(index uint64)
	Durable() uint64
	Close() error
}

var (
	_ durableLog = (*persistence.Log)(nil)
	_ durableLog = (*memlog.Log)(nil)
)

// disk is one implementation's log as a test drives it.
type disk interface {
	// log is the log now open.
	log() durableLog
	// crashWith waits until everything appended is synced, runs f on
	// the log with syncs held (f must not wait for one), then crashes:
	// the log is replaced by what a restart finds, which must be exactly
	// what was synced before f.
	crashWith(f func(l durableLog))
	// reopen closes the log and opens it again.
	reopen()
	// close closes the log for good, at the end of the test.
	close()
}

// impls are the implementations the conformance tests hold to the same
// results.
var impls = []struct {
	name string
	open func(t *testing.T) disk
}{
	{"persistence", openPebble},
	{"memlog", openMem},
}

// pebbleDisk is a persistence.Log on a crashable in-memory file system,
// whose write-ahead log syncs can be held.
type pebbleDisk struct {
	t    *testing.T
	mem  *vfs.MemFS
	hold *syncHold
	l    *persistence.Log
}

func openPebble(t *testing.T) disk {
	d := &pebbleDisk{t: t, mem: vfs.NewCrashableMem(), hold: &syncHold{}}
	d.open()
	return d
}

func (d *pebbleDisk) open() {
	d.t.Helper()
	// A short MaxDelay keeps the tests' waits for syncs short.
	l, err := persistence.Open(context.Background(), persistence.Options{Dir: "db", FS: errorfs.Wrap(d.mem, d.hold), MaxDelay: time.Microsecond})
	if err != nil {
		d.t.Fatalf("Open: %v", err)
	}
	d.l = l
}

func (d *pebbleDisk) log() durableLog { return d.l }

func (d *pebbleDisk) crashWith(f func(durableLog)) {
	d.t.Helper()
	_ = d.l.WaitSynced(context.Background(), d.l.Last()) // ErrClosed if closed
	d.hold.stall()
	f(d.l)
	crashed := d.mem.CrashClone(vfs.CrashCloneCfg{})
	d.hold.resume()
	_ = d.l.Close() // on the file system the crash left behind
	d.mem = crashed
	d.open()
}

func (d *pebbleDisk) reopen() {
	d.t.Helper()
	if err := d.l.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.open()
}

func (d *pebbleDisk) close() { _ = d.l.Close() }

// syncHold is an errorfs injector that holds the syncs of the
// write-ahead log while stalled.
type syncHold struct {
	mu sync.Mutex
	ch chan struct{} // non-nil while stalled; closed to resume
}

func (h *syncHold) String() string { return "syncHold" }

func (h *syncHold) stall() {
	h.mu.Lock()
	h.ch = make(chan struct{})
	h.mu.Unlock()
}

func (h *syncHold) resume() {
	h.mu.Lock()
	close(h.ch)
	h.ch = nil
	h.mu.Unlock()
}

func (h *syncHold) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	h.mu.Lock()
	ch := h.ch
	h.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return nil
}

// memDisk is a memlog.Log, crashed by its own Crash.
type memDisk struct {
	t *testing.T
	l *memlog.Log
}

func openMem(t *testing.T) disk { return &memDisk{t: t, l: memlog.New()} }

func (d *memDisk) log() durableLog { return d.l }

func (d *memDisk) crashWith(f func(durableLog)) {
	_ = d.l.WaitSynced(context.Background(), d.l.Last()) // ErrClosed if closed
	// A memlog syncs only when asked: what f writes stays unsynced.
	f(d.l)
	d.l = d.l.Crash(nil)
}

func (d *memDisk) reopen() {
	d.t.Helper()
	if err := d.l.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.l = d.l.Crash(nil) // after Close, everything is synced
}

func (d *memDisk) close() { _ = d.l.Close() }

// errName names the sentinel error err wraps, for comparing outcomes.
func errName(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{persistence.ErrOutOfOrder, "ErrOutOfOrder"},
		{persistence.ErrNotFound, "ErrNotFound"},
		{persistence.ErrTrimmed, "ErrTrimmed"},
		{persistence.ErrCorrupt, "ErrCorrupt"},
		{persistence.ErrFailed, "ErrFailed"},
		{persistence.ErrClosed, "ErrClosed"},
		{persistence.ErrViewConflict, "ErrViewConflict"},
		{context.Canceled, "Canceled"},
		{context.DeadlineExceeded, "DeadlineExceeded"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if err == nil {
		return "ok"
	}
	return fmt.Sprintf("unexpected error %v", err)
}

// payloadFor is the deterministic payload of entry index: 0 to 49 bytes.
func payloadFor(index uint64) []byte {
	p := make([]byte, index*7919%50)
	for i := range p {
		p[i] = byte(index>>(8*(i%8))) ^ byte(i)
	}
	return p
}

func entryFor(index uint64) persistence.Entry {
	return persistence.Entry{Index: index, Epoch: 1 + index/100, Sender: index % 5, Seq: index / 5, Payload: payloadFor(index)}
}

func entries(from, to uint64) []persistence.Entry {
	var es []persistence.Entry
	for i := from; i <= to; i++ {
		es = append(es, entryFor(i))
		if i == to { // to may be math.MaxUint64
			break
		}
	}
	return es
}

// describe prints an entry for comparisons.
func describe(e persistence.Entry) string {
	return fmt.Sprintf("%d:%d/%d/%d/%x", e.Index, e.Epoch, e.Sender, e.Seq, e.Payload)
}

func members(ids ...uint64) []membership.Member {
	ms := make([]membership.Member, len(ids))
	for i, id := range ids {
		ms[i] = membership.Member{ID: id, Incarnation: 1, Addr: fmt.Sprintf("10.0.0.%d:7000", id)}
	}
	return ms
}

func viewFor(epoch uint64) membership.View {
	return membership.View{Epoch: epoch, Members: members(1, 2), Start: epoch * 10, Sent: []uint64{epoch, 0}}
}
