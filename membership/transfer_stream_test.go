package membership

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/convoy-gcs/convoy/rdma"
)

// streamedTransfers makes the transfer tests stream: donors serve their
// parts from readers (AddPartReader) and joiners hand what they receive
// to a sink (FetchConfig.Sink). TestTransferStreamed sets it.
var streamedTransfers bool

// TestTransferStreamed runs the transfer tests again with streamed parts
// on both sides: the protocol's checks and the recovery from failed,
// stalled and misbehaving donors must be the same.
func TestTransferStreamed(t *testing.T) {
	streamedTransfers = true
	defer func() { streamedTransfers = false }()
	for name, test := range map[string]func(*testing.T){
		"sizes":            TestTransferSizes,
		"two joiners":      TestTransferTwoJoiners,
		"donor crash":      TestTransferDonorCrash,
		"connection":       TestTransferConnectionBreaks,
		"stalled donor":    TestTransferStalledDonor,
		"bad donor input":  TestTransferBadDonorInput,
		"tcp":              TestTransferTCP,
		"donor and backup": TestTransferDonorAndBackupGone,
	} {
		t.Run(name, test)
	}
}

// fetch runs Fetch, with a sink when transfers stream, and returns the
// parts.
func fetch(t testing.TB, ctx context.Context, cfg FetchConfig) ([][]byte, error) {
	if !streamedTransfers {
		return Fetch(ctx, cfg)
	}
	sink := &testSink{t: t, parts: make(map[int][]byte)}
	cfg.Sink = sink
	got, err := Fetch(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if got != nil {
		t.Errorf("Fetch with a sink returned %d parts", len(got))
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	parts := make([][]byte, len(cfg.Donors)*max(cfg.Slices, 1))
	for i := range parts {
		p, ok := sink.parts[i]
		if !ok {
			t.Fatalf("the sink has no part %d after the transfer", i)
		}
		parts[i] = p
	}
	if sink.open.Load() != 0 {
		t.Errorf("%d attempts neither closed nor aborted after the transfer", sink.open.Load())
	}
	return parts, nil
}

// testSink is a PartSink that keeps parts in memory and checks how the
// transfer uses it.
type testSink struct {
	t testing.TB
	// failWrite, if set, fails every Write with it.
	failWrite error
	open      atomic.Int64 // attempts begun, not closed or aborted

	mu    sync.Mutex
	parts map[int][]byte
}

func (s *testSink) Begin(part int, size int64) (PartWriter, error) {
	s.open.Add(1)
	return &testAttempt{s: s, part: part, size: size}, nil
}

type testAttempt struct {
	s    *testSink
	part int
	size int64

	mu              sync.Mutex
	buf             []byte
	closed, aborted bool
}

func (a *testAttempt) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		a.s.t.Errorf("part %d written after Close", a.part)
	case a.aborted:
		return 0, errors.New("attempt aborted")
	case a.s.failWrite != nil:
		return 0, a.s.failWrite
	}
	if int64(len(a.buf)+len(p)) > a.size {
		a.s.t.Errorf("part %d: written past its size %d", a.part, a.size)
	}
	a.buf = append(a.buf, p...)
	return len(p), nil
}

func (a *testAttempt) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.aborted || int64(len(a.buf)) != a.size {
		a.s.t.Errorf("part %d closed with %d of %d bytes (closed %v, aborted %v)", a.part, len(a.buf), a.size, a.closed, a.aborted)
	}
	a.closed = true
	a.s.open.Add(-1)
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if _, ok := a.s.parts[a.part]; ok {
		a.s.t.Errorf("part %d completed twice", a.part)
	}
	a.s.parts[a.part] = a.buf
	return nil
}

func (a *testAttempt) Abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		a.s.t.Errorf("part %d aborted after Close", a.part)
	}
	if !a.aborted {
		a.aborted = true
		a.s.open.Add(-1)
	}
}

// TestTransferSinkFails: a sink that cannot take a part fails the
// transfer, with its error.
func TestTransferSinkFails(t *testing.T) {
	checkTransferLeaks(t)
	s := randomParts(21, 200<<10, 10)
	n := newMemNet(t, 21)
	startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner})
	full := errors.New("disk full")
	cfg := fetchConfig(n.endpoint(testJoiner), 2)
	cfg.Sink = &testSink{t: t, parts: make(map[int][]byte), failWrite: full}
	if _, err := Fetch(context.Background(), cfg); !errors.Is(err, ErrTransfer) || !errors.Is(err, full) {
		t.Fatalf("Fetch into a failing sink: %v, want ErrTransfer wrapping the sink's error", err)
	}
}

