package membership

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/rdma"
)

const (
	testStream     rdma.StreamID = 7
	testChunkBytes               = 64 << 10
	testJoiner     rdma.NodeID   = 100
)

// checkTransferLeaks fails t if goroutines started during t outlive its
// cleanups. Call it first, so that its check runs after every other
// cleanup.
func checkTransferLeaks(t testing.TB) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(opt); err != nil {
			t.Error(err)
		}
	})
}

// partsState is a StateMachine whose state is a list of parts.
type partsState struct {
	parts    [][]byte
	restored []byte
}

func (s *partsState) Snapshot(w io.Writer, part, of int) error {
	if of != len(s.parts) {
		return fmt.Errorf("snapshot into %d parts, have %d", of, len(s.parts))
	}
	_, err := w.Write(s.parts[part])
	return err
}

func (s *partsState) Restore(parts []io.Reader) error {
	var buf bytes.Buffer
	for _, r := range parts {
		if _, err := io.Copy(&buf, r); err != nil {
			return err
		}
	}
	s.restored = buf.Bytes()
	return nil
}

func (s *partsState) whole() []byte { return bytes.Join(s.parts, nil) }

// randomParts returns parts of the given sizes filled from seed.
func randomParts(seed uint64, sizes ...int) *partsState {
	var key [32]byte
	key[0] = byte(seed)
	rng := rand.NewChaCha8(key)
	s := &partsState{}
	for _, n := range sizes {
		b := make([]byte, n)
		rng.Read(b)
		s.parts = append(s.parts, b)
	}
	return s
}

// restore feeds fetched parts to a fresh state machine and checks that it
// gets exactly want's state.
func restore(t *testing.T, want *partsState, got [][]byte) {
	t.Helper()
	if len(got) != len(want.parts) {
		t.Fatalf("got %d parts, want %d", len(got), len(want.parts))
	}
	readers := make([]io.Reader, len(got))
	for i, b := range got {
		readers[i] = bytes.NewReader(b)
	}
	var s partsState
	if err := s.Restore(readers); err != nil {
		t.Fatal(err)
	}
	if g, w := sha256.Sum256(s.restored), sha256.Sum256(want.whole()); g != w {
		t.Fatalf("restored state of %d bytes has checksum %x, want %d bytes with %x", len(s.restored), g[:8], len(want.whole()), w[:8])
	}
}

// countingEndpoint wraps an endpoint and counts the bytes its queue pairs
// receive from each peer. onRecv, if set, runs in the handler after each
// transfer with the peer's running total.
type countingEndpoint struct {
	rdma.Endpoint
	onRecv func(peer rdma.NodeID, total int64)

	mu     sync.Mutex
	counts map[rdma.NodeID]int64
}

func (e *countingEndpoint) Open(ctx context.Context, peer rdma.NodeID, stream rdma.StreamID, h rdma.Handler) (rdma.QueuePair, error) {
	return e.Endpoint.Open(ctx, peer, stream, &countingHandler{Handler: h, e: e, peer: peer})
}

func (e *countingEndpoint) count(peer rdma.NodeID) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[peer]
}

type countingHandler struct {
	rdma.Handler
	e    *countingEndpoint
	peer rdma.NodeID
}

func (h *countingHandler) RecvComplete(wr uint64, n int, imm uint64) {
	h.e.mu.Lock()
	if h.e.counts == nil {
		h.e.counts = make(map[rdma.NodeID]int64)
	}
	h.e.counts[h.peer] += int64(n)
	total := h.e.counts[h.peer]
	h.e.mu.Unlock()
	h.Handler.RecvComplete(wr, n, imm)
	if h.e.onRecv != nil {
		h.e.onRecv(h.peer, total)
	}
}

// memNet is a mem fabric with endpoints: donors 1..k and the joiner.
type memNet struct {
	t      testing.TB
	fabric *rdma.MemFabric
	eps    map[rdma.NodeID]rdma.Endpoint
}

func newMemNet(t testing.TB, seed int64) *memNet {
	f := rdma.NewMemFabric(rdma.MemOptions{Seed: seed})
	t.Cleanup(func() { f.Close() })
	n := &memNet{t: t, fabric: f, eps: make(map[rdma.NodeID]rdma.Endpoint)}
	n.endpoint(testJoiner)
	return n
}

func (n *memNet) endpoint(id rdma.NodeID) rdma.Endpoint {
	if ep := n.eps[id]; ep != nil {
		return ep
	}
	ep, err := n.fabric.Endpoint(id)
	if err != nil {
		n.t.Fatal(err)
	}
	n.eps[id] = ep
	return ep
}

// donorIDs returns the node ids of k donors: 1..k.
func donorIDs(k int) []rdma.NodeID {
	ids := make([]rdma.NodeID, k)
	for i := range ids {
		ids[i] = rdma.NodeID(i + 1)
	}
	return ids
}

