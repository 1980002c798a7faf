package barrier

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"testing/quick"
)

func TestTreeShape(t *testing.T) {
	tests := []struct {
		n, fanOut int
		// children[r] are rank r's children; a rank's parent is the rank
		// that lists it (-1 for rank 0).
		children [][]int
	}{
		{n: 1, fanOut: 2, children: [][]int{nil}},
		{n: 2, fanOut: 2, children: [][]int{{1}, nil}},
		{n: 5, fanOut: 2, children: [][]int{{1, 2}, {3, 4}, nil, nil, nil}},
		{n: 7, fanOut: 2, children: [][]int{{1, 2}, {3, 4}, {5, 6}, nil, nil, nil, nil}},
		{n: 8, fanOut: 3, children: [][]int{{1, 2, 3}, {4, 5, 6}, {7}, nil, nil, nil, nil, nil}},
		{n: 4, fanOut: 4, children: [][]int{{1, 2, 3}, nil, nil, nil}},
		{n: 6, fanOut: 4, children: [][]int{{1, 2, 3, 4}, {5}, nil, nil, nil, nil}},
		{n: 21, fanOut: 4, children: [][]int{
			{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16}, {17, 18, 19, 20},
			nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
		}},
		{n: 9, fanOut: 8, children: [][]int{{1, 2, 3, 4, 5, 6, 7, 8}, nil, nil, nil, nil, nil, nil, nil, nil}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d/fanout=%d", tt.n, tt.fanOut), func(t *testing.T) {
			parent := make([]int, tt.n)
			parent[0] = -1
			for p, cs := range tt.children {
				for _, c := range cs {
					parent[c] = p
				}
			}
			for r := 0; r < tt.n; r++ {
				tr, err := NewTree(r, tt.n, tt.fanOut)
				if err != nil {
					t.Fatal(err)
				}
				if got := tr.Parent(); got != parent[r] {
					t.Errorf("rank %d: Parent() = %d, want %d", r, got, parent[r])
				}
				if got := tr.Children(); len(got)+len(tt.children[r]) > 0 && !slices.Equal(got, tt.children[r]) {
					t.Errorf("rank %d: Children() = %v, want %v", r, got, tt.children[r])
				}
			}
		})
	}
}

// TestTreeShapeProperties checks, for every group size up to 100 and
// fan-outs 2 to 6, that the parent and children relations agree, that
// every member is reached from rank 0 exactly once, that nobody has more
// children than the fan-out, and that the depth is logarithmic.
func TestTreeShapeProperties(t *testing.T) {
	for fanOut := 2; fanOut <= 6; fanOut++ {
		for n := 1; n <= 100; n++ {
			trees := make([]*Tree, n)
			for r := range trees {
				var err error
				if trees[r], err = NewTree(r, n, fanOut); err != nil {
					t.Fatal(err)
				}
			}
			depth := make([]int, n)
			reached := make([]int, n)
			reached[0] = 1
			for r, tr := range trees {
				cs := tr.Children()
				if len(cs) > fanOut {
					t.Fatalf("n=%d fan-out=%d: rank %d has %d children", n, fanOut, r, len(cs))
				}
				for _, c := range cs {
					if c <= r || c >= n {
						t.Fatalf("n=%d fan-out=%d: rank %d has child %d", n, fanOut, r, c)
					}
					if p := trees[c].Parent(); p != r {
						t.Fatalf("n=%d fan-out=%d: %d is a child of %d, whose parent is %d", n, fanOut, c, r, p)
					}
					reached[c]++
					depth[c] = depth[r] + 1
				}
			}
			// Smallest d with 1 + f + … + f^d ≥ n.
			maxDepth, size, level := 0, 1, 1
			for size < n {
				level *= fanOut
				size += level
				maxDepth++
			}
			for r := range trees {
				if reached[r] != 1 {
					t.Fatalf("n=%d fan-out=%d: rank %d reached %d times", n, fanOut, r, reached[r])
				}
				if depth[r] > maxDepth {
					t.Fatalf("n=%d fan-out=%d: rank %d at depth %d, want at most %d", n, fanOut, r, depth[r], maxDepth)
				}
			}
		}
	}
}

func TestNewTreeErrors(t *testing.T) {
	for _, tt := range []struct {
		rank, n, fanOut int
		sentinel        error // nil: any error
	}{
		{rank: 0, n: 3, fanOut: 1},
		{rank: 0, n: 3, fanOut: 0},
		{rank: 3, n: 3, fanOut: 2, sentinel: ErrUnknownMember},
		{rank: -1, n: 3, fanOut: 2, sentinel: ErrUnknownMember},
		{rank: 0, n: 0, fanOut: 2, sentinel: ErrUnknownMember},
	} {
		_, err := NewTree(tt.rank, tt.n, tt.fanOut)
		if err == nil || (tt.sentinel != nil && !errors.Is(err, tt.sentinel)) {
			t.Errorf("NewTree(%d, %d, %d): got error %v, want %v", tt.rank, tt.n, tt.fanOut, err, tt.sentinel)
		}
	}
}

