package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/convoy-gcs/convoy/internal/benchout"
)

// syntheticSamples returns samples of workload w: every system at every
// client count (0: one open-loop point), each repetition, with throughput
// and latencies that grow with both.
func syntheticSamples(w string, systems []string, clients []int, reps int) []sample {
	var out []sample
	for rep := 1; rep <= reps; rep++ {
		for i, sys := range systems {
			for _, n := range clients {
				s := sample{Rep: rep, Workload: w, System: sys, Clients: n, Size: 64}
				s.OpsPerSec = float64((i+1)*1000 + n + rep)
				for _, q := range latencyQuantiles {
					s.Latency = append(s.Latency, quantile{Q: q, Us: float64(100*(i+1)) / (1.001 - q)})
				}
				s.P50Us, s.P99Us = s.Latency[6].Us, s.Latency[12].Us
				out = append(out, s)
			}
		}
	}
	return out
}

// syntheticMulticast returns summary rows of workload m.
func syntheticMulticast(algos []string, nodes []int) []multicastPoint {
	var out []multicastPoint
	for i, a := range algos {
		for _, n := range nodes {
			out = append(out, multicastPoint{Reps: 3, Multicast: benchout.Multicast{Algo: a, Nodes: n, Bytes: 16 << 20, BlockBytes: 1 << 20,
				Seconds: 0.1 * float64(n) / float64(i+1), UnicastSeconds: 0.1, Ratio: float64(n) / float64(i+1)}})
		}
	}
	return out
}

func TestWritePlots(t *testing.T) {
	systems := []string{"convoy", "etcd", "raft", "convoy-nosync"}
	all := func(names ...string) []string {
		var files []string
		for _, n := range names {
			files = append(files, n+".png", n+".svg")
		}
		return files
	}
	for _, tc := range []struct {
		name string
		res  results
		want []string
	}{
		{
			name: "every plot",
			res: results{
				Samples: slices.Concat(
					syntheticSamples("a", systems, []int{64, 256, 1024, 4096}, 3),
					syntheticSamples("b", systems[:3], []int{64, 256, 1024, 4096}, 3),
					syntheticSamples("c", systems[:3], []int{0}, 3),
					syntheticSamples("d", systems[:3], []int{8}, 3),
				),
				MulticastSummary: syntheticMulticast([]string{"sequential", "chain", "tree", "pipeline"}, []int{2, 4, 8, 16}),
			},
			want: all("throughput-a", "throughput-b", "latency-c", "multicast"),
		},
		{
			name: "single points",
			res: results{
				Samples: slices.Concat(
					syntheticSamples("a", systems[:1], []int{64}, 1),
					syntheticSamples("c", systems[:1], []int{0}, 1),
				),
				MulticastSummary: syntheticMulticast([]string{"pipeline"}, []int{3}),
			},
			want: all("throughput-a", "latency-c", "multicast"),
		},
		{
			name: "no distribution",
			res: results{Samples: func() []sample {
				ss := syntheticSamples("c", systems[:1], []int{0}, 1)
				ss[0].Latency = nil
				return ss
			}()},
		},
		{
			name: "nothing to plot",
			res:  results{Samples: syntheticSamples("d", systems, []int{8}, 1)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := writePlots(dir, tc.res, workloadSet([]int{64}, 8))
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(files)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(files, want) {
				t.Errorf("wrote %q, want %q", files, want)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(want) {
				t.Errorf("%d files in the directory, want %d", len(entries), len(want))
			}
			for _, name := range files {
				checkImage(t, filepath.Join(dir, name))
			}
		})
	}
}

// checkImage checks that path holds a PNG or SVG image, by its name.
func checkImage(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch filepath.Ext(path) {
	case ".png":
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
			t.Errorf("%s: not a PNG image (%d bytes)", path, len(b))
		}
	case ".svg":
		if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("</svg>")) {
			t.Errorf("%s: not an SVG image (%d bytes)", path, len(b))
		}
	default:
		t.Errorf("%s: neither PNG nor SVG", path)
	}
}

func TestSummarizeMulticast(t *testing.T) {
	point := func(rep, nodes int, seconds, unicast float64) multicastPoint {
		return multicastPoint{Rep: rep, Multicast: benchout.Multicast{Algo: "chain", Nodes: nodes,
			Seconds: seconds, UnicastSeconds: unicast, Ratio: seconds / unicast}}
	}
	points := []multicastPoint{point(1, 2, 3, 1), point(1, 4, 5, 1), point(2, 2, 1, 1), point(2, 4, 7, 2), point(3, 2, 2, 1)}
	got := summarizeMulticast(points)
	want := []multicastPoint{
		{Reps: 3, Multicast: benchout.Multicast{Algo: "chain", Nodes: 2, Seconds: 2, UnicastSeconds: 1, Ratio: 2}},
		{Reps: 2, Multicast: benchout.Multicast{Algo: "chain", Nodes: 4, Seconds: 6, UnicastSeconds: 1.5, Ratio: 4.25}},
	}
	if !slices.Equal(got, want) {
		t.Errorf("summary %+v, want %+v", got, want)
	}
}

func TestWrapTitle(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  string
	}{
		{"", 10, ""},
		{"short", 10, "short"},
		{"exactly ten", 11, "exactly ten"},
		{"exactly ten", 10, "exactly\nten"},
		{"a b c d e f", 3, "a b\nc d\ne f"},
		{"averyverylongword and more", 8, "averyverylongword\nand more"},
		{"  spaces   collapse  ", 20, "spaces collapse"},
		{"ratio ÷ floor’s p50", 15, "ratio ÷ floor’s\np50"},
	} {
		if got := wrapTitle(tc.in, tc.width); got != tc.want {
			t.Errorf("wrapTitle(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}