// startDonors starts a Donor for each donor index not in skip, serving the
// parts of s to joiners. Endpoints come from ep.
func startDonors(t testing.TB, ep func(rdma.NodeID) rdma.Endpoint, s *partsState, joiners []rdma.NodeID, skip ...int) []*Donor {
	t.Helper()
	k := len(s.parts)
	for _, j := range joiners {
		ep(j) // the joiners' endpoints must exist for the donors to reach them
	}
	donors := make([]*Donor, k)
	for i, id := range donorIDs(k) {
		if containsInt(skip, i) {
			continue
		}
		parts, err := SnapshotParts(s, DonorParts(i, k), k)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DonorConfig{
			Endpoint:   ep(id),
			Stream:     testStream,
			Joiners:    joiners,
			Parts:      parts,
			Of:         k,
			ChunkBytes: testChunkBytes,
		}
		if streamedTransfers {
			// Served from readers, as they are read.
			cfg.Parts, cfg.Pending = nil, DonorParts(i, k)
		}
		d, err := NewDonor(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if streamedTransfers {
			for _, p := range cfg.Pending {
				if err := d.AddPartReader(p, bytes.NewReader(parts[p]), int64(len(parts[p]))); err != nil {
					t.Fatal(err)
				}
			}
		}
		donors[i] = d
	}
	return donors
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func fetchConfig(ep rdma.Endpoint, k int) FetchConfig {
	return FetchConfig{
		Endpoint:     ep,
		Stream:       testStream,
		Donors:       donorIDs(k),
		ChunkBytes:   testChunkBytes,
		StallTimeout: time.Second,
	}
}

// checkServed checks how many bytes the joiner got from each donor.
func checkServed(t *testing.T, ep *countingEndpoint, want map[rdma.NodeID]int64) {
	t.Helper()
	for id, n := range want {
		if got := ep.count(id); got != n {
			t.Errorf("donor %d sent %d bytes, want %d", id, got, n)
		}
	}
}

func TestTransferSizes(t *testing.T) {
	checkTransferLeaks(t)
	sizes := []struct {
		name string
		size func(part int) int
	}{
		{"empty", func(int) int { return 0 }},
		{"one-byte", func(int) int { return 1 }},
		{"one-chunk", func(int) int { return testChunkBytes }},
		{"several-MiB", func(p int) int { return 3<<20 + 17*p }},
		{"mixed", func(p int) int { return []int{0, 1, testChunkBytes, testChunkBytes + 1, 2<<20 + 3}[p%5] }},
	}
	for _, k := range []int{1, 2, 3, 5} {
		for _, sz := range sizes {
			t.Run(fmt.Sprintf("k=%d/%s", k, sz.name), func(t *testing.T) {
				lens := make([]int, k)
				for p := range lens {
					lens[p] = sz.size(p)
				}
				s := randomParts(uint64(k), lens...)
				n := newMemNet(t, int64(k))
				startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner})
				ep := &countingEndpoint{Endpoint: n.endpoint(testJoiner)}
				got, err := fetch(t, context.Background(), fetchConfig(ep, k))
				if err != nil {
					t.Fatal(err)
				}
				restore(t, s, got)
				want := map[rdma.NodeID]int64{}
				for i, id := range donorIDs(k) {
					want[id] = int64(lens[i])
				}
				checkServed(t, ep, want)
			})
		}
	}
}

// OnSent and OnReceived count the part data a transfer moves: every
// byte of the state once, on each side.
func TestTransferCountsBytes(t *testing.T) {
	checkTransferLeaks(t)
	const k = 3
	s := randomParts(5, 1<<20+3, 0, 7)
	n := newMemNet(t, 5)
	var sent, received atomic.Int64
	n.endpoint(testJoiner)
	for i, id := range donorIDs(k) {
		parts, err := SnapshotParts(s, DonorParts(i, k), k)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDonor(context.Background(), DonorConfig{
			Endpoint: n.endpoint(id), Stream: testStream, Joiners: []rdma.NodeID{testJoiner}, Parts: parts, Of: k,
			ChunkBytes: testChunkBytes, OnSent: func(bytes int) { sent.Add(int64(bytes)) },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
	}
	cfg := fetchConfig(n.endpoint(testJoiner), k)
	cfg.OnReceived = func(bytes int) { received.Add(int64(bytes)) }
	got, err := Fetch(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	restore(t, s, got)
	want := int64(len(s.whole()))
	if sent.Load() != want || received.Load() != want {
		t.Errorf("donors sent %d bytes, the joiner received %d; the state holds %d", sent.Load(), received.Load(), want)
	}
}

func TestTransferTwoJoiners(t *testing.T) {
	checkTransferLeaks(t)
	const k = 3
	s := randomParts(3, 1<<20, 1<<20+1, 5)
	n := newMemNet(t, 3)
	joiners := []rdma.NodeID{testJoiner, testJoiner + 1}
	donors := startDonors(t, n.endpoint, s, joiners)
	var wg sync.WaitGroup
	results := make([][][]byte, len(joiners))
	errs := make([]error, len(joiners))
	for i, j := range joiners {
		ep := n.endpoint(j)
		wg.Go(func() {
			results[i], errs[i] = fetch(t, context.Background(), fetchConfig(ep, k))
		})
	}
	wg.Wait()
	for i := range joiners {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		restore(t, s, results[i])
	}
	// Both joiners closed their queue pairs, so the donors are done.
	for i, d := range donors {
		select {
		case <-d.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("donor %d not done after both joiners finished", i)
		}
	}
}

func TestTransferDonorCrash(t *testing.T) {
	checkTransferLeaks(t)
	const k = 3
	const partBytes = 1 << 20
	for _, when := range []string{"before", "middle"} {
		t.Run(when, func(t *testing.T) {
			s := randomParts(5, partBytes, partBytes, partBytes)
			n := newMemNet(t, 5)
			startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner})
			ep := &countingEndpoint{Endpoint: n.endpoint(testJoiner)}
			const victim = 2 // donor index 1
			if when == "before" {
				n.fabric.Crash(victim)
			} else {
				var once sync.Once
				ep.onRecv = func(peer rdma.NodeID, total int64) {
					if peer == victim && total >= partBytes/4 {
						once.Do(func() { n.fabric.Crash(victim) })
					}
				}
			}
			got, err := fetch(t, context.Background(), fetchConfig(ep, k))
			if err != nil {
				t.Fatal(err)
			}
			restore(t, s, got)
			// Part 1 comes whole from its backup, donor index 0.
			checkServed(t, ep, map[rdma.NodeID]int64{1: 2 * partBytes, 3: partBytes})
			switch v := ep.count(victim); {
			case when == "before" && v != 0:
				t.Errorf("crashed donor sent %d bytes", v)
			case when == "middle" && (v < partBytes/4 || v >= partBytes):
				t.Errorf("donor crashed half way sent %d bytes", v)
			}
		})
	}
}

// TestTransferDonorAndBackupGone: with a part's donor and its backup
// crashed, the joiner waits for them until its context ends, and then
// says why.
func TestTransferDonorAndBackupGone(t *testing.T) {
	checkTransferLeaks(t)
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sizes := make([]int, k)
				for i := range sizes {
					sizes[i] = 100 << 10
				}
				s := randomParts(9, sizes...)
				n := newMemNet(t, 9)
				startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner})
				n.fabric.Crash(1) // donor of part 0, backup of part k-1
				if k > 1 {
					n.fabric.Crash(rdma.NodeID(k)) // backup of part 0
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := Fetch(ctx, fetchConfig(n.endpoint(testJoiner), k))
				if !errors.Is(err, ErrTransfer) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Fetch: %v, want ErrTransfer and the context's error", err)
				}
				if !errors.Is(err, rdma.ErrUnreachable) {
					t.Errorf("Fetch: %v, want the cause (ErrUnreachable) too", err)
				}
				t.Log(err)
			})
		})
	}
}