// TestTreeStep walks one small tree (fan-out 2 over 5 members: 0 → 1, 2;
// 1 → 3, 4) through reports and barriers by hand.
func TestTreeStep(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, f Timestamp, ok bool, wantF Timestamp, wantOK bool) {
		t.Helper()
		if ok != wantOK || (ok && f != wantF) {
			t.Fatalf("%s = %d, %v; want %d, %v", what, f, ok, wantF, wantOK)
		}
	}
	trees := make([]*Tree, 5)
	for r := range trees {
		var err error
		trees[r], err = NewTree(r, 5, 2)
		must(err)
	}
	root, mid, leaf := trees[0], trees[1], trees[3]

	// A leaf reports its subtree — itself — at once, then only increases.
	f, ok := leaf.Up()
	expect("leaf Up()", f, ok, 0, true)
	f, ok = leaf.Up()
	expect("leaf Up() again", f, ok, 0, false)
	leaf.SetOwn(30)
	f, ok = leaf.Up()
	expect("leaf Up() after SetOwn(30)", f, ok, 30, true)
	leaf.SetOwn(20) // frontiers never go backwards
	f, ok = leaf.Up()
	expect("leaf Up() after SetOwn(20)", f, ok, 0, false)
	f, ok = leaf.Down()
	expect("leaf Down()", f, ok, 0, false)

	// An inner member waits for every child.
	mid.SetOwn(40)
	must(mid.Report(3, 30))
	f, ok = mid.Up()
	expect("Up() with child 4 missing", f, ok, 0, false)
	must(mid.Report(4, 35))
	f, ok = mid.Up()
	expect("Up() with every child", f, ok, 30, true)

	// The root's subtree minimum is the barrier.
	root.SetOwn(50)
	must(root.Report(1, 30))
	if b := root.Barrier(); b != 0 {
		t.Fatalf("root Barrier() with child 2 missing = %d, want 0", b)
	}
	must(root.Report(2, 25))
	if b := root.Barrier(); b != 25 {
		t.Fatalf("root Barrier() = %d, want 25", b)
	}
	f, ok = root.Down()
	expect("root Down()", f, ok, 25, true)
	f, ok = root.Down()
	expect("root Down() again", f, ok, 0, false)
	f, ok = root.Up()
	expect("root Up()", f, ok, 0, false)

	// The barrier travels down.
	must(mid.SetBarrier(0, 25))
	f, ok = mid.Down()
	expect("inner Down()", f, ok, 25, true)
	must(leaf.SetBarrier(1, 25))
	if b := leaf.Barrier(); b != 25 {
		t.Fatalf("leaf Barrier() = %d, want 25", b)
	}

	// Rejections.
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"report from a non-child", root.Report(3, 99), ErrUnknownMember},
		{"report from itself", mid.Report(1, 99), ErrUnknownMember},
		{"report going backwards", root.Report(2, 20), ErrBackwards},
		{"barrier from a non-parent", leaf.SetBarrier(0, 99), ErrUnknownMember},
		{"barrier going backwards", leaf.SetBarrier(1, 24), ErrBackwards},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
	if b := root.Barrier(); b != 25 {
		t.Errorf("root Barrier() after rejections = %d, want 25", b)
	}
	if b := leaf.Barrier(); b != 25 {
		t.Errorf("leaf Barrier() after rejections = %d, want 25", b)
	}
}

