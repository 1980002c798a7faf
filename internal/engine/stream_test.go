package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/kvtest"
	"github.com/convoy-gcs/convoy/internal/memlog"
	"github.com/convoy-gcs/convoy/membership"
)

// TestSpill: a spill keeps what is written in memory up to its limit and
// in an unlinked file beyond, reads it back from anywhere, and leaves no
// file behind.
func TestSpill(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, size := range []int{0, 10, 100, 5000} {
		sp := newSpill(100)
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i * 7)
		}
		for p := want; len(p) > 0; p = p[min(len(p), 33):] {
			if n, err := sp.Write(p[:min(len(p), 33)]); err != nil || n != min(len(p), 33) {
				t.Fatalf("Write: %d %v", n, err)
			}
		}
		if _, mem := sp.inMemory(); mem != (size <= 100) || sp.size() != int64(size) {
			t.Fatalf("%d bytes: in memory %v, size %d", size, mem, sp.size())
		}
		got, err := io.ReadAll(sp.reader())
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read back %d, %v", size, len(got), err)
		}
		if size > 10 {
			b := make([]byte, 10)
			if n, err := sp.ReadAt(b, int64(size-10)); n != 10 || (err != nil && err != io.EOF) || !bytes.Equal(b, want[size-10:]) {
				t.Fatalf("%d bytes: ReadAt the end: %d %v", size, n, err)
			}
		}
		if err := sp.Close(); err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(os.TempDir()); len(left) != 0 {
			t.Fatalf("%d bytes: %d files left behind", size, len(left))
		}
	}
}

// TestSnapshotStateFormats: the state a snapshot in the durable log
// holds, in the metadata of earlier releases or in the snapshot's parts.
func TestSnapshotStateFormats(t *testing.T) {
	ctx := context.Background()
	l := memlog.New()
	read := func() ([]io.Reader, error) {
		t.Helper()
		s, err := l.ReadSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		return snapshotState(s)
	}
	all := func(rs []io.Reader) []string {
		var out []string
		for _, r := range rs {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
		return out
	}
	// Inline parts, as earlier releases kept them.
	if err := l.SetSnapshot(ctx, 5, encodeParts([][]byte{[]byte("ab"), nil, []byte("c")})); err != nil {
		t.Fatal(err)
	}
	if rs, err := read(); err != nil || len(rs) != 3 || all(rs)[0] != "ab" || all(rs)[1] != "" {
		t.Fatalf("inline parts: %d readers, %v", len(rs), err)
	}
	// No parts: the member joined with the state it starts with.
	if err := l.SetSnapshot(ctx, 6, encodeParts(nil)); err != nil {
		t.Fatal(err)
	}
	if rs, err := read(); err != nil || rs != nil {
		t.Fatalf("no parts: %v, %v", rs, err)
	}
	// The snapshot's parts.
	w, err := l.CreateSnapshot(ctx, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []string{"xy", "z"} {
		pw, _ := w.Part(i)
		_, _ = pw.Write([]byte(s))
		if err := pw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx, snapshotInLog); err != nil {
		t.Fatal(err)
	}
	if rs, err := read(); err != nil || len(rs) != 2 || all(rs)[1] != "z" {
		t.Fatalf("parts in the log: %d readers, %v", len(rs), err)
	}
	for _, bad := range [][]byte{{9}, {snapshotVersionParts, 0}} {
		if err := l.SetSnapshot(ctx, 8, bad); err != nil {
			t.Fatal(err)
		}
		if _, err := read(); !errors.Is(err, errBadSnapshot) {
			t.Fatalf("metadata %x: %v, want errBadSnapshot", bad, err)
		}
	}
}

// TestViewsJoinSpilled: the state a joiner receives, and what its donors
// snapshot for it, goes through files (every part is larger than the
// spills' memory here), with and without a durable log; with one, the
// joiner restores from the parts in its log, keeps them as its snapshot,
// and restores from them again when it restarts.
func TestViewsJoinSpilled(t *testing.T) {
	for _, durableLog := range []bool{false, true} {
		name := "memory"
		if durableLog {
			name = "durable"
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir())
			c := newVSCluster(t)
			// (Filled first: openAll opens the members at once.)
			dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir(), 4: t.TempDir()}
			opts := func(cfg *Config) {
				cfg.test.spillBytes = 16
				if durableLog {
					cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]}
				}
			}
			nodes := c.openAll(3, opts)
			stop := make(chan struct{})
			wg := c.load(stop, nodes...)
			c.waitCount(nodes[0], 300)
			joiner, err := c.open(4, 1, opts)
			if err != nil {
				t.Fatal(err)
			}
			all := append(nodes, joiner)
			c.waitView(2, 4, all...)
			c.waitCount(joiner, 100)
			if durableLog {
				s, err := joiner.g.disk.ReadSnapshot()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(s.Meta(), snapshotInLog) || s.Parts() != 3*transferSlices {
					t.Fatalf("the joiner's log keeps a snapshot with metadata %x and %d parts, want the %d transferred", s.Meta(), s.Parts(), 3*transferSlices)
				}
				// It restarts on its disk, from that snapshot.
				c.crash(4)
				again, err := c.open(4, 1, opts)
				if err != nil {
					t.Fatal(err)
				}
				all[3] = again
				c.waitMembers(4, all...)
			}
			close(stop)
			wg.Wait()
			c.waitDelivered(nodes, nodes...)
			c.waitSameIndex(all...)
			c.check()
			sameState(t, all...)
		})
	}
}