// TestTransferConnectionBreaks: the connection between the joiner and its
// only donor breaks half way through, or the two are partitioned for a
// while; both open the stream again on a new connection, and the transfer
// completes from that donor.
func TestTransferConnectionBreaks(t *testing.T) {
	checkTransferLeaks(t)
	const partBytes = 1 << 20
	for _, fault := range []string{"break", "partition"} {
		t.Run(fault, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := randomParts(13, partBytes)
				n := newMemNet(t, 13)
				donors := startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner})
				ep := &countingEndpoint{Endpoint: n.endpoint(testJoiner)}
				var once sync.Once
				ep.onRecv = func(peer rdma.NodeID, total int64) {
					if total < partBytes/4 {
						return
					}
					once.Do(func() {
						if fault == "break" {
							n.fabric.BreakLink(1, testJoiner)
							return
						}
						n.fabric.Partition([]rdma.NodeID{1}, []rdma.NodeID{testJoiner})
						go func() {
							time.Sleep(3 * time.Second)
							n.fabric.Heal()
						}()
					})
				}
				cfg := fetchConfig(ep, 1)
				cfg.StallTimeout = 10 * time.Second
				got, err := fetch(t, context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				restore(t, s, got)
				if n := ep.count(1); n <= partBytes {
					t.Errorf("donor sent %d bytes, want the part again after the break", n)
				}
				select {
				case <-donors[0].Done():
				case <-time.After(time.Minute):
					t.Error("donor not done after the joiner finished")
				}
			})
		})
	}
}

// fakeDonor is a test donor: it opens the transfer queue pair to the
// joiner and, for each request, runs onRequest (from the handler).
type fakeDonor struct {
	onRequest func(qp rdma.QueuePair, part int)

	mu sync.Mutex
	qp rdma.QueuePair
}

func startFakeDonor(t testing.TB, ep rdma.Endpoint, onRequest func(qp rdma.QueuePair, part int)) *fakeDonor {
	d := &fakeDonor{onRequest: onRequest}
	qp, err := ep.Open(context.Background(), testJoiner, testStream, d)
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.qp = qp
	d.mu.Unlock()
	t.Cleanup(func() { qp.Close() })
	return d
}

func (d *fakeDonor) Signal(imm uint64) {
	m, err := decodeTransferImm(imm)
	if err != nil || m.kind != transferRequest || d.onRequest == nil {
		return
	}
	d.mu.Lock()
	qp := d.qp
	d.mu.Unlock()
	if qp != nil {
		d.onRequest(qp, m.part)
	}
}

func (d *fakeDonor) RecvComplete(wr uint64, n int, imm uint64) {}
func (d *fakeDonor) SendComplete(wr uint64)                    {}
func (d *fakeDonor) Failed(err error)                          {}

func begin(part, size int) uint64 {
	return encodeTransferImm(transferImm{kind: transferBegin, part: part, arg: uint64(size)})
}

func chunkImm(part int, last bool) uint64 {
	m := transferImm{kind: transferChunk, part: part}
	if last {
		m.arg = 1
	}
	return encodeTransferImm(m)
}

func TestTransferStalledDonor(t *testing.T) {
	checkTransferLeaks(t)
	const k = 3
	behaviours := map[string]func(qp rdma.QueuePair, part int){
		// Opens the queue pair and never answers.
		"silent": nil,
		// Announces the part, sends one chunk, then goes quiet.
		"half-way": func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 4*testChunkBytes))
			qp.PostSend(make([]byte, testChunkBytes), chunkImm(part, false), 1)
		},
	}
	for name, onRequest := range behaviours {
		// In a synctest bubble, time passes only while every goroutine
		// waits: the donors that serve never look stalled, however
		// slowly the machine runs them, and the one that does not is
		// asked of its backup too after exactly StallTimeout.
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := randomParts(11, 300<<10, 300<<10, 300<<10)
				n := newMemNet(t, 11)
				startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner}, 1)
				startFakeDonor(t, n.endpoint(2), onRequest)
				ep := &countingEndpoint{Endpoint: n.endpoint(testJoiner)}
				cfg := fetchConfig(ep, k)
				cfg.StallTimeout = 50 * time.Millisecond
				got, err := fetch(t, context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				restore(t, s, got)
				checkServed(t, ep, map[rdma.NodeID]int64{1: 600 << 10, 3: 300 << 10})
			})
		})
	}
}

// TestTransferSilentOnlyDonor: the only donor's connection holds but it
// never answers (its snapshot failed); the joiner gives it up after three
// stall timeouts and fails, rather than waiting for its context.
func TestTransferSilentOnlyDonor(t *testing.T) {
	checkTransferLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet(t, 19)
		startFakeDonor(t, n.endpoint(1), nil)
		cfg := fetchConfig(n.endpoint(testJoiner), 1)
		cfg.StallTimeout = time.Second
		start := time.Now()
		_, err := Fetch(context.Background(), cfg)
		if !errors.Is(err, ErrTransfer) || !errors.Is(err, ErrDonorStalled) {
			t.Fatalf("Fetch: %v, want ErrTransfer and ErrDonorStalled", err)
		}
		// The stall clock is checked every quarter of the timeout.
		if took := time.Since(start); took < 3*cfg.StallTimeout || took > 3*cfg.StallTimeout+cfg.StallTimeout/2 {
			t.Errorf("Fetch failed after %v, want three stall timeouts (%v)", took, 3*cfg.StallTimeout)
		}
	})
}