// failingReader fails its reads from off on.
type failingReader struct {
	io.ReaderAt
	off int64
}

func (r failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.off {
		return 0, errors.New("read error")
	}
	return r.ReaderAt.ReadAt(p, off)
}

// TestTransferDonorReadFails: a donor that cannot read a part it serves
// from a reader ends its transfer to the joiner, who gets the part from
// its backup.
func TestTransferDonorReadFails(t *testing.T) {
	checkTransferLeaks(t)
	const k = 2
	s := randomParts(23, 300<<10, 300<<10)
	n := newMemNet(t, 23)
	for i, id := range donorIDs(k) {
		parts, err := SnapshotParts(s, DonorParts(i, k), k)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDonor(context.Background(), DonorConfig{
			Endpoint: n.endpoint(id), Stream: testStream, Joiners: []rdma.NodeID{testJoiner},
			Pending: DonorParts(i, k), Of: k, ChunkBytes: testChunkBytes,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		for _, p := range DonorParts(i, k) {
			var r io.ReaderAt = bytes.NewReader(parts[p])
			if i == 1 && p == 1 {
				r = failingReader{r, 100 << 10} // half way through its own part
			}
			if err := d.AddPartReader(p, r, int64(len(parts[p]))); err != nil {
				t.Fatal(err)
			}
		}
	}
	streamedTransfers = true
	defer func() { streamedTransfers = false }()
	got, err := fetch(t, context.Background(), fetchConfig(n.endpoint(testJoiner), k))
	if err != nil {
		t.Fatal(err)
	}
	restore(t, s, got)
}

// TestDonorReaderBuffers: a donor serving a large part from a reader
// reads it a chunk at a time and keeps few chunks in flight, however
// many credits the joiner grants.
func TestDonorReaderBuffers(t *testing.T) {
	checkTransferLeaks(t)
	const size = 8 << 20
	s := randomParts(29, size)
	n := newMemNet(t, 29)
	r := &countingReader{ReaderAt: bytes.NewReader(s.parts[0])}
	d, err := NewDonor(context.Background(), DonorConfig{
		Endpoint: n.endpoint(1), Stream: testStream, Joiners: []rdma.NodeID{testJoiner},
		Pending: []int{0}, Of: 1, ChunkBytes: testChunkBytes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.AddPartReader(0, r, size); err != nil {
		t.Fatal(err)
	}
	streamedTransfers = true
	defer func() { streamedTransfers = false }()
	got, err := fetch(t, context.Background(), fetchConfig(n.endpoint(testJoiner), 1))
	if err != nil {
		t.Fatal(err)
	}
	restore(t, s, got)
	if r.reads.Load() != size/testChunkBytes || r.bytes.Load() != size {
		t.Errorf("donor made %d reads of %d bytes in all, want %d of one chunk each", r.reads.Load(), r.bytes.Load(), size/testChunkBytes)
	}
}

type countingReader struct {
	io.ReaderAt
	reads, bytes atomic.Int64
}

func (r *countingReader) ReadAt(p []byte, off int64) (int, error) {
	r.reads.Add(1)
	r.bytes.Add(int64(len(p)))
	return r.ReaderAt.ReadAt(p, off)
}

// TestAddPartReaderErrors: what AddPartReader refuses.
func TestAddPartReaderErrors(t *testing.T) {
	checkTransferLeaks(t)
	n := newMemNet(t, 31)
	d, err := NewDonor(context.Background(), DonorConfig{
		Endpoint: n.endpoint(1), Stream: testStream, Joiners: []rdma.NodeID{testJoiner}, Pending: []int{0}, Of: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		part int
		size int64
	}{{1, 5}, {0, -1}, {0, maxTransferPartSize + 1}} {
		if err := d.AddPartReader(tc.part, bytes.NewReader(nil), tc.size); err == nil {
			t.Errorf("AddPartReader(%d, size %d): no error", tc.part, tc.size)
		}
	}
	if err := d.AddPartReader(0, bytes.NewReader(make([]byte, 5)), 5); err != nil {
		t.Fatal(err)
	}
	if err := d.AddPartReader(0, bytes.NewReader(make([]byte, 5)), 5); err == nil {
		t.Error("AddPartReader of a part added already: no error")
	}
}
