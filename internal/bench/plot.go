package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plots follow the papers' figures: the x axis (message size, cap, pairs)
// on a log scale, one line per path with its own colour and marker, each
// point the median over the repetitions and a bar from min to max.

// PlotFile names the PNG of one metric of one experiment.
func PlotFile(e ExperimentInfo, m MetricInfo) string {
	return fmt.Sprintf("%s-%s.png", e.Name, m.Key)
}

// plotted lists the plots raw has data for, in report order.
func plotted(raw *Raw, rows []Row) []plotSpec {
	var out []plotSpec
	for _, e := range raw.Experiments {
		if e.X == "" {
			continue
		}
		for _, m := range e.Metrics {
			if m.Plot && hasPoints(rows, e, m) {
				out = append(out, plotSpec{e, m})
			}
		}
	}
	return out
}

type plotSpec struct {
	Exp    ExperimentInfo
	Metric MetricInfo
}

// hasPoints reports whether some path has two or more cases with a value:
// a plot of single points says nothing a table does not.
func hasPoints(rows []Row, e ExperimentInfo, m MetricInfo) bool {
	n := map[string]int{}
	for _, r := range rows {
		if r.Exp.Name == e.Name && r.X > 0 && r.Stats[m.Key].N > 0 {
			n[r.Path.Name]++
			if n[r.Path.Name] >= 2 {
				return true
			}
		}
	}
	return false
}

// RenderPlots writes every plot raw has data for into dir and returns the
// file names.
func RenderPlots(raw *Raw, dir string) ([]string, error) {
	rows := SummarizeRaw(raw)
	var files []string
	for _, ps := range plotted(raw, rows) {
		p, err := linePlot(raw, rows, ps)
		if err != nil {
			return nil, err
		}
		name := PlotFile(ps.Exp, ps.Metric)
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("save plot %s: %w", name, err)
		}
		files = append(files, name)
	}
	return files, nil
}

// linePlot draws one metric against the experiment's x, a line per path.
func linePlot(raw *Raw, rows []Row, ps plotSpec) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s (%s is better)", ps.Exp.Name, ps.Metric.Label, ps.Metric.better(ps.Exp))
	p.X.Label.Text = ps.Exp.X
	p.Y.Label.Text = ps.Metric.Label
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, xTicker{x: ps.Exp.X}
	if ps.Exp.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	// Higher-is-better lines climb, so their legend goes bottom right;
	// lower-is-better ones fall, so theirs goes top left.
	lower := ps.Metric.better(ps.Exp) == "lower"
	p.Legend.Top, p.Legend.Left = lower, lower
	for i, path := range raw.Paths {
		pts, errs := pathPoints(rows, ps, path.Name)
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s on %s: %w", ps.Metric.Label, path.Name, err)
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		points.Shape = plotutil.Shape(i)
		bars, err := plotter.NewYErrorBars(errs)
		if err != nil {
			return nil, fmt.Errorf("plot %s spread on %s: %w", ps.Metric.Label, path.Name, err)
		}
		bars.Color = plotutil.Color(i)
		p.Add(line, points, bars)
		p.Legend.Add(path.Name, line, points)
	}
	p.Add(plotter.NewGrid())
	if !ps.Exp.LogY {
		p.Y.Min = 0 // as the papers draw bandwidth and CPU: from zero
	}
	return p, nil
}

// pathPoints are one path's medians with their min–max spread.
type spreadPoints struct {
	plotter.XYs
	plotter.YErrors
}

func pathPoints(rows []Row, ps plotSpec, path string) (plotter.XYs, spreadPoints) {
	var pts plotter.XYs
	var sp spreadPoints
	for _, r := range rows {
		st := r.Stats[ps.Metric.Key]
		if r.Exp.Name != ps.Exp.Name || r.Path.Name != path || r.X <= 0 || st.N == 0 || st.Median <= 0 {
			continue
		}
		pts = append(pts, plotter.XY{X: r.X, Y: st.Median})
		sp.XYs = append(sp.XYs, plotter.XY{X: r.X, Y: st.Median})
		sp.YErrors = append(sp.YErrors, struct{ Low, High float64 }{st.Median - st.Min, st.Max - st.Median})
	}
	return pts, sp
}

// xTicker labels the x axis, named x: sizes in B/KiB/MiB at powers of 4
// or 16, other axes (cap, pairs) at 1-2-5 or powers of 2.
type xTicker struct{ x string }

func (t xTicker) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	switch {
	case strings.Contains(t.x, "size"):
		step := 4.0
		if hi/lo > 1<<12 { // 1 B to 1 MiB: every fourth power of 2 would crowd the axis
			step = 16
		}
		for v := 1.0; v <= hi*1.01; v *= step {
			if v >= lo/1.01 {
				ticks = append(ticks, plot.Tick{Value: v, Label: sizeName(int(v))})
			}
		}
	case t.x == capped.Info.X:
		for _, v := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100} {
			if v >= lo/1.01 && v <= hi*1.01 {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	default:
		for v := 1.0; v <= hi*1.01; v *= 2 {
			if v >= lo/1.01 {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.Itoa(int(math.Round(v)))})
			}
		}
	}
	return ticks
}