// TestViewsJoinSupersededRestore: a later view comes while a durable
// joiner still restores the state it received for its first view, off
// its loop. The later view brings the state again, as of its start, into
// the log's next snapshot; it is installed once the first restore ends,
// and it is the snapshot the joiner's log keeps (the first state, written
// into the log as it arrived, is not committed over the log that started
// again at the later view). The joiner then restarts from its log.
func TestViewsJoinSupersededRestore(t *testing.T) {
	c := newVSCluster(t)
	// (Filled first: openAll opens the members at once.)
	dirs := map[NodeID]string{}
	for id := NodeID(1); id <= 5; id++ {
		dirs[id] = t.TempDir()
	}
	opts := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]}
		// Nobody crashes until the end: a member suspected only because a
		// loaded machine delayed its heartbeats would change the views
		// this test expects.
		cfg.SuspectTimeout = 2 * time.Second
	}
	nodes := c.openAll(3, opts)
	stop := make(chan struct{})
	wg := c.load(stop, nodes...)
	c.waitCount(nodes[0], 200)

	release := make(chan struct{})
	var once sync.Once
	openGate := func() { once.Do(func() { close(release) }) }
	t.Cleanup(openGate) // a failed check must not leave the joiner waiting
	entered := make(chan struct{}, 1)
	transferred := make(chan uint64, 8)
	slow := &gatedRestore{entered: entered, release: release}
	joined := make(chan *vsNode, 1)
	go func() {
		n, err := c.open(4, 1, opts, func(cfg *Config) {
			slow.StateMachine = cfg.State
			cfg.State = slow
			cfg.test.onTransferred = func(epoch uint64) { transferred <- epoch }
		})
		if err != nil {
			t.Error(err)
		}
		joined <- n
	}()
	select {
	case <-entered:
	case <-time.After(vsWait):
		t.Fatal("the joiner does not restore the state of view 2")
	}
	// Member 5 joins while member 4 restores: view 3 brings member 4 the
	// state again, which arrives before the first restore ends.
	fifth, err := c.open(5, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	for epoch := uint64(0); epoch < 3; {
		select {
		case epoch = <-transferred:
		case <-time.After(vsWait):
			t.Fatal("the joiner does not receive the state of view 3")
		}
	}
	openGate()
	joiner := <-joined
	if joiner == nil {
		t.FailNow()
	}
	all := append(nodes, joiner, fifth)
	c.waitView(3, 5, all...)
	c.waitCount(joiner, 100)
	// (A loaded machine may bring one more view before the joiner's
	// install ends: then it installs that one's state, restoring again.)
	if n := slow.restores.Load(); n < 2 {
		t.Errorf("the joiner restored %d states, want 2 or more (view 2's, then view 3's or a later one's)", n)
	}
	first := joiner.firstView()
	if first.Epoch < 3 {
		t.Fatalf("the joiner's first view is %d, want 3 or later: view 2 was superseded before its state was installed", first.Epoch)
	}
	s, err := joiner.g.disk.ReadSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Three donors or more (views 3 and later have at least members 1 to
	// 3 besides the joiner), each sending transferSlices parts.
	if s.Index() != first.Start || !bytes.Equal(s.Meta(), snapshotInLog) || s.Parts() < 3*transferSlices || s.Parts()%transferSlices != 0 {
		t.Fatalf("the joiner's log keeps a snapshot at %d with metadata %x and %d parts, want view %d's at %d with the %d or more transferred",
			s.Index(), s.Meta(), s.Parts(), first.Epoch, first.Start, 3*transferSlices)
	}
	for _, n := range all {
		if n.wasExcluded() {
			t.Errorf("member %d was excluded", n.id)
		}
	}
	// It restarts on its disk, from that snapshot.
	c.crash(4)
	again, err := c.open(4, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	all[3] = again
	c.waitMembers(5, all...)
	close(stop)
	wg.Wait()
	c.waitDelivered(nodes, nodes...)
	c.waitSameIndex(all...)
	c.check()
	sameState(t, all...)
}

// gatedRestore is a state machine whose first Restore waits until
// release is closed, after saying on entered that it was called.
type gatedRestore struct {
	StateMachine
	entered  chan<- struct{}
	release  <-chan struct{}
	restores atomic.Int32
}

func (s *gatedRestore) Restore(parts []io.Reader) error {
	if s.restores.Add(1) == 1 {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.StateMachine.Restore(parts)
}

// firstView returns the first view n saw.
func (n *vsNode) firstView() View {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.events {
		if e.view != nil {
			return *e.view
		}
	}
	return View{}
}

// TestDurableSnapshotHoldsDeliveries: while the application's Snapshot
// writes the state, deliveries wait (the state must hold still) and the
// group goes on; they resume once it returns, or once a Snapshot that
// failed or gave up let go of the state. The log's snapshot is the state
// at the index Snapshot returns, in one part.
func TestDurableSnapshotHoldsDeliveries(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	gate := make(chan struct{})
	entered := make(chan NodeID, 1)
	var fail error
	opts := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]}
		cfg.SuspectTimeout = 2 * time.Second
		if cfg.Self == 1 {
			cfg.State = &failingState{gatedState: gatedState{StateMachine: cfg.State, id: 1, entered: entered, release: gate}, fail: &fail}
		}
	}
	nodes := c.openAll(3, opts)
	stop := make(chan struct{})
	wg := c.load(stop, nodes[1:]...)
	c.waitCount(nodes[0], 100)

	type result struct {
		idx uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		idx, err := nodes[0].g.Snapshot(context.Background())
		done <- result{idx, err}
	}()
	<-entered
	// Inside Snapshot: member 1's deliveries wait, the others' go on.
	held := nodes[0].delivered()
	other := nodes[1].delivered()
	c.waitCount(nodes[1], other+200)
	if got := nodes[0].delivered(); got != held {
		t.Fatalf("member 1 delivered %d messages while its state was read (%d before)", got, held)
	}
	close(gate)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	c.waitCount(nodes[0], held+200)
	s, err := nodes[0].g.disk.ReadSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.Index() != res.idx || s.Parts() != 1 || !bytes.Equal(s.Meta(), snapshotInLog) {
		t.Fatalf("the log's snapshot: index %d (want %d), %d parts, metadata %x", s.Index(), res.idx, s.Parts(), s.Meta())
	}
	// A Snapshot whose state machine fails keeps the previous snapshot,
	// and deliveries go on.
	fail = errors.New("refused by the test")
	if _, err := nodes[0].g.Snapshot(context.Background()); !errors.Is(err, fail) {
		t.Fatalf("Snapshot with a failing state machine: %v", err)
	}
	if s, err := nodes[0].g.disk.ReadSnapshot(); err != nil || s.Index() != res.idx {
		t.Fatalf("after a failed Snapshot, the log's snapshot is at %d (%v), want %d", s.Index(), err, res.idx)
	}
	c.waitCount(nodes[0], nodes[0].delivered()+100)
	close(stop)
	wg.Wait()
	c.converged(t, nodes...)
}

