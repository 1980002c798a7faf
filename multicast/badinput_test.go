package multicast

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/convoy-gcs/convoy/rdma"
)

// rawHandler is a queue pair handler for a test that plays a misbehaving
// member by hand.
type rawHandler struct{ signals chan uint64 }

func (h *rawHandler) RecvComplete(uint64, int, uint64) {}
func (h *rawHandler) SendComplete(uint64)              {}
func (h *rawHandler) Signal(imm uint64)                { h.signals <- imm }
func (h *rawHandler) Failed(error)                     {}

// openRawPeer opens a two-member group on an in-memory fabric in which
// only one member runs the group: the root if root is set, else the
// receiver. The test plays the other by hand, through the queue pair on
// channel ch that openRawPeer returns with its handler. credits is the
// group's BatchCredits (0: the default). Everything closes when the test
// ends.
func openRawPeer(t *testing.T, root bool, ch, credits int) (*member, rdma.QueuePair, *rawHandler) {
	t.Helper()
	f := newMemFabric(t, 2, 1)
	t.Cleanup(f.close)
	self, other := f.eps[1], f.eps[0]
	if root {
		self, other = other, self
	}
	m := newMember()
	cfg := GroupConfig{ID: 9, Members: f.ids(), Root: f.eps[0].ID(), BlockBytes: 1024, SmallThreshold: 100, BatchBytes: 4096, BatchCredits: credits}
	g, err := NewGroup(context.Background(), self, cfg, m.callbacks())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	h := &rawHandler{signals: make(chan uint64, 64)}
	qp, err := other.Open(context.Background(), self.ID(), streamID(cfg.ID, ch), h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	return m, qp, h
}

// A receiver that gets malformed input from its root fails the group with
// a descriptive error; it neither panics nor delivers anything.
func TestGroupBadInput(t *testing.T) {
	tests := []struct {
		name    string
		ch      int
		frame   []byte
		imm     uint64
		wantErr string
	}{
		{"batch with garbage", chanBatches, []byte("not a batch frame"), 0, "malformed batch"},
		{"batch out of sequence", chanBatches, encodeTestBatch(5, []batchRecord{{size: 1, data: []byte("x")}}), 0, "starts at message 5"},
		{"batch record over threshold", chanBatches, encodeTestBatch(0, []batchRecord{{size: 200, data: make([]byte, 200)}}), 0, "exceeds"},
		{"announced size over limit", chanBlocks, make([]byte, 10), 1 << 40, "limit"},
		{"first block of wrong length", chanBlocks, make([]byte, 10), 5000, "want 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, qp, h := openRawPeer(t, false, tt.ch, 0)
			<-h.signals // the receiver posted buffers and granted their credits
			if err := qp.PostSend(tt.frame, tt.imm, 0); err != nil {
				t.Fatal(err)
			}
			m.waitFor(t, "failure", func(m *member) bool { return len(m.failures) > 0 })
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.failures) != 1 || !errors.Is(m.failures[0], ErrGroupFailed) || !strings.Contains(m.failures[0].Error(), tt.wantErr) {
				t.Fatalf("failures = %v, want one ErrGroupFailed mentioning %q", m.failures, tt.wantErr)
			}
			if len(m.msgs) != 0 {
				t.Fatalf("delivered %d messages from bad input", len(m.msgs))
			}
		})
	}
}

// Close frees the group's buffers.
func TestGroupCloseFreesBuffers(t *testing.T) {
	f := newMemFabric(t, 3, 1)
	defer f.close()
	groups, members := openGroup(t, f, GroupConfig{ID: 1, Members: f.ids(), Root: f.eps[0].ID(), BlockBytes: 1024}, []int{0, 1, 2})
	if err := groups[0].Send(context.Background(), make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	members[2].waitMessages(t, 1)
	closeAll(groups)
	for i, g := range groups {
		g.mu.Lock()
		if g.mu.large.scratch != nil || g.mu.recv.bufs != nil || g.mu.root.batches.free != nil || g.mu.qps[0][0] != nil {
			t.Errorf("member %d kept buffers after Close", i)
		}
		g.mu.Unlock()
	}
}

// On a manually stepped fabric the whole exchange is a function of the
// seed: two runs produce the same trace of completions.
func TestGroupDeterministic(t *testing.T) {
	run := func(seed int64) string {
		fab := rdma.NewMemFabric(rdma.MemOptions{Seed: seed, Manual: true})
		defer fab.Close()
		var trace strings.Builder
		var groups []*Group
		ids := []rdma.NodeID{1, 2, 3, 4, 5}
		var eps []rdma.Endpoint
		for _, id := range ids {
			ep, err := fab.Endpoint(id)
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close()
			eps = append(eps, ep)
		}
		for i, ep := range eps {
			id := ids[i]
			g, err := NewGroup(context.Background(), ep, GroupConfig{ID: 1, Members: ids, Root: 1, BlockBytes: 512, SmallThreshold: 64, BatchBytes: 256},
				Callbacks{Complete: func(msg []byte) {
					trace.WriteString(string(rune('a' + id)))
					trace.WriteByte(byte('0' + len(msg)%10))
				}})
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, g)
		}
		defer closeAll(groups)
		for i := 0; i < 40; i++ {
			size := (i * 37) % 70
			if i%9 == 0 {
				size = 3000 + i
			}
			if err := groups[0].Send(context.Background(), payload(uint64(i), size)); err != nil {
				t.Fatal(err)
			}
			if i%5 == 0 {
				fab.Step()
			}
		}
		fab.RunUntilIdle()
		return trace.String()
	}
	a, b := run(42), run(42)
	if a != b {
		t.Fatalf("same seed, different traces:\n%s\n%s", a, b)
	}
	if len(a) != 2*5*40 {
		t.Fatalf("trace has %d completions, want %d", len(a)/2, 5*40)
	}
	if c := run(43); c == a {
		t.Logf("seeds 42 and 43 gave the same trace (possible, but unlikely)")
	}
}