func TestTransferBadDonorInput(t *testing.T) {
	checkTransferLeaks(t)
	big := make([]byte, 2*testChunkBytes)
	cases := []struct {
		name      string
		onRequest func(qp rdma.QueuePair, part int)
		protocol  bool // the error must wrap ErrTransferProtocol
	}{
		{"unknown kind", func(qp rdma.QueuePair, part int) { qp.Signal(15 << transferKindShift) }, true},
		{"request from donor", func(qp rdma.QueuePair, part int) {
			qp.Signal(encodeTransferImm(transferImm{kind: transferRequest, part: part, arg: 1}))
		}, true},
		{"begin for another part", func(qp rdma.QueuePair, part int) { qp.Signal(begin(part+3, 10)) }, true},
		{"oversized part", func(qp rdma.QueuePair, part int) { qp.Signal(begin(part, 1<<20+1)) }, true},
		{"largest wire size", func(qp rdma.QueuePair, part int) { qp.Signal(begin(part, maxTransferPartSize)) }, true},
		{"twice begin", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 10))
			qp.Signal(begin(part, 10))
		}, true},
		{"chunk before begin", func(qp rdma.QueuePair, part int) {
			qp.PostSend(big[:10], chunkImm(part, true), 1)
		}, true},
		{"chunk past size", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 10))
			qp.PostSend(big[:20], chunkImm(part, true), 1)
		}, true},
		{"early final flag", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 100))
			qp.PostSend(big[:10], chunkImm(part, true), 1)
		}, true},
		{"missing final flag", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 10))
			qp.PostSend(big[:10], chunkImm(part, false), 1)
		}, true},
		{"empty chunk", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 10))
			qp.PostSend(nil, chunkImm(part, false), 1)
		}, true},
		{"chunk of another part", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 10))
			qp.PostSend(big[:10], chunkImm(part+1, true), 1)
		}, true},
		{"chunk with bad flags", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, 10))
			qp.PostSend(big[:10], chunkImm(part, true)|2, 1)
		}, true},
		{"begin as a transfer", func(qp rdma.QueuePair, part int) {
			qp.PostSend(big[:10], begin(part, 10), 1)
		}, true},
		{"chunk larger than the buffer", func(qp rdma.QueuePair, part int) {
			qp.Signal(begin(part, len(big)))
			qp.PostSend(big, chunkImm(part, true), 1)
		}, false},
		{"missing", func(qp rdma.QueuePair, part int) {
			qp.Signal(encodeTransferImm(transferImm{kind: transferMissing, part: part}))
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newMemNet(t, 13)
			startFakeDonor(t, n.endpoint(1), tc.onRequest)
			cfg := fetchConfig(n.endpoint(testJoiner), 1)
			cfg.MaxPartBytes = 1 << 20
			_, err := fetch(t, context.Background(), cfg)
			if !errors.Is(err, ErrTransfer) {
				t.Fatalf("Fetch: %v, want ErrTransfer", err)
			}
			if tc.protocol && !errors.Is(err, ErrTransferProtocol) {
				t.Fatalf("Fetch: %v, want ErrTransferProtocol", err)
			}
			t.Log(err)
		})
	}

	// With a good backup, a bad donor costs nothing but time.
	t.Run("recovered", func(t *testing.T) {
		s := randomParts(17, 200<<10, 200<<10)
		n := newMemNet(t, 17)
		startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner}, 1)
		startFakeDonor(t, n.endpoint(2), cases[3].onRequest)
		ep := &countingEndpoint{Endpoint: n.endpoint(testJoiner)}
		cfg := fetchConfig(ep, 2)
		cfg.MaxPartBytes = 1 << 20
		got, err := fetch(t, context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		restore(t, s, got)
		checkServed(t, ep, map[rdma.NodeID]int64{1: 400 << 10, 2: 0})
	})
}

// quietJoiner is a test joiner's handler that records failure.
type quietJoiner struct {
	failed chan error
}

func (j *quietJoiner) RecvComplete(wr uint64, n int, imm uint64) {}
func (j *quietJoiner) SendComplete(wr uint64)                    {}
func (j *quietJoiner) Signal(imm uint64)                         {}
func (j *quietJoiner) Failed(err error) {
	select {
	case j.failed <- err:
	default:
	}
}

