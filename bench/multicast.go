package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/convoy-gcs/convoy/internal/benchout"
	"github.com/convoy-gcs/convoy/internal/childproc"
)

// multicastWorkload names workload m: it runs "convoy bench multicast"
// instead of measuring a system.
const multicastWorkload = "m"

// multicastPoint is one line of "convoy bench multicast -json", or a row
// of medians of such lines.
type multicastPoint struct {
	// Rep is the repetition that measured the point; Reps, in a summary
	// row, how many repetitions its medians are over.
	Rep  int `json:"rep,omitempty"`
	Reps int `json:"reps,omitempty"`
	benchout.Multicast
}

// convoyModule is the module whose convoy command workload m runs.
const convoyModule = "github.com/convoy-gcs/convoy"

// buildConvoy builds the convoy command into dir and returns its path. It
// builds from the directory of convoyModule as this module's go.mod
// resolves it (the repository root, which it replaces the module with),
// so it must run inside this module.
func buildConvoy(ctx context.Context, dir string) (string, error) {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", convoyModule)
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("finding %s (run in the bench directory, or pass -convoy): %w%s", convoyModule, err, exitStderr(err))
	}
	exe := filepath.Join(dir, "convoy")
	if err := goBuild(ctx, strings.TrimSpace(string(out)), "./cmd/convoy", exe); err != nil {
		return "", err
	}
	return exe, nil
}

// exitStderr returns ": " and the standard error an *exec.ExitError
// carries, or "" if err holds none.
func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// runMulticast runs "convoy bench multicast -json -reps 1" followed by
// args, with convoy the command's path, and returns the points it printed.
// The command's standard error goes to verbose if not nil.
func runMulticast(ctx context.Context, convoy string, args []string, verbose io.Writer) ([]multicastPoint, error) {
	argv := append([]string{"bench", "multicast", "-json", "-reps", "1"}, args...)
	// Line runs on the child's reader goroutine, which is done before
	// Done closes: points and bad are read only after.
	var (
		points []multicastPoint
		bad    []string
	)
	p, err := childproc.Start(exec.Command(convoy, argv...), childproc.Options{
		Name:   "convoy bench multicast",
		Stderr: verbose,
		Line: func(line []byte) {
			var pt multicastPoint
			if err := json.Unmarshal(line, &pt); err != nil || pt.Algo == "" {
				bad = append(bad, string(line))
				return
			}
			points = append(points, pt)
		},
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		// convoy stops on an interrupt, taking down what it set up (the
		// network namespaces of -netns); it is killed if it takes longer
		// than stopTimeout.
		_ = p.Signal(os.Interrupt)
		_ = p.Stop(stopTimeout)
		return nil, ctx.Err()
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("convoy bench multicast printed lines that are no result: %q", bad)
	}
	if len(points) == 0 {
		return nil, fmt.Errorf("convoy bench multicast %s printed no result", strings.Join(args, " "))
	}
	return points, nil
}

// summarizeMulticast reduces points to one row per algorithm and group
// size, the medians over the repetitions, in the order the rows first
// appear.
func summarizeMulticast(points []multicastPoint) []multicastPoint {
	type key struct {
		algo  string
		nodes int
	}
	groups := make(map[key][]multicastPoint)
	var order []key
	for _, p := range points {
		k := key{p.Algo, p.Nodes}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], p)
	}
	var rows []multicastPoint
	for _, k := range order {
		g := groups[k]
		pick := func(f func(multicastPoint) float64) float64 {
			xs := make([]float64, len(g))
			for i, p := range g {
				xs[i] = f(p)
			}
			return median(xs)
		}
		rows = append(rows, multicastPoint{Reps: len(g), Multicast: benchout.Multicast{
			Algo:           k.algo,
			Nodes:          k.nodes,
			Bytes:          g[0].Bytes,
			BlockBytes:     g[0].BlockBytes,
			Seconds:        pick(func(p multicastPoint) float64 { return p.Seconds }),
			UnicastSeconds: pick(func(p multicastPoint) float64 { return p.UnicastSeconds }),
			Ratio:          pick(func(p multicastPoint) float64 { return p.Ratio }),
		}})
	}
	return rows
}

// printMulticast prints workload m's table from its summary rows.
func printMulticast(w io.Writer, title string, rows []multicastPoint) error {
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n(%s) %s: %s messages in %s blocks\n", multicastWorkload, title, formatBytes(rows[0].Bytes), formatBytes(rows[0].BlockBytes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "algo\tnodes\tseconds\tunicast\tratio\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.2f\t\n", r.Algo, r.Nodes, r.Seconds, r.UnicastSeconds, r.Ratio)
	}
	return tw.Flush()
}

// formatBytes formats a size in bytes with the largest binary unit that
// divides it.
func formatBytes(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