func TestTreeSingleMember(t *testing.T) {
	tr, err := NewTree(0, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	tr.SetOwn(17)
	if b := tr.Barrier(); b != 17 {
		t.Errorf("Barrier() = %d, want 17", b)
	}
	if _, ok := tr.Up(); ok {
		t.Error("Up() on the only member returned ok")
	}
	if _, ok := tr.Down(); ok {
		t.Error("Down() on the only member returned ok")
	}
}

// treeCase is a random run of frontier aggregation: a group of n members
// in a tree of fan-out fanOut, whose frontiers advance at random while
// control records are delivered in a random order.
type treeCase struct {
	n, fanOut int
	// reorder allows records on one link to overtake each other; stale
	// ones must then be rejected as going backwards.
	reorder bool
	seed    int64
}

func (treeCase) Generate(r *rand.Rand, _ int) reflect.Value {
	return reflect.ValueOf(treeCase{
		n:       1 + r.Intn(70),
		fanOut:  2 + r.Intn(4),
		reorder: r.Intn(4) == 0,
		seed:    r.Int63(),
	})
}

// treeRecord is an Up (the subtree minimum, to the parent) or a Down (the
// barrier, to a child).
type treeRecord struct {
	from, to int
	down     bool
	ts       Timestamp
}

// TestTreeQuick checks Tree against the obviously correct barrier — the
// minimum of every member's current frontier — over random group sizes,
// fan-outs, frontier sequences and delivery orders, in the manner of etcd
// raft's quorum/quick_test.go. Safety: whenever any member's view of the
// barrier is read, it is at most the true minimum. Liveness: once the
// frontiers stop and every record is delivered, every member knows exactly
// the minimum of the frontiers last fed in.
func TestTreeQuick(t *testing.T) {
	cfg := &quick.Config{MaxCount: 1000}
	if testing.Short() {
		cfg.MaxCount = 100
	}
	if err := quick.Check(func(c treeCase) bool {
		if err := runTreeCase(c); err != nil {
			t.Logf("%+v: %v", c, err)
			return false
		}
		return true
	}, cfg); err != nil {
		t.Fatal(err)
	}
}

func runTreeCase(c treeCase) error {
	r := rand.New(rand.NewSource(c.seed))
	trees := make([]*Tree, c.n)
	for i := range trees {
		var err error
		if trees[i], err = NewTree(i, c.n, c.fanOut); err != nil {
			return err
		}
	}
	// Each member's frontiers, in the order they will be fed in.
	feeds := make([][]Timestamp, c.n)
	for i := range feeds {
		f := Timestamp(0)
		for k := 1 + r.Intn(4); k > 0; k-- {
			f += Timestamp(1 + r.Intn(100))
			feeds[i] = append(feeds[i], f)
		}
	}
	frontier := make([]Timestamp, c.n) // the true current frontiers
	links := make(map[[2]int][]treeRecord)
	inFlight := 0
	// pump collects what member i has to send, as the core does after
	// every step.
	pump := func(i int) {
		tr := trees[i]
		if f, ok := tr.Up(); ok {
			k := [2]int{i, tr.Parent()}
			links[k] = append(links[k], treeRecord{from: i, to: tr.Parent(), ts: f})
			inFlight++
		}
		if b, ok := tr.Down(); ok {
			for _, ch := range tr.Children() {
				k := [2]int{i, ch}
				links[k] = append(links[k], treeRecord{from: i, to: ch, down: true, ts: b})
				inFlight++
			}
		}
	}
	deliver := func() error {
		keys := make([][2]int, 0, len(links))
		for k, q := range links {
			if len(q) > 0 {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b [2]int) int {
			if a[0] != b[0] {
				return a[0] - b[0]
			}
			return a[1] - b[1]
		})
		k := keys[r.Intn(len(keys))]
		q := links[k]
		j := 0
		if c.reorder {
			j = r.Intn(len(q))
		}
		rec := q[j]
		links[k] = append(q[:j], q[j+1:]...)
		inFlight--
		var err error
		if rec.down {
			err = trees[rec.to].SetBarrier(rec.from, rec.ts)
		} else {
			err = trees[rec.to].Report(rec.from, rec.ts)
		}
		switch {
		case err == nil:
		case c.reorder && errors.Is(err, ErrBackwards):
			return nil // a stale record overtaken by a newer one: dropped
		default:
			return fmt.Errorf("member %d rejects %+v: %w", rec.to, rec, err)
		}
		pump(rec.to)
		return nil
	}
	safe := func() error {
		m := slices.Min(frontier)
		for i, tr := range trees {
			if b := tr.Barrier(); b > m {
				return fmt.Errorf("member %d knows barrier %d, but the minimum frontier is %d (frontiers %v)", i, b, m, frontier)
			}
		}
		return nil
	}

	for i := range trees {
		pump(i)
	}
	fed := 0
	total := 0
	for _, fs := range feeds {
		total += len(fs)
	}
	for fed < total || inFlight > 0 {
		if inFlight == 0 || (fed < total && r.Intn(3) == 0) {
			i := r.Intn(c.n)
			for len(feeds[i]) == 0 {
				i = (i + 1) % c.n
			}
			frontier[i] = feeds[i][0]
			feeds[i] = feeds[i][1:]
			fed++
			trees[i].SetOwn(frontier[i])
			pump(i)
		} else if err := deliver(); err != nil {
			return err
		}
		if err := safe(); err != nil {
			return err
		}
	}
	m := slices.Min(frontier)
	for i, tr := range trees {
		if b := tr.Barrier(); b != m {
			return fmt.Errorf("after every record was delivered member %d knows barrier %d, want the minimum frontier %d (frontiers %v)", i, b, m, frontier)
		}
	}
	return nil
}