func TestDonorBadJoinerInput(t *testing.T) {
	checkTransferLeaks(t)
	request := func(part int) uint64 {
		return encodeTransferImm(transferImm{kind: transferRequest, part: part, arg: testChunkBytes})
	}
	credit := func(n int) uint64 {
		return encodeTransferImm(transferImm{kind: transferCredit, arg: uint64(n)})
	}
	cases := []struct {
		name    string
		signals []uint64
	}{
		{"unknown kind", []uint64{0}},
		{"part out of range", []uint64{request(2)}},
		{"repeated request", []uint64{request(0), request(0)}},
		{"too many credits", []uint64{credit(maxDonorCredits), credit(1)}},
		{"zero credits", []uint64{credit(0)}},
		{"zero chunk", []uint64{request(0) &^ transferArgMask}},
		{"begin from joiner", []uint64{begin(0, 1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newMemNet(t, 19)
			s := randomParts(19, 10, 10)
			donors := startDonors(t, n.endpoint, s, []rdma.NodeID{testJoiner}, 1)
			j := &quietJoiner{failed: make(chan error, 1)}
			qp, err := n.endpoint(testJoiner).Open(context.Background(), 1, testStream, j)
			if err != nil {
				t.Fatal(err)
			}
			defer qp.Close()
			for _, imm := range tc.signals {
				if err := qp.Signal(imm); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-donors[0].Done():
			case <-time.After(10 * time.Second):
				t.Fatal("donor still serving a joiner that broke the protocol")
			}
			select {
			case err := <-j.failed:
				if !errors.Is(err, rdma.ErrPeerClosed) {
					t.Errorf("joiner's queue pair failed with %v, want ErrPeerClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("donor did not close the queue pair")
			}
		})
	}
}

func TestFetchContextCanceled(t *testing.T) {
	checkTransferLeaks(t)
	n := newMemNet(t, 23)
	startFakeDonor(t, n.endpoint(1), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := fetchConfig(n.endpoint(testJoiner), 1)
	cfg.StallTimeout = time.Hour
	done := make(chan error, 1)
	go func() {
		_, err := Fetch(ctx, cfg)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch: %v, want context.Canceled", err)
	}
}

func TestFetchConfigErrors(t *testing.T) {
	n := newMemNet(t, 1)
	ep := n.endpoint(testJoiner)
	cases := map[string]FetchConfig{
		"no endpoint":    {Donors: []rdma.NodeID{1}},
		"no donors":      {Endpoint: ep},
		"self donor":     {Endpoint: ep, Donors: []rdma.NodeID{testJoiner}},
		"repeated donor": {Endpoint: ep, Donors: []rdma.NodeID{1, 1}},
		"huge chunk":     {Endpoint: ep, Donors: []rdma.NodeID{1}, ChunkBytes: MaxTransferChunkBytes + 1},
	}
	for name, cfg := range cases {
		if _, err := Fetch(context.Background(), cfg); err == nil {
			t.Errorf("%s: Fetch succeeded", name)
		}
	}
	if _, err := NewDonor(context.Background(), DonorConfig{Endpoint: ep, Of: 2, Parts: map[int][]byte{2: nil}}); err == nil {
		t.Error("NewDonor with a part out of range succeeded")
	}
}

func TestTransferTCP(t *testing.T) {
	checkTransferLeaks(t)
	const k = 3
	ep := tcpNet(t)
	joiner := &countingEndpoint{Endpoint: ep(testJoiner)}
	for _, id := range donorIDs(k) {
		ep(id)
	}
	s := randomParts(29, 3<<20, 1, 2<<20+5)
	startDonors(t, ep, s, []rdma.NodeID{testJoiner})
	got, err := fetch(t, context.Background(), fetchConfig(joiner, k))
	if err != nil {
		t.Fatal(err)
	}
	restore(t, s, got)
	checkServed(t, joiner, map[rdma.NodeID]int64{1: 3 << 20, 2: 1, 3: 2<<20 + 5})
}

func TestSnapshotParts(t *testing.T) {
	s := randomParts(31, 5, 6, 7)
	parts, err := SnapshotParts(s, DonorParts(2, 3), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || !bytes.Equal(parts[2], s.parts[2]) || !bytes.Equal(parts[0], s.parts[0]) {
		t.Fatalf("SnapshotParts = %v", parts)
	}
	if _, err := SnapshotParts(s, []int{3}, 3); err == nil {
		t.Error("SnapshotParts of a part out of range succeeded")
	}
	if _, err := SnapshotParts(s, []int{0}, 2); err == nil {
		t.Error("SnapshotParts did not report the state machine's error")
	}
	if got := DonorParts(0, 1); len(got) != 1 || got[0] != 0 {
		t.Errorf("DonorParts(0, 1) = %v", got)
	}
}

func FuzzDecodeTransferImm(f *testing.F) {
	for _, m := range []transferImm{
		{kind: transferRequest, part: 3, arg: DefaultTransferChunkBytes},
		{kind: transferCredit, arg: 4},
		{kind: transferBegin, part: MaxTransferParts - 1, arg: maxTransferPartSize},
		{kind: transferMissing, part: 1},
		{kind: transferChunk, part: 2, arg: 1},
	} {
		f.Add(encodeTransferImm(m))
	}
	f.Fuzz(func(t *testing.T, imm uint64) {
		m, err := decodeTransferImm(imm)
		if err != nil {
			if !errors.Is(err, ErrTransferProtocol) {
				t.Fatalf("decode %#x: %v does not wrap ErrTransferProtocol", imm, err)
			}
			return
		}
		if m.part < 0 || m.part >= MaxTransferParts || m.arg > maxTransferPartSize {
			t.Fatalf("decode %#x = %+v out of range", imm, m)
		}
		if got := encodeTransferImm(m); got != imm {
			t.Fatalf("decode %#x = %+v encodes as %#x", imm, m, got)
		}
	})
}

// BenchmarkFetch moves 64 MiB of state to a joiner from 1 or 4 donors.
func BenchmarkFetch(b *testing.B) {
	const total = 64 << 20
	for _, net := range []string{"mem", "tcp"} {
		for _, k := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/donors=%d", net, k), func(b *testing.B) {
				sizes := make([]int, k)
				for i := range sizes {
					sizes[i] = total / k
				}
				s := randomParts(1, sizes...)
				var ep func(rdma.NodeID) rdma.Endpoint
				if net == "mem" {
					ep = newMemNet(b, 1).endpoint
				} else {
					ep = tcpNet(b)
				}
				for _, id := range append(donorIDs(k), testJoiner) {
					ep(id) // every endpoint up before the donors dial the joiner
				}
				// Each donor takes its snapshot on its own machine; only the
				// transfer is measured.
				snaps := make([]map[int][]byte, k)
				for d := range snaps {
					var err error
					if snaps[d], err = SnapshotParts(s, DonorParts(d, k), k); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(total)
				for i := 0; b.Loop(); i++ {
					stream := rdma.StreamID(1000 + i)
					donors := make([]*Donor, k)
					for d, id := range donorIDs(k) {
						var err error
						donors[d], err = NewDonor(context.Background(), DonorConfig{
							Endpoint: ep(id), Stream: stream, Joiners: []rdma.NodeID{testJoiner}, Parts: snaps[d], Of: k,
						})
						if err != nil {
							b.Fatal(err)
						}
					}
					cfg := FetchConfig{Endpoint: ep(testJoiner), Stream: stream, Donors: donorIDs(k)}
					if _, err := Fetch(context.Background(), cfg); err != nil {
						b.Fatal(err)
					}
					for _, d := range donors {
						d.Close()
					}
				}
			})
		}
	}
}

// tcpNet returns a function giving tcp endpoints on 127.0.0.1, made on
// first use and closed at cleanup.
func tcpNet(t testing.TB) func(rdma.NodeID) rdma.Endpoint {
	var mu sync.Mutex
	eps := map[rdma.NodeID]*rdma.TCPEndpoint{}
	resolve := func(id rdma.NodeID) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if ep := eps[id]; ep != nil {
			return ep.Addr().String(), nil
		}
		return "", fmt.Errorf("no node %d", id)
	}
	return func(id rdma.NodeID) rdma.Endpoint {
		mu.Lock()
		ep := eps[id]
		mu.Unlock()
		if ep != nil {
			return ep
		}
		ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: id, ListenAddr: "127.0.0.1:0", Resolve: resolve})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		mu.Lock()
		eps[id] = ep
		mu.Unlock()
		return ep
	}
}

