package main

import (
	"cmp"
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The plots writePlots draws, by workload.
var (
	// throughputPlots sweep the client count: throughput against it.
	throughputPlots = []string{"a", "b"}
	// latencyPlots run at a fixed load: their latency distribution.
	latencyPlots = []string{"c"}
)

// plotWidth and plotHeight are the size of every plot.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// plotFormats are the formats every plot is written in.
var plotFormats = []string{"png", "svg"}

// writePlots draws what res holds into dir, each plot as a PNG and an SVG
// file, and returns the files' names: throughput against the client count
// (throughput-a.png ...), the latency distribution at a fixed load
// (latency-c.png) and multicast completion time against group size
// (multicast.png), each for the workloads that ran and measured something.
// workloads gives the plots their titles.
func writePlots(dir string, res results, workloads []workload) ([]string, error) {
	titles := make(map[string]string)
	for _, w := range workloads {
		titles[w.name] = fmt.Sprintf("(%s) %s", w.name, w.title)
	}
	type named struct {
		name string
		p    *plot.Plot
	}
	var plots []named
	for _, w := range throughputPlots {
		if p := plotThroughput(res.Samples, w, titles[w]); p != nil {
			plots = append(plots, named{"throughput-" + w, p})
		}
	}
	for _, w := range latencyPlots {
		if p := plotLatency(res.Samples, w, titles[w]); p != nil {
			plots = append(plots, named{"latency-" + w, p})
		}
	}
	if p := plotMulticast(res.MulticastSummary, titles[multicastWorkload]); p != nil {
		plots = append(plots, named{"multicast", p})
	}
	if len(plots) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, np := range plots {
		for _, format := range plotFormats {
			name := np.name + "." + format
			if err := np.p.Save(plotWidth, plotHeight, filepath.Join(dir, name)); err != nil {
				return files, fmt.Errorf("plot %s: %w", name, err)
			}
			files = append(files, name)
		}
	}
	return files, nil
}

// newPlot returns an empty plot with its title and axis labels, the legend
// in the top left corner.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p
}

// bySystem groups the samples of workload w by system, the systems in
// the order they first appear.
func bySystem(samples []sample, w string) (systems []string, groups map[string][]sample) {
	groups = make(map[string][]sample)
	for _, s := range samples {
		if s.Workload != w {
			continue
		}
		if _, ok := groups[s.System]; !ok {
			systems = append(systems, s.System)
		}
		groups[s.System] = append(groups[s.System], s)
	}
	return systems, groups
}