// failingState fails its snapshots once *fail is set.
type failingState struct {
	gatedState
	fail *error
}

func (s *failingState) Snapshot(w io.Writer, part, of int) error {
	if *s.fail != nil {
		return *s.fail
	}
	return s.gatedState.Snapshot(w, part, of)
}

// gatedCheckpoints is a Checkpointer whose checkpoints' Snapshot waits
// until release is closed, after saying on entered that it was called,
// and counts the checkpoints released.
type gatedCheckpoints struct {
	kvtest.Checkpointing
	id       NodeID
	entered  chan<- NodeID
	release  <-chan struct{}
	taken    atomic.Int64
	released atomic.Int64
}

func (g *gatedCheckpoints) Checkpoint() (membership.StateSnapshot, error) {
	cp, err := g.Checkpointing.Checkpoint()
	if err != nil {
		return nil, err
	}
	g.taken.Add(1)
	return &gatedSnapshot{StateSnapshot: cp, g: g}, nil
}

type gatedSnapshot struct {
	membership.StateSnapshot
	g *gatedCheckpoints
}

func (s *gatedSnapshot) Snapshot(w io.Writer, part, of int) error {
	select {
	case <-s.g.release:
	default:
		s.g.entered <- s.g.id
		<-s.g.release
	}
	return s.StateSnapshot.Snapshot(w, part, of)
}