// scriptEndpoint is a fake endpoint whose queue pairs only record what the
// joiner posts, for driving the joiner's handlers directly.
type scriptEndpoint struct{ qps map[rdma.NodeID]*scriptQP }

func (e *scriptEndpoint) ID() rdma.NodeID { return testJoiner }
func (e *scriptEndpoint) Close() error    { return nil }
func (e *scriptEndpoint) Open(ctx context.Context, peer rdma.NodeID, stream rdma.StreamID, h rdma.Handler) (rdma.QueuePair, error) {
	qp := &scriptQP{peer: peer, stream: stream, h: h}
	e.qps[peer] = qp
	return qp, nil
}

// scriptQP records posted receives and signals.
type scriptQP struct {
	peer    rdma.NodeID
	stream  rdma.StreamID
	h       rdma.Handler // the joiner's handler of this queue pair
	recvs   []uint64     // posted receive wrs, oldest first
	signals []uint64
	closed  bool
}

func (q *scriptQP) Peer() rdma.NodeID     { return q.peer }
func (q *scriptQP) Stream() rdma.StreamID { return q.stream }
func (q *scriptQP) PostRecv(buf []byte, wr uint64) error {
	q.recvs = append(q.recvs, wr)
	return nil
}
func (q *scriptQP) PostSend(buf []byte, imm uint64, wr uint64) error {
	return errors.New("scriptQP: the joiner must not send")
}
func (q *scriptQP) Signal(imm uint64) error {
	q.signals = append(q.signals, imm)
	return nil
}
func (q *scriptQP) Close() error { q.closed = true; return nil }

// checkFetcherInvariants checks that every part not yet received is owed
// by exactly one live donor, unless the transfer already failed. (A
// stall, which only run detects, asks a part of a second donor too; the
// scripts do not run it.)
func checkFetcherInvariants(t *testing.T, f *fetcher) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	owners := make([]int, len(f.mu.parts))
	for _, fc := range f.conns {
		if fc.mu.dead {
			if len(fc.mu.pending) != 0 || fc.mu.cur >= 0 {
				t.Fatalf("dead donor %d still owes %v (receiving %d)", fc.peer, fc.mu.pending, fc.mu.cur)
			}
			continue
		}
		for _, p := range fc.mu.pending {
			owners[p]++
		}
		if fc.mu.cur >= 0 {
			owners[fc.mu.cur]++
			if fc.mu.got > len(fc.mu.buf) {
				t.Fatalf("donor %d: %d bytes of a %d-byte part", fc.peer, fc.mu.got, len(fc.mu.buf))
			}
		}
	}
	done := 0
	for p, part := range f.mu.parts {
		if part.done {
			done++
		}
		want := 1
		if part.done {
			want = 0
		}
		if f.mu.err == nil && owners[p] != want {
			t.Fatalf("part %d (done %v) owed by %d donors", p, part.done, owners[p])
		}
	}
	if done != len(f.mu.parts)-f.mu.remaining {
		t.Fatalf("%d parts done, %d remaining of %d", done, f.mu.remaining, len(f.mu.parts))
	}
}

const scriptDonors, scriptChunk = 3, 16

// scriptStep encodes one step of a script for runFetchScript: the
// selector (bits 0-1 the donor index, 3 meaning donor 0's queue pair
// fails; bit 2 set for a transfer of bits 3-7 bytes mod chunk+1, clear for
// a signal) and the immediate value.
func scriptStep(donor int, transfer bool, n int, imm uint64) []byte {
	sel := byte(donor) | byte(n)<<3
	if transfer {
		sel |= 4
	}
	b := []byte{sel}
	for i := range 8 {
		b = append(b, byte(imm>>(8*i)))
	}
	return b
}

// goodScript is a well-behaved transfer: donor 0 sends part 0 (20 bytes),
// donor 1 says it lacks part 1, donor 0 then sends it (0 bytes), donor 2
// sends part 2 (16 bytes).
func goodScript() []byte {
	var s []byte
	for _, st := range [][]byte{
		scriptStep(0, false, 0, begin(0, 20)),
		scriptStep(0, true, 16, chunkImm(0, false)),
		scriptStep(0, true, 4, chunkImm(0, true)),
		scriptStep(1, false, 0, encodeTransferImm(transferImm{kind: transferMissing, part: 1})),
		scriptStep(0, false, 0, begin(1, 0)),
		scriptStep(2, false, 0, begin(2, 16)),
		scriptStep(2, true, 16, chunkImm(2, true)),
	} {
		s = append(s, st...)
	}
	return s
}

