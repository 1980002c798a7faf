package multicast

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The -rewrite flag regenerates golden files. It is shared with any other
// test in the package (or library, such as datadriven) that defines it.
var _ = func() bool {
	if flag.Lookup("rewrite") == nil {
		flag.Bool("rewrite", false, "rewrite golden files under testdata")
	}
	return true
}()

func schedRewrite() bool {
	f := flag.Lookup("rewrite")
	return f != nil && f.Value.String() == "true"
}

// TestPipelineGolden compares the whole binomial pipeline schedule of small
// groups with testdata/schedule/pipeline.txt, so that a change to it is
// reviewed like code. Regenerate with go test -run PipelineGolden -rewrite.
func TestPipelineGolden(t *testing.T) {
	var b strings.Builder
	for i, c := range []struct{ n, k int }{{8, 3}, {6, 3}} {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(schedDescribe(t, BinomialPipeline, c.n, c.k))
	}
	got := b.String()
	path := filepath.Join("testdata", "schedule", "pipeline.txt")
	if schedRewrite() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("schedule differs from %s (rerun with -rewrite and review the diff):\n%s", path, got)
	}
}

// schedDescribe prints the global schedule of alg for n members and k
// blocks: the hypercube vertices, each step's transfers as from->to:block,
// and each rank's first source.
func schedDescribe(t testing.TB, alg Algorithm, n, k int) string {
	ss := schedAll(t, alg, n)
	var b strings.Builder
	fmt.Fprintf(&b, "%v n=%d k=%d steps=%d\n", alg, n, k, ss[0].steps(k))
	if alg == BinomialPipeline {
		c := pipelineCube{n: n, d: ss[0].(pipelineSchedule).d}
		b.WriteString("vertices:")
		for v := range 1 << c.d {
			if c.paired(v) {
				fmt.Fprintf(&b, " %d={%d,%d}", v, v, c.twin(v))
			} else {
				fmt.Fprintf(&b, " %d", v)
			}
		}
		b.WriteString("\n")
	}
	var xs []schedXfer
	for r, s := range ss {
		sends, _ := s.plan(k, nil, nil)
		for _, o := range sends {
			xs = append(xs, schedXfer{o.step, r, o.peer, o.block})
		}
	}
	slices.SortFunc(xs, func(a, b schedXfer) int {
		if a.step != b.step {
			return a.step - b.step
		}
		return a.from - b.from
	})
	for i, x := range xs {
		if i == 0 || x.step != xs[i-1].step {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "step %d:", x.step)
		}
		fmt.Fprintf(&b, " %d->%d:%d", x.from, x.to, x.block)
	}
	b.WriteString("\nfirst source:")
	for r := 1; r < n; r++ {
		fmt.Fprintf(&b, " %d<-%d", r, ss[r].firstSource())
	}
	b.WriteString("\n")
	return b.String()
}

// BenchmarkPipelinePlan measures one rank's plan for a 64-block message in
// a group of 33, where most vertices are paired.
func BenchmarkPipelinePlan(b *testing.B) {
	const n, k = 33, 64
	for _, rank := range []int{0, 1, 17, 32} {
		b.Run(fmt.Sprintf("rank=%d", rank), func(b *testing.B) {
			s, err := newSchedule(BinomialPipeline, n, rank)
			if err != nil {
				b.Fatal(err)
			}
			var sends, recvs []op
			b.ReportAllocs()
			for b.Loop() {
				sends, recvs = s.plan(k, sends[:0], recvs[:0])
			}
		})
	}
}