func (s *gatedSnapshot) Release() {
	s.g.released.Add(1)
	s.StateSnapshot.Release()
}

// TestDurableSnapshotCheckpoint: with a Checkpointer, deliveries go on
// while Snapshot writes a slow checkpoint, and the snapshot kept is
// exactly the state at the index Snapshot returns: what replaying the
// member's deliveries up to there gives.
func TestDurableSnapshotCheckpoint(t *testing.T) {
	c := newVSCluster(t)
	dirs := map[NodeID]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	entered := make(chan NodeID, 1)
	var state *gatedCheckpoints
	opts := func(cfg *Config) {
		cfg.Durable = &DurableConfig{Dir: dirs[cfg.Self]}
		cfg.SuspectTimeout = 2 * time.Second
		if cfg.Self == 1 {
			state = &gatedCheckpoints{Checkpointing: kvtest.Checkpointing{Map: cfg.State.(*kvtest.Map)}, id: 1, entered: entered, release: gate}
			cfg.State = state
		}
	}
	nodes := c.openAll(3, opts)
	stop := make(chan struct{})
	wg := c.load(stop, nodes...)
	c.waitCount(nodes[0], 100)
	type result struct {
		idx uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		idx, err := nodes[0].g.Snapshot(context.Background())
		done <- result{idx, err}
	}()
	<-entered
	// The checkpoint's Snapshot waits: deliveries go on meanwhile.
	c.waitCount(nodes[0], nodes[0].delivered()+300)
	open()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if state.taken.Load() != 1 || state.released.Load() != 1 {
		t.Fatalf("%d checkpoints taken, %d released; want one of each", state.taken.Load(), state.released.Load())
	}
	if res.idx >= nodes[0].lastIndex() {
		t.Fatalf("snapshot at %d, but the member is at %d: deliveries did not go on", res.idx, nodes[0].lastIndex())
	}
	// The snapshot in the log against the deliveries replayed to its index.
	s, err := nodes[0].g.disk.ReadSnapshot()
	if err != nil || s.Index() != res.idx || s.Parts() != 1 {
		t.Fatalf("the log's snapshot: %v, want one part at %d", err, res.idx)
	}
	kept := kvtest.New()
	if err := kept.Restore([]io.Reader{s.Part(0)}); err != nil {
		t.Fatal(err)
	}
	replayed := kvtest.New()
	nodes[0].mu.Lock()
	for _, e := range nodes[0].events {
		if e.view == nil && e.d.Index <= res.idx {
			replayed.Apply(e.d.Payload)
		}
	}
	nodes[0].mu.Unlock()
	if got, want := kept.Contents(), replayed.Contents(); !maps.Equal(got, want) {
		t.Fatalf("the snapshot at %d holds %d keys, the deliveries up to there make %d, and they differ", res.idx, len(got), len(want))
	}
	close(stop)
	wg.Wait()
	c.converged(t, nodes...)
}

