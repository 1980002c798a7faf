package membership

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/rdma"
)

// stepClock is a virtual clock with a scheduler: AfterFunc queues a call,
// and run makes the calls in order of time, then of scheduling, on the
// calling goroutine.
type stepClock struct {
	now   time.Time
	seq   uint64
	tasks stepHeap
}

type stepTask struct {
	at      time.Time
	seq     uint64
	fn      func()
	stopped bool
	ran     bool
}

type stepHeap []*stepTask

func (h stepHeap) Len() int { return len(h) }
func (h stepHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h stepHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *stepHeap) Push(x any)   { *h = append(*h, x.(*stepTask)) }
func (h *stepHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) AfterFunc(d time.Duration, f func()) Timer {
	c.seq++
	t := &stepTask{at: c.now.Add(max(d, 0)), seq: c.seq, fn: f}
	heap.Push(&c.tasks, t)
	return t
}

func (t *stepTask) Stop() bool {
	if t.ran || t.stopped {
		return false
	}
	t.stopped = true
	return true
}

// run makes the calls due up to until, or until done holds.
func (c *stepClock) run(until time.Time, done func() bool) {
	for len(c.tasks) > 0 && !done() {
		t := heap.Pop(&c.tasks).(*stepTask)
		if t.at.After(until) {
			heap.Push(&c.tasks, t)
			return
		}
		if t.stopped {
			continue
		}
		if t.at.After(c.now) {
			c.now = t.at
		}
		t.ran = true
		t.fn()
	}
}

// TestTransferStepped runs state transfers on one goroutine, on a virtual
// clock and a Manual fabric stepped on it, under faults drawn from a
// seed: links that break, a donor cut off for a while, a donor that
// crashes. Each transfer must bring the whole state, and the same seed
// must take the same steps.
func TestTransferStepped(t *testing.T) {
	checkTransferLeaks(t)
	for seed := uint64(1); seed <= 100; seed++ {
		a := runSteppedTransfer(t, seed)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
		if b := runSteppedTransfer(t, seed); a != b {
			t.Fatalf("seed %d: two runs took different steps: %x, then %x", seed, a, b)
		}
	}
}

// runSteppedTransfer runs seed's transfer and returns a hash of its steps.
func runSteppedTransfer(t *testing.T, seed uint64) uint64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	clock := &stepClock{now: time.Unix(1000, 0)}
	trace := fnv.New64a()
	step := func(format string, args ...any) {
		fmt.Fprintf(trace, "%v ", clock.now.UnixNano())
		fmt.Fprintf(trace, format+"\n", args...)
	}
	var fabric *rdma.MemFabric
	fabricDue := false
	var stepFabric func()
	stepFabric = func() {
		fabricDue = false
		for {
			did, wait := fabric.StepDue()
			if did {
				step("fabric")
				continue
			}
			if wait > 0 && !fabricDue {
				fabricDue = true
				clock.AfterFunc(wait, stepFabric)
			}
			return
		}
	}
	fabric = rdma.NewMemFabric(rdma.MemOptions{
		Seed: int64(seed), Manual: true, MaxDelay: 2 * time.Millisecond,
		Now: clock.Now,
		OnWork: func() {
			if !fabricDue {
				fabricDue = true
				clock.AfterFunc(0, stepFabric)
			}
		},
	})
	defer fabric.Close()

	k := 2 + rng.IntN(3)
	sizes := make([]int, k)
	for i := range sizes {
		sizes[i] = rng.IntN(4 * testChunkBytes)
	}
	s := randomParts(seed, sizes...)
	joiner, err := fabric.Endpoint(testJoiner)
	if err != nil {
		t.Fatal(err)
	}
	var donors []*Donor
	defer func() {
		for _, d := range donors {
			d.Close()
		}
	}()
	for i, id := range donorIDs(k) {
		ep, err := fabric.Endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		parts, err := SnapshotParts(s, DonorParts(i, k), k)
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDonor(context.Background(), DonorConfig{
			Endpoint: ep, Stream: testStream, Joiners: []rdma.NodeID{testJoiner}, Parts: parts, Of: k,
			ChunkBytes: testChunkBytes / 4, Clock: clock, Rand: rng,
		})
		if err != nil {
			t.Fatal(err)
		}
		donors = append(donors, d)
	}

	// The faults: at most one donor crashes (its backup holds its part);
	// links break and partitions heal.
	crashed := -1
	faulted := make(map[int]bool) // donors whose link to the joiner a fault hits
	for range rng.IntN(4) {
		at := time.Duration(rng.IntN(20)) * time.Millisecond
		d := donorIDs(k)[rng.IntN(k)]
		faulted[int(d)] = true
		switch rng.IntN(3) {
		case 0:
			clock.AfterFunc(at, func() { step("break %d", d); fabric.BreakLink(d, testJoiner) })
		case 1:
			lasts := time.Duration(10+rng.IntN(3000)) * time.Millisecond
			clock.AfterFunc(at, func() {
				step("partition %d", d)
				fabric.Partition([]rdma.NodeID{d}, []rdma.NodeID{testJoiner})
				clock.AfterFunc(lasts, func() { step("heal"); fabric.Heal() })
			})
		case 2:
			if crashed < 0 {
				crashed = int(d)
				clock.AfterFunc(at, func() { step("crash %d", d); fabric.Crash(d) })
			}
		}
	}

	var got [][]byte
	var fetchErr error
	ended := false
	_, err = StartFetch(context.Background(), FetchConfig{
		Endpoint: joiner, Stream: testStream, Donors: donorIDs(k), ChunkBytes: testChunkBytes / 4,
		StallTimeout: time.Second, Clock: clock, Rand: rng,
	}, func(parts [][]byte, err error) {
		step("done %v", err)
		got, fetchErr, ended = parts, err, true
	})
	if err != nil {
		t.Fatal(err)
	}
	clock.run(clock.now.Add(time.Minute), func() bool { return ended })
	if !ended {
		t.Errorf("seed %d: the transfer did not end within a minute", seed)
		return 0
	}
	if fetchErr != nil {
		t.Errorf("seed %d: %v", seed, fetchErr)
		return 0
	}
	for i := range s.parts {
		if !bytes.Equal(got[i], s.parts[i]) {
			t.Errorf("seed %d: part %d differs", seed, i)
		}
	}
	// The donors whose links held see the joiner close its queue pairs
	// (the others may have opened new ones it never takes: the runtime
	// closes every donor with its view).
	serving := func() []int {
		var ids []int
		for i, d := range donors {
			select {
			case <-d.Done():
			default:
				if !faulted[i+1] {
					ids = append(ids, i+1)
				}
			}
		}
		return ids
	}
	clock.run(clock.now.Add(time.Minute), func() bool { return len(serving()) == 0 })
	if ids := serving(); len(ids) > 0 {
		t.Errorf("seed %d: donors %v still serve after the transfer", seed, ids)
	}
	step("end")
	return trace.Sum64()
}