// runFetchScript drives a joiner's handlers for three donors over fake
// queue pairs with script, 9 bytes a step (see scriptStep), checking the
// joiner's invariants after each step.
func runFetchScript(t *testing.T, script []byte) *fetcher {
	ep := &scriptEndpoint{qps: map[rdma.NodeID]*scriptQP{}}
	// On a clock that never calls poll, only the handler calls change the
	// joiner's state.
	cfg, err := FetchConfig{Endpoint: ep, Donors: donorIDs(scriptDonors), ChunkBytes: scriptChunk, MaxPartBytes: 64, Clock: stillClock{}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	fe := newFetcher(context.Background(), cfg, func([][]byte, error) { t.Error("the transfer ended on a clock that stands still") })
	fe.start()
	checkFetcherInvariants(t, fe)
	for ; len(script) >= 9; script = script[9:] {
		sel := script[0]
		var imm uint64
		for i := range 8 {
			imm |= uint64(script[1+i]) << (8 * i)
		}
		fc := fe.conns[int(sel&3)%scriptDonors]
		qp := ep.qps[fc.peer]
		switch {
		case sel&3 == 3:
			qp.h.Failed(rdma.ErrConnectionLost)
		case sel&4 == 0:
			qp.h.Signal(imm)
		case len(qp.recvs) == 0:
			// The transport fails a queue pair that gets a transfer with
			// no receive posted.
			qp.h.Failed(rdma.ErrProtocol)
		default:
			wr := qp.recvs[0]
			qp.recvs = qp.recvs[1:]
			qp.h.RecvComplete(wr, int(sel>>3)%(scriptChunk+1), imm)
		}
		checkFetcherInvariants(t, fe)
	}
	fe.closeAll()
	return fe
}

// stillClock is a clock that stands still: it never makes the calls
// scheduled on it.
type stillClock struct{}

func (stillClock) Now() time.Time                        { return time.Unix(0, 0) }
func (stillClock) AfterFunc(time.Duration, func()) Timer { return stillTimer{} }

type stillTimer struct{}

func (stillTimer) Stop() bool { return true }

func TestFetchScript(t *testing.T) {
	fe := runFetchScript(t, goodScript())
	if fe.mu.remaining != 0 || fe.mu.err != nil {
		t.Fatalf("good script left %d parts, error %v", fe.mu.remaining, fe.mu.err)
	}
	for p, want := range []int{20, 0, 16} {
		if got := len(fe.mu.parts[p].data); got != want {
			t.Errorf("part %d has %d bytes, want %d", p, got, want)
		}
	}
	// Each donor got its 4 credits, and one back per chunk it sent.
	for id, want := range map[rdma.NodeID]int{1: 2, 2: 0, 3: 1} {
		qp := fe.cfg.Endpoint.(*scriptEndpoint).qps[id]
		credits := 0
		for _, imm := range qp.signals {
			if m, _ := decodeTransferImm(imm); m.kind == transferCredit {
				credits += int(m.arg)
			}
		}
		if credits != transferCredits+want {
			t.Errorf("donor %d granted %d credits, want %d", id, credits, transferCredits+want)
		}
		if !qp.closed {
			t.Errorf("queue pair to donor %d not closed", id)
		}
	}
}

// FuzzFetchDonorInput drives a joiner's handlers with arbitrary input from
// three donors (see runFetchScript). The joiner must never panic, and
// every part must stay owed by exactly one live donor until it is in or
// the transfer has failed.
func FuzzFetchDonorInput(f *testing.F) {
	f.Add(goodScript())
	f.Add(scriptStep(0, false, 0, begin(0, maxTransferPartSize)))
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, script []byte) {
		runFetchScript(t, script)
	})
}

// TestTransferPendingParts: donors start serving before their parts
// exist (they are still snapshotting); the joiner's requests wait for
// AddPart instead of being answered "missing", and the result is exact.
func TestTransferPendingParts(t *testing.T) {
	checkTransferLeaks(t)
	const k = 3
	s := randomParts(9, 70000, 1, 3<<20)
	n := newMemNet(t, 9)
	n.endpoint(testJoiner)
	donors := make([]*Donor, k)
	for i := range donors {
		donors[i] = startPendingDonor(t, n, i, k)
	}
	type result struct {
		parts [][]byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		parts, err := Fetch(context.Background(), fetchConfig(n.endpoint(testJoiner), k))
		done <- result{parts, err}
	}()
	time.Sleep(20 * time.Millisecond) // the requests reach the donors first
	for i, d := range donors {
		parts, err := SnapshotParts(s, DonorParts(i, k), k)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range DonorParts(i, k) {
			if err := d.AddPart(p, parts[p]); err != nil {
				t.Fatal(err)
			}
		}
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	restore(t, s, res.parts)
	if err := donors[0].AddPart(0, nil); err == nil {
		t.Error("AddPart of a part that is not pending succeeded")
	}
}

// TestTransferDroppedPart: a donor whose snapshot of a part failed drops
// it; the joiner gets the part from its backup, or, without one, fails at
// once instead of waiting for the donor.
func TestTransferDroppedPart(t *testing.T) {
	checkTransferLeaks(t)
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sizes := make([]int, k)
				for i := range sizes {
					sizes[i] = 3000 + i
				}
				s := randomParts(17, sizes...)
				n := newMemNet(t, 17)
				n.endpoint(testJoiner)
				for i := range k {
					d := startPendingDonor(t, n, i, k)
					parts, err := SnapshotParts(s, DonorParts(i, k), k)
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range DonorParts(i, k) {
						if i == 0 && p == 0 {
							err = d.DropPart(p)
						} else {
							err = d.AddPart(p, parts[p])
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					if err := d.DropPart(0); err == nil {
						t.Error("DropPart of a part that is not pending succeeded")
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				got, err := Fetch(ctx, fetchConfig(n.endpoint(testJoiner), k))
				switch {
				case k == 1 && (!errors.Is(err, ErrTransfer) || ctx.Err() != nil):
					t.Fatalf("Fetch: %v, want ErrTransfer before the context ends", err)
				case k > 1 && err != nil:
					t.Fatal(err)
				case k > 1:
					restore(t, s, got)
				}
			})
		})
	}
}