// TestViewsDonorCheckpoint: donors whose state machine is a Checkpointer
// take the joiner's snapshot from a checkpoint at the view's start: their
// deliveries go on while the (slow) snapshot is written, and the joiner
// gets the state at the view's start all the same.
func TestViewsDonorCheckpoint(t *testing.T) {
	for _, durableLog := range []bool{false, true} {
		name := "memory"
		if durableLog {
			name = "durable"
		}
		t.Run(name, func(t *testing.T) {
			c := newVSCluster(t)
			gate := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			t.Cleanup(open)
			entered := make(chan NodeID, 256)
			states := map[NodeID]*gatedCheckpoints{}
			var mu sync.Mutex
			dirs := map[NodeID]string{}
			opts := func(cfg *Config) {
				cfg.TransferStall = time.Minute // the joiner waits for the gate
				cfg.SuspectTimeout = 2 * time.Second
				st := &gatedCheckpoints{Checkpointing: kvtest.Checkpointing{Map: cfg.State.(*kvtest.Map)}, id: cfg.Self, entered: entered, release: gate}
				mu.Lock()
				states[cfg.Self] = st
				if durableLog && dirs[cfg.Self] == "" {
					dirs[cfg.Self] = t.TempDir()
				}
				dir := dirs[cfg.Self]
				mu.Unlock()
				if durableLog {
					cfg.Durable = &DurableConfig{Dir: dir}
				}
				cfg.State = st
			}
			nodes := c.openAll(3, opts)
			stop := make(chan struct{})
			wg := c.load(stop, nodes...)
			c.waitCount(nodes[0], 200)
			joined := make(chan *vsNode, 1)
			go func() {
				n, err := c.open(4, 1, opts)
				if err != nil {
					t.Error(err)
				}
				joined <- n
			}()
			donor := <-entered
			var d *vsNode
			for _, n := range nodes {
				if n.id == donor {
					d = n
				}
			}
			// Inside the checkpoint's Snapshot: the donor's deliveries go
			// on.
			c.waitCount(d, d.delivered()+300)
			open()
			joiner := <-joined
			if joiner == nil {
				t.FailNow()
			}
			all := append(nodes, joiner)
			c.waitView(2, 4, all...)
			c.waitCount(joiner, 100)
			close(stop)
			wg.Wait()
			c.waitDelivered(nodes, nodes...)
			c.waitSameIndex(all...)
			c.check()
			sameState(t, all...)
			mu.Lock()
			defer mu.Unlock()
			for id, st := range states {
				if taken, released := st.taken.Load(), st.released.Load(); taken != released {
					t.Errorf("member %d: %d checkpoints taken, %d released", id, taken, released)
				}
			}
		})
	}
}