// plotThroughput draws the throughput of each system against the client
// count in workload w, the median over the repetitions at each count; nil
// if w has no closed-loop samples.
func plotThroughput(samples []sample, w, title string) *plot.Plot {
	systems, groups := bySystem(samples, w)
	var lines []any
	var counts []float64
	for _, sys := range systems {
		byClients := make(map[int][]float64)
		for _, s := range groups[sys] {
			if s.Clients > 0 {
				byClients[s.Clients] = append(byClients[s.Clients], s.OpsPerSec)
			}
		}
		var xys plotter.XYs
		for _, n := range slices.Sorted(maps.Keys(byClients)) {
			xys = append(xys, plotter.XY{X: float64(n), Y: median(byClients[n])})
			if !slices.Contains(counts, float64(n)) {
				counts = append(counts, float64(n))
			}
		}
		if len(xys) > 0 {
			lines = append(lines, sys, xys)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	p := newPlot(title, "clients (closed loop)", "writes per second")
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		panic(err) // the arguments are strings and XYs
	}
	slices.Sort(counts)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = labelledTicks(counts, func(x float64) string { return strconv.Itoa(int(x)) })
	widenLog(&p.X)
	p.Y.Min = 0
	roomForLegend(p, len(lines)/2)
	return p
}

// plotLatency draws the latency distribution of each system in workload
// w: each quantile's median over the repetitions, against the quantile on
// a scale that spreads the tail (90%, 99%, 99.9% equally apart); nil if
// no sample of w holds a distribution.
func plotLatency(samples []sample, w, title string) *plot.Plot {
	systems, groups := bySystem(samples, w)
	var lines []any
	maxX := 0.0
	for _, sys := range systems {
		byQ := make(map[float64][]float64)
		for _, s := range groups[sys] {
			for _, q := range s.Latency {
				byQ[q.Q] = append(byQ[q.Q], q.Us)
			}
		}
		var xys plotter.XYs
		for _, q := range slices.Sorted(maps.Keys(byQ)) {
			us := median(byQ[q])
			if q >= 1 || us <= 0 {
				continue // neither has a place on the axes
			}
			x := ninesOf(q)
			xys = append(xys, plotter.XY{X: x, Y: us / 1000})
			maxX = max(maxX, x)
		}
		if len(xys) > 0 {
			lines = append(lines, sys, xys)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	p := newPlot(title, "percentile", "latency (ms)")
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		panic(err) // the arguments are strings and XYs
	}
	var ticks []plot.Tick
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 0.9999} {
		if x := ninesOf(q); x <= maxX+1e-9 {
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(100*q, 'f', -1, 64) + "%"})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min = 0
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	widenLog(&p.Y)
	return p
}

// ninesOf places quantile q on the latency plot's axis: 0 at 0%, 1 at
// 90%, 2 at 99%, 3 at 99.9%.
func ninesOf(q float64) float64 { return -math.Log10(1 - q) }

// plotMulticast draws the completion time of each algorithm against the
// group size, from rows in the order convoy bench multicast printed them,
// with the median unicast time (one receiver) as a reference line; nil
// for no rows.
func plotMulticast(rows []multicastPoint, title string) *plot.Plot {
	var algos []string
	byAlgo := make(map[string]plotter.XYs)
	var sizes, unicast []float64
	for _, r := range rows {
		if _, ok := byAlgo[r.Algo]; !ok {
			algos = append(algos, r.Algo)
		}
		byAlgo[r.Algo] = append(byAlgo[r.Algo], plotter.XY{X: float64(r.Nodes), Y: r.Seconds})
		if !slices.Contains(sizes, float64(r.Nodes)) {
			sizes = append(sizes, float64(r.Nodes))
		}
		unicast = append(unicast, r.UnicastSeconds)
	}
	if len(rows) == 0 {
		return nil
	}
	p := newPlot(title, "group size (members, the sender included)", "seconds until every member has the message")
	var lines []any
	for _, a := range algos {
		xys := byAlgo[a]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		lines = append(lines, a, xys)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		panic(err) // the arguments are strings and XYs
	}
	slices.Sort(sizes)
	u := median(unicast)
	ref, err := plotter.NewLine(plotter.XYs{{X: sizes[0], Y: u}, {X: sizes[len(sizes)-1], Y: u}})
	if err != nil {
		panic(err) // two finite points
	}
	ref.Color = color.Gray{Y: 96}
	ref.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(ref)
	p.Legend.Add("unicast (one receiver)", ref)
	p.X.Tick.Marker = labelledTicks(sizes, func(x float64) string { return strconv.Itoa(int(x)) })
	if sizes[0] == sizes[len(sizes)-1] {
		p.X.Min, p.X.Max = sizes[0]-1, sizes[0]+1
	}
	p.Y.Min = 0
	roomForLegend(p, len(algos)+1)
	return p
}

// roomForLegend raises the top of a linear y axis that starts at 0 so
// that a legend of rows entries in the top corner has room above the
// highest point: about 7% of the height per entry, a 12-point line in a
// 5-inch plot.
func roomForLegend(p *plot.Plot, rows int) {
	p.Y.Max *= 1 + 0.07*float64(rows)
}

// labelledTicks marks exactly xs, each labelled by label.
func labelledTicks(xs []float64, label func(float64) string) plot.ConstantTicks {
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		ticks[i] = plot.Tick{Value: x, Label: label(x)}
	}
	return ticks
}

// widenLog widens a log axis whose data span a single value, which gonum
// would widen by 1 either side, to a factor of 2 either side: a log axis
// cannot reach 0.
func widenLog(a *plot.Axis) {
	if a.Min == a.Max {
		a.Min, a.Max = a.Min/2, a.Max*2
	}
}

// logTicks marks a log axis at 1, 2 and 5 times each power of ten, every
// mark labelled; where fewer than two of those fall in the range, it marks
// the range as a linear axis would.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); math.Pow(10, e) <= max; e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= min && v <= max {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
			}
		}
	}
	if len(ticks) < 2 {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	return ticks
}
