package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/ordering"
)

// The simulated wire (simwire_test.go) is what TestGroupSim's views run
// on in half the seeds; these tests check the semantics it promises the
// runtime, each on a few bare members whose loop is the test.

// wireMember is one member of a view on the wire, with the events the
// wire posted to its loop.
type wireMember struct {
	g   *Group
	v   *view
	net viewNet
}

// wireView opens view epoch of ids on w at every member of open (the
// others open it later with wireOpen).
func wireView(t *testing.T, w *simWire, epoch uint64, ids []NodeID, open ...NodeID) map[NodeID]*wireMember {
	t.Helper()
	ms := make(map[NodeID]*wireMember)
	for r, id := range ids {
		g := &Group{events: make(chan event, 1<<12), stop: make(chan struct{}), ctx: context.Background(),
			cfg: Config{MaxMessageBytes: 1 << 20}, log: slog.New(slog.DiscardHandler)}
		ms[id] = &wireMember{g: g, v: &view{g: g, rec: membership.View{Epoch: epoch}, self: r, ids: ids}}
	}
	for _, id := range open {
		wireOpen(t, w, ms[id])
	}
	return ms
}

func wireOpen(t *testing.T, w *simWire, m *wireMember) {
	t.Helper()
	n, err := w.open(context.Background(), m.v)
	if err != nil {
		t.Fatal(err)
	}
	m.net = n
}

// beacon is a record of sequence seq.
func beacon(seq uint64) []byte {
	return ordering.AppendRecord(nil, &ordering.Record{Kind: ordering.KindBeacon, Seq: seq})
}

// drain returns what the wire posted to m so far, as text: "rec FROM.SEQ",
// "sig FROM.IMM", "fail", "down FROM".
func (m *wireMember) drain() []string {
	var out []string
	for {
		select {
		case ev := <-m.g.events:
			switch ev.kind {
			case evRecord:
				out = append(out, fmt.Sprintf("rec %d.%d", m.v.ids[ev.from], ev.rec.Seq))
			case evSignal, evPersisted:
				out = append(out, fmt.Sprintf("sig %d.%d", m.v.ids[ev.from], ev.imm))
			case evFail:
				out = append(out, "fail")
			case evLinkDown:
				out = append(out, fmt.Sprintf("down %d", m.v.ids[ev.from]))
			default:
				out = append(out, fmt.Sprintf("event %d", ev.kind))
			}
		default:
			return out
		}
	}
}

func count(evs []string, prefix string) int {
	n := 0
	for _, e := range evs {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// expect lets the wire deliver what falls due within 10 ms, and checks
// that m was posted exactly want (in order) since it was last drained.
func (m *wireMember) expect(t *testing.T, when string, want ...string) {
	t.Helper()
	time.Sleep(10 * time.Millisecond)
	if got := m.drain(); !slices.Equal(got, want) {
		t.Errorf("member %d %s: got %v, want %v", m.v.ids[m.v.self], when, got, want)
	}
}

// TestSimWireFIFO: each receiver gets every sender's records once, in the
// order sent, whatever the delays; the interleaving of the senders is the
// seed's, the same each time.
func TestSimWireFIFO(t *testing.T) {
	run := func(seed uint64) []string {
		var got []string
		synctest.Test(t, func(t *testing.T) {
			w := newSimWire(seed, 3*time.Millisecond)
			defer w.close()
			ids := []NodeID{1, 2, 3}
			ms := wireView(t, w, 1, ids, ids...)
			for k := range uint64(50) {
				for _, id := range ids[:2] {
					if err := ms[id].net.multicast(context.Background(), beacon(k)); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(time.Duration(k%3) * time.Millisecond)
			}
			time.Sleep(time.Second)
			for _, id := range ids {
				evs := ms[id].drain()
				next := map[NodeID]uint64{}
				for _, e := range evs {
					var from NodeID
					var seq uint64
					if _, err := fmt.Sscanf(e, "rec %d.%d", &from, &seq); err != nil {
						t.Fatalf("member %d: unexpected %q", id, e)
					}
					if seq != next[from] {
						t.Fatalf("member %d: %d's record %d after %d", id, from, seq, next[from])
					}
					next[from]++
				}
				for _, from := range ids[:2] {
					if want := uint64(50); from != id && next[from] != want {
						t.Errorf("member %d got %d of %d's 50 records", id, next[from], from)
					}
				}
				if id == 3 {
					got = evs
				}
			}
		})
		return got
	}
	a, b := run(7), run(7)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 delivered in two orders:\n%v\n%v", a, b)
	}
	if c := run(8); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 interleaved the senders alike")
	}
}

// TestSimWireBreak: a broken link fails the view's data path at both of
// its ends, once, and takes the control streams across it down; the
// members on other links go on. A control stream dialled again carries
// signals once the link does.
func TestSimWireBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWire(1, time.Millisecond)
		defer w.close()
		ids := []NodeID{1, 2, 3}
		ms := wireView(t, w, 1, ids, ids...)
		for _, id := range ids {
			for r := range ids {
				if ids[r] != id {
					ms[id].net.dial(context.Background(), r)
				}
			}
		}
		if err := ms[1].net.signal(1, 42); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		if got := ms[2].drain(); !slices.Equal(got, []string{"sig 1.42"}) {
			t.Fatalf("member 2 got %v, want the signal", got)
		}

		w.breakLink(1, 2)
		time.Sleep(10 * time.Millisecond)
		for _, id := range []NodeID{1, 2} {
			evs := ms[id].drain()
			if count(evs, "fail") != 1 || count(evs, "down") != 1 {
				t.Errorf("member %d after the break: %v, want one fail and one link down", id, evs)
			}
		}
		if evs := ms[3].drain(); len(evs) != 0 {
			t.Errorf("member 3, on no broken link: %v", evs)
		}
		// Member 3 still reaches member 1; 1's data path to 2 is gone.
		if err := ms[3].net.signal(0, 7); err != nil {
			t.Fatal(err)
		}
		if err := ms[1].net.multicast(context.Background(), beacon(0)); err == nil {
			t.Error("multicast on a failed data path succeeded")
		}
		ms[1].expect(t, "after the break, from member 3", "sig 3.7")
		// Dialled again, the control stream works.
		ms[1].net.dial(context.Background(), 1)
		if err := ms[1].net.signal(1, 43); err != nil {
			t.Fatal(err)
		}
		ms[2].expect(t, "after the dial", "sig 1.43")
	})
}

