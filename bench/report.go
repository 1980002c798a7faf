package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"
)

// summary is one row of a workload's table: the medians over the
// repetitions of one system's samples, at the client count that gave the
// most throughput.
type summary struct {
	Workload  string  `json:"workload"`
	System    string  `json:"system"`
	Clients   int     `json:"clients,omitempty"`
	Rate      float64 `json:"rate,omitempty"`
	Size      int     `json:"size"`
	Reps      int     `json:"reps"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Us     float64 `json:"p50_us"`
	P99Us     float64 `json:"p99_us"`
	CPUCores  float64 `json:"cpu_cores"`
	// Timeouts and Errors are totals over the repetitions.
	Timeouts int `json:"timeouts"`
	Errors   int `json:"errors"`
	// Ratio compares the row with the Convoy configuration of the same
	// durability (in workload e, with Convoy's key-value service,
	// convoy-kv), on what RatioOf names: "ops/s" is this row's throughput
	// over Convoy's, "p50" this row's median latency over Convoy's. It is
	// absent for Convoy itself and the physical limits.
	Ratio   *float64 `json:"ratio,omitempty"`
	RatioOf string   `json:"ratio_of,omitempty"`
}

// results is what results.json holds.
type results struct {
	Started  time.Time `json:"started"`
	Machine  machine   `json:"machine"`
	Settings settings  `json:"settings"`
	Samples  []sample  `json:"samples"`
	Summary  []summary `json:"summary"`
	// Multicast holds workload m's points, MulticastSummary their medians.
	Multicast        []multicastPoint `json:"multicast,omitempty"`
	MulticastSummary []multicastPoint `json:"multicast_summary,omitempty"`
}

type machine struct {
	CPUs   int    `json:"cpus"`
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
}

type settings struct {
	Systems   []string `json:"systems"`
	Workloads []string `json:"workloads"`
	Reps      int      `json:"reps"`
	Warmup    string   `json:"warmup"`
	Duration  string   `json:"duration"`
	Clients   []int    `json:"clients"`
	Conns     int      `json:"conns"`
	// MulticastArgs are the flags workload m gave convoy bench multicast.
	MulticastArgs []string `json:"multicast_args,omitempty"`
}

func thisMachine() machine {
	return machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
}

// summarize reduces samples to one row per workload and system, in the
// order of workloads and then of first appearance in samples.
func summarize(samples []sample, workloads []workload, systems []system) []summary {
	type point struct {
		workload, system string
		clients          int
	}
	byPoint := make(map[point][]sample)
	var points []point
	for _, s := range samples {
		p := point{s.Workload, s.System, s.Clients}
		if _, ok := byPoint[p]; !ok {
			points = append(points, p)
		}
		byPoint[p] = append(byPoint[p], s)
	}
	references := make(map[string]string)
	for _, s := range systems {
		references[s.name] = s.reference
	}

	var out []summary
	for _, w := range workloads {
		best := make(map[string]summary)
		var order []string
		for _, p := range points {
			if p.workload != w.name {
				continue
			}
			row := medianOf(byPoint[p])
			prev, ok := best[p.system]
			if !ok {
				order = append(order, p.system)
			}
			if !ok || row.OpsPerSec > prev.OpsPerSec {
				best[p.system] = row
			}
		}
		for _, name := range order {
			row := best[name]
			refName := references[name]
			if w.reference != "" {
				refName = w.reference
			}
			ref, ok := best[refName]
			if ok && refName != name && w.ratioOf != "" {
				row.RatioOf = w.ratioOf
				var r float64
				switch w.ratioOf {
				case "ops/s":
					r = row.OpsPerSec / ref.OpsPerSec
				case "p50":
					r = row.P50Us / ref.P50Us
				}
				if !isBad(r) {
					row.Ratio = &r
				}
			}
			out = append(out, row)
		}
	}
	return out
}

// medianOf returns the medians of the samples of one point.
func medianOf(ss []sample) summary {
	pick := func(f func(sample) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return median(xs)
	}
	s0 := ss[0]
	row := summary{
		Workload:  s0.Workload,
		System:    s0.System,
		Clients:   s0.Clients,
		Rate:      s0.Rate,
		Size:      s0.Size,
		Reps:      len(ss),
		OpsPerSec: pick(func(s sample) float64 { return s.OpsPerSec }),
		P50Us:     pick(func(s sample) float64 { return s.P50Us }),
		P99Us:     pick(func(s sample) float64 { return s.P99Us }),
		CPUCores:  pick(func(s sample) float64 { return s.CPUCores }),
	}
	for _, s := range ss {
		row.Timeouts += s.Timeouts
		row.Errors += s.Errors
	}
	return row
}

// median returns the median of xs (the mean of the middle two for an
// even count), 0 for none. It sorts xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func isBad(x float64) bool { return x != x || x > 1e300 || x < -1e300 }

// printTables prints one table per workload, but for workload m's, which
// is printMulticast's.
func printTables(w io.Writer, rows []summary, workloads []workload) error {
	for _, wl := range workloads {
		if wl.multicast {
			continue // its table is printMulticast's
		}
		fmt.Fprintf(w, "\n(%s) %s\n", wl.name, wl.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		ratio := "ratio"
		if wl.ratioOf != "" {
			ref := "convoy"
			if wl.reference != "" {
				ref = wl.reference
			}
			ratio = "ratio (" + wl.ratioOf + " ÷ " + ref + "'s)"
		}
		load := "clients"
		if wl.rate > 0 {
			load = "rate"
		}
		fmt.Fprintf(tw, "system\t%s\tops/s\tp50\tp99\tcpu (cores)\tfailed\t%s\t\n", load, ratio)
		for _, r := range rows {
			if r.Workload != wl.name {
				continue
			}
			l := "-"
			switch {
			case r.Rate > 0:
				l = fmt.Sprintf("%.0f/s", r.Rate)
			case r.Clients > 0:
				l = fmt.Sprint(r.Clients)
			}
			rt := "-"
			if r.Ratio != nil {
				rt = fmt.Sprintf("%.2f", *r.Ratio)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%.2f\t%d\t%s\t\n",
				r.System, l, r.OpsPerSec, formatUs(r.P50Us), formatUs(r.P99Us), r.CPUCores, r.Timeouts+r.Errors, rt)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// formatUs formats a latency in microseconds.
func formatUs(us float64) string {
	switch {
	case us == 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	default:
		return fmt.Sprintf("%.2fms", us/1000)
	}
}

// writeResults writes res as results.json in dir, creating dir.
func writeResults(dir string, res results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644)
}