// A group whose setup fails — here a receiver whose root has no endpoint —
// returns the error from NewGroup instead of panicking or calling Failed.
func TestGroupSetupFailure(t *testing.T) {
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 1})
	defer fab.Close()
	ep, err := fab.Endpoint(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	m := newMember()
	g, err := NewGroup(context.Background(), ep, GroupConfig{ID: 1, Members: []rdma.NodeID{2, 1}, Root: 2}, m.callbacks())
	if err == nil {
		g.Close()
		t.Fatal("NewGroup succeeded with an unreachable root")
	}
	if !errors.Is(err, ErrGroupFailed) || !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("NewGroup = %v, want ErrGroupFailed wrapping rdma.ErrUnreachable", err)
	}
	if len(m.failures) != 0 {
		t.Fatalf("Failed called for a setup error: %v", m.failures)
	}
}

// A group whose setup fails to open a stream closes the streams it had
// opened, and a handler call of one of them that waited for the group
// (here a failure reported while NewGroup runs) finds it closed: it does
// not call Failed for a group NewGroup did not return.
func TestGroupOpenFailure(t *testing.T) {
	f := newMemFabric(t, 2, 1)
	defer f.close()
	cfg := GroupConfig{ID: 1, Members: f.ids(), Root: f.eps[0].ID()}
	ep := &failOpenEndpoint{Endpoint: f.eps[1], fail: streamID(cfg.ID, chanBatches), raced: make(chan struct{})}
	m := newMember()
	g, err := NewGroup(context.Background(), ep, cfg, m.callbacks())
	if err == nil {
		g.Close()
		t.Fatal("NewGroup succeeded though a stream failed to open")
	}
	if !errors.Is(err, errOpen) {
		t.Fatalf("NewGroup = %v, want the open error", err)
	}
	<-ep.raced
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.failures) != 0 {
		t.Fatalf("Failed called for a group NewGroup did not return: %v", m.failures)
	}
}

var errOpen = errors.New("open refused")

// failOpenEndpoint refuses to open stream fail; as it does, it reports
// the failure of the stream opened before on another goroutine, which
// gets to the group once NewGroup lets go of it. raced is closed once
// that report returned.
type failOpenEndpoint struct {
	rdma.Endpoint
	fail   rdma.StreamID
	opened rdma.Handler
	raced  chan struct{}
}

func (e *failOpenEndpoint) Open(ctx context.Context, peer rdma.NodeID, stream rdma.StreamID, h rdma.Handler) (rdma.QueuePair, error) {
	if stream != e.fail {
		e.opened = h
		return e.Endpoint.Open(ctx, peer, stream, h)
	}
	go func() {
		defer close(e.raced)
		e.opened.Failed(rdma.ErrUnreachable)
	}()
	return nil, errOpen
}

// A root whose receiver grants no batch credits, or more than a receiver
// can have, fails the group with a descriptive error.
func TestGroupBadCreditGrant(t *testing.T) {
	for _, imm := range []uint64{0, maxBatchCredits + 1, 1 << 63} {
		t.Run(fmt.Sprint(imm), func(t *testing.T) {
			m, qp, _ := openRawPeer(t, true, chanBatches, 0)
			if err := qp.Signal(imm); err != nil {
				t.Fatal(err)
			}
			m.waitFor(t, "failure", func(m *member) bool { return len(m.failures) > 0 })
			m.mu.Lock()
			defer m.mu.Unlock()
			want := fmt.Sprintf("granted %d batch credits", imm)
			if len(m.failures) != 1 || !errors.Is(m.failures[0], ErrGroupFailed) || !strings.Contains(m.failures[0].Error(), want) {
				t.Fatalf("failures = %v, want one ErrGroupFailed mentioning %q", m.failures, want)
			}
		})
	}
}

// A receiver grants its root the credits for its batch buffers half of
// them at a time: when it posts them first, and then once every half of
// them has been taken in and posted again.
func TestGroupCreditGrants(t *testing.T) {
	for _, credits := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint(credits), func(t *testing.T) {
			m, qp, h := openRawPeer(t, false, chanBatches, credits)
			half := max(credits/2, 1)
			granted := 0
			for granted < credits {
				n := <-h.signals
				if n != uint64(half) && n != uint64(credits-granted) {
					t.Fatalf("granted %d credits at first (after %d), want %d at a time", n, granted, half)
				}
				granted += int(n)
			}
			// Three rounds of frames, one in flight at a time as a root at
			// light load sends them: a grant follows every half-th.
			for i := range 3 * half {
				frame := encodeTestBatch(uint64(i), []batchRecord{{size: 1, data: []byte{byte(i)}}})
				if err := qp.PostSend(frame, 0, uint64(i)); err != nil {
					t.Fatal(err)
				}
				m.waitMessages(t, i+1)
				if (i+1)%half != 0 {
					continue
				}
				if n := <-h.signals; n != uint64(half) {
					t.Fatalf("after frame %d: granted %d credits, want %d", i, n, half)
				}
			}
			select {
			case n := <-h.signals:
				t.Fatalf("granted %d credits more, want none", n)
			default:
			}
		})
	}
}