// TestSimWirePartition: across a partition, a control stream dialled
// goes down at once and carries nothing until the heal; a view opened
// across it fails at once.
func TestSimWirePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWire(2, time.Millisecond)
		defer w.close()
		ids := []NodeID{1, 2, 3}
		w.partition([]NodeID{1}, []NodeID{2, 3})
		ms := wireView(t, w, 1, ids, ids...)
		time.Sleep(10 * time.Millisecond)
		if evs := ms[1].drain(); count(evs, "fail") != 1 {
			t.Errorf("member 1, opening a view across the partition: %v, want it failed", evs)
		}
		if evs := ms[3].drain(); count(evs, "fail") != 1 {
			t.Errorf("member 3, opening a view across the partition: %v, want it failed", evs)
		}
		ms[2].net.dial(context.Background(), 0)
		time.Sleep(10 * time.Millisecond)
		if evs := ms[2].drain(); !slices.Contains(evs, "down 1") {
			t.Errorf("member 2 dialled across the partition: %v, want the link down", evs)
		}
		if err := ms[2].net.signal(0, 5); err == nil {
			t.Error("a signal across the partition was taken")
		}
		w.heal()
		ms[2].net.dial(context.Background(), 0)
		if err := ms[2].net.signal(0, 6); err != nil {
			t.Fatal(err)
		}
		ms[1].expect(t, "after the heal", "sig 2.6")
	})
}

// TestSimWireCloseAndLateOpen: records to a member that has not opened
// the view wait for it; a member that closes the view fails it at the
// others.
func TestSimWireCloseAndLateOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWire(3, time.Millisecond)
		defer w.close()
		ids := []NodeID{1, 2, 3}
		ms := wireView(t, w, 1, ids, 1, 2)
		for k := range uint64(3) {
			if err := ms[1].net.multicast(context.Background(), beacon(k)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
		if got := ms[2].drain(); len(got) != 3 {
			t.Errorf("member 2 got %v, want 3 records", got)
		}
		if got := ms[3].drain(); len(got) != 0 {
			t.Errorf("member 3 got %v before it opened the view", got)
		}
		wireOpen(t, w, ms[3])
		ms[3].expect(t, "once it opened the view", "rec 1.0", "rec 1.1", "rec 1.2")

		ms[2].net.close()
		time.Sleep(10 * time.Millisecond)
		for _, id := range []NodeID{1, 3} {
			if evs := ms[id].drain(); count(evs, "fail") != 1 {
				t.Errorf("member %d after member 2 closed the view: %v, want it failed once", id, evs)
			}
		}
		if evs := ms[2].drain(); len(evs) != 0 {
			t.Errorf("member 2 after it closed the view: %v", evs)
		}
	})
}