func TestConnBroke(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", rdma.ErrConnectionLost), true},
		{fmt.Errorf("x: %w", rdma.ErrUnreachable), true},
		{fmt.Errorf("x: %w", rdma.ErrPeerClosed), false},
		{fmt.Errorf("x: %w", rdma.ErrClosed), false},
		{fmt.Errorf("x: %w", ErrTransferProtocol), false},
		// The transport closed the connection over bad input from the peer.
		{fmt.Errorf("%w: %w", rdma.ErrConnectionLost, &rdma.ProtocolError{Peer: 1, Reason: "bad frame"}), false},
	} {
		if got := connBroke(tc.err); got != tc.want {
			t.Errorf("connBroke(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// startPendingDonor starts donor number i of k serving the testJoiner,
// with its parts (DonorParts) pending.
func startPendingDonor(t *testing.T, n *memNet, i, k int) *Donor {
	t.Helper()
	d, err := NewDonor(context.Background(), DonorConfig{
		Endpoint: n.endpoint(donorIDs(k)[i]), Stream: testStream, Joiners: []rdma.NodeID{testJoiner},
		Pending: DonorParts(i, k), Of: k, ChunkBytes: testChunkBytes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestBlockWriter(t *testing.T) {
	sizes := []int{0, 1, minSnapshotBlock - 1, minSnapshotBlock, minSnapshotBlock + 1, 100 << 10,
		snapshotBlockBytes - 1, snapshotBlockBytes, snapshotBlockBytes + 1, 3*snapshotBlockBytes + 5}
	for _, n := range sizes {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		for _, tc := range []struct {
			name  string
			write func(rest []byte) int // how much of rest the next Write takes
		}{
			{"pieces", func(rest []byte) int { return min(len(rest), 1000+len(rest)%777) }},
			{"whole", func(rest []byte) int { return len(rest) }},
		} {
			var w blockWriter
			for rest := want; len(rest) > 0; {
				k := tc.write(rest)
				if got, err := w.Write(rest[:k]); got != k || err != nil {
					t.Fatalf("%d bytes, %s: Write of %d = %d, %v", n, tc.name, k, got, err)
				}
				rest = rest[k:]
			}
			// The blocks hold at most twice what was written (a small
			// part costs no large buffer), and no block more than
			// snapshotBlockBytes.
			held := 0
			for _, b := range w.blocks {
				held += cap(b)
				if cap(b) > snapshotBlockBytes {
					t.Errorf("%d bytes, %s: a block of %d bytes", n, tc.name, cap(b))
				}
			}
			if held > max(2*n, minSnapshotBlock) {
				t.Errorf("%d bytes, %s: blocks hold %d bytes", n, tc.name, held)
			}
			if got := w.bytes(); !bytes.Equal(got, want) {
				t.Fatalf("%d bytes, %s: got %d different bytes", n, tc.name, len(got))
			}
		}
	}
}

func BenchmarkSnapshotParts(b *testing.B) {
	s := randomParts(1, 64<<20)
	b.SetBytes(64 << 20)
	for b.Loop() {
		if _, err := SnapshotParts(s, []int{0}, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTransferSlices: each donor's share comes in several slices, added
// one by one as they are snapshotted; a donor that crashed has its slices
// served by its backup.
func TestTransferSlices(t *testing.T) {
	checkTransferLeaks(t)
	const k, slices = 3, 4
	sizes := make([]int, k*slices)
	for p := range sizes {
		sizes[p] = 50000 + 3001*p
	}
	s := randomParts(11, sizes...)
	n := newMemNet(t, 11)
	n.endpoint(testJoiner)
	for i, id := range donorIDs(k) {
		if i == 1 {
			n.endpoint(id) // exists, but serves nothing: crashed below
			continue
		}
		parts := DonorSlices(i, k, slices)
		d, err := NewDonor(context.Background(), DonorConfig{
			Endpoint: n.endpoint(id), Stream: testStream, Joiners: []rdma.NodeID{testJoiner},
			Pending: parts, Of: k * slices, ChunkBytes: testChunkBytes,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		go func() {
			for _, p := range parts {
				data, err := SnapshotParts(s, []int{p}, k*slices)
				if err != nil {
					t.Error(err)
					return
				}
				d.AddPart(p, data[p])
			}
		}()
	}
	n.fabric.Crash(2)
	cfg := fetchConfig(n.endpoint(testJoiner), k)
	cfg.Slices = slices
	got, err := Fetch(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	restore(t, s, got)
}

// TestFetchOpenFails: a joiner whose queue pairs cannot be opened at all
// (its endpoint is closed) gives the transfer up, and says why; a
// transfer started after its context ended does not start, and one
// stopped without a cause ends as canceled.
func TestFetchOpenFails(t *testing.T) {
	checkTransferLeaks(t)
	n := newMemNet(t, 29)
	startFakeDonor(t, n.endpoint(1), nil)
	ep := n.endpoint(testJoiner)
	ep.Close()
	_, err := Fetch(context.Background(), fetchConfig(ep, 1))
	if !errors.Is(err, ErrTransfer) || !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("Fetch on a closed endpoint: %v, want ErrTransfer and rdma.ErrClosed", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = StartFetch(ctx, fetchConfig(n.endpoint(testJoiner+1), 1), func([][]byte, error) { t.Error("done called for a transfer that did not start") })
	if !errors.Is(err, ErrTransfer) || !errors.Is(err, context.Canceled) {
		t.Errorf("StartFetch after its context ended: %v, want ErrTransfer and context.Canceled", err)
	}
}

func TestTransferStopWithoutCause(t *testing.T) {
	checkTransferLeaks(t)
	n := newMemNet(t, 31)
	startFakeDonor(t, n.endpoint(1), nil) // never answers
	cfg := fetchConfig(n.endpoint(testJoiner), 1)
	cfg.StallTimeout = time.Hour
	done := make(chan error, 1)
	tr, err := StartFetch(context.Background(), cfg, func(_ [][]byte, err error) { done <- err })
	if err != nil {
		t.Fatal(err)
	}
	tr.Stop(nil)
	if err := <-done; !errors.Is(err, ErrTransfer) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a transfer stopped without a cause ended with %v, want ErrTransfer and context.Canceled", err)
	}
}
