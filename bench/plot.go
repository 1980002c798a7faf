package main

import (
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The plots writePlots draws, by workload.
var (
	// throughputPlots sweep the client count: throughput against it.
	throughputPlots = []string{"a", "b", "e"}
	// latencyPlots run at a fixed load: their latency distribution.
	latencyPlots = []string{"c", "g"}
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
// (latency-c.png, latency-g.png) and multicast completion time against group size
// (multicast.png), each for the workloads that ran and measured something.
// workloads gives the plots their titles.
func writePlots(dir string, res results, workloads []workload) ([]string, error) {
	titles := make(map[string]string)
	for _, w := range workloads {
		titles[w.name] = wrapTitle(fmt.Sprintf("(%s) %s", w.name, w.title), titleWidth)
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

// point is one measurement on its way into a line of a plot.
type point struct {
	line string // the legend's name for the line
	x, y float64
}

// titleWidth is the most characters a line of a plot's title holds: a
// longer one would run past the plot's edges.
const titleWidth = 80

// wrapTitle breaks s into lines of at most width characters at spaces
// (a word longer than width gets a line of its own).
func wrapTitle(s string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case line+1+n > width:
			b.WriteByte('\n')
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += n
	}
	return b.String()
}

// linePlot returns a plot with its title and axis labels, a grid, the
// legend in the top left corner, and one line per name in points, in the
// order the names first appear: at each x, the median of the ys of that
// name there. It returns nil for no points.
func linePlot(title, xLabel, yLabel string, points []point) *plot.Plot {
	if len(points) == 0 {
		return nil
	}
	var names []string
	ys := make(map[string]map[float64][]float64)
	for _, pt := range points {
		if _, ok := ys[pt.line]; !ok {
			names = append(names, pt.line)
			ys[pt.line] = make(map[float64][]float64)
		}
		ys[pt.line][pt.x] = append(ys[pt.line][pt.x], pt.y)
	}
	var lines []any
	for _, name := range names {
		var xys plotter.XYs
		for _, x := range slices.Sorted(maps.Keys(ys[name])) {
			xys = append(xys, plotter.XY{X: x, Y: median(ys[name][x])})
		}
		lines = append(lines, name, xys)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		panic(err) // the arguments are strings and XYs
	}
	return p
}

// xsOf returns the distinct xs of points, in increasing order.
func xsOf(points []point) []float64 {
	var xs []float64
	for _, pt := range points {
		xs = append(xs, pt.x)
	}
	slices.Sort(xs)
	return slices.Compact(xs)
}

// lineCount returns how many lines points make.
func lineCount(points []point) int {
	names := make(map[string]bool)
	for _, pt := range points {
		names[pt.line] = true
	}
	return len(names)
}

// plotThroughput draws the throughput of each system against the client
// count in workload w, the median over the repetitions at each count; nil
// if w has no closed-loop samples.
func plotThroughput(samples []sample, w, title string) *plot.Plot {
	var points []point
	for _, s := range samples {
		if s.Workload == w && s.Clients > 0 {
			points = append(points, point{s.System, float64(s.Clients), s.OpsPerSec})
		}
	}
	p := linePlot(title, "clients (closed loop)", "writes per second", points)
	if p == nil {
		return nil
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = labelledTicks(xsOf(points), func(x float64) string { return strconv.Itoa(int(x)) })
	widenLog(&p.X)
	p.Y.Min = 0
	roomForLegend(p, lineCount(points))
	return p
}

// plotLatency draws the latency distribution of each system in workload
// w: each quantile's median over the repetitions, against the quantile on
// a scale that spreads the tail (90%, 99%, 99.9% equally apart); nil if
// no sample of w holds a distribution.
func plotLatency(samples []sample, w, title string) *plot.Plot {
	var points []point
	for _, s := range samples {
		for _, q := range s.Latency {
			// Neither 100% nor no time has a place on the axes.
			if s.Workload == w && q.Q < 1 && q.Us > 0 {
				points = append(points, point{s.System, ninesOf(q.Q), q.Us / 1000})
			}
		}
	}
	p := linePlot(title, "percentile", "latency (ms)", points)
	if p == nil {
		return nil
	}
	maxX := slices.Max(xsOf(points))
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
	var points []point
	var unicast []float64
	for _, r := range rows {
		points = append(points, point{r.Algo, float64(r.Nodes), r.Seconds})
		unicast = append(unicast, r.UnicastSeconds)
	}
	p := linePlot(title, "group size (members, the sender included)", "seconds until every member has the message", points)
	if p == nil {
		return nil
	}
	sizes := xsOf(points)
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
	if len(sizes) == 1 {
		p.X.Min, p.X.Max = sizes[0]-1, sizes[0]+1
	}
	p.Y.Min = 0
	roomForLegend(p, lineCount(points)+1)
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
