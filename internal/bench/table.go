package bench

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
)

// RenderTable renders the side-by-side terminal table: one line per
// headline figure, one column per network path, each cell the median and
// its ratio to the group's baseline; then the physical limits on a line
// of their own.
func RenderTable(raw *Raw) string {
	var b strings.Builder
	s := raw.Setup
	fmt.Fprintf(&b, "FreeFlow bench (%s): median of %d interleaved runs of %d s, congestion control %s, CPU pinning: %s\n",
		s.Mode, s.Reps, s.RunSeconds, ccSummary(s.CCUsed), s.Pinning)
	fmt.Fprintf(&b, "×N = ratio to the baseline (%s); %s, %d cores, Linux %s\n\n",
		baselines(raw.Paths), raw.Machine.CPU, raw.Machine.Cores, raw.Machine.Kernel)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head, groups := "\t", "\t"
	var grid []string
	for _, p := range raw.Paths {
		if inGrid(p) {
			head += p.Name + "\t"
			groups += p.Group + "\t"
			grid = append(grid, p.Name)
		}
	}
	fmt.Fprintln(tw, head)
	fmt.Fprintln(tw, groups)
	rows := SummarizeRaw(raw)
	for _, e := range raw.Experiments {
		for _, c := range casesOf(raw, e.Name) {
			for _, m := range e.Metrics {
				if cells, ok := tableCells(rows, e, c, m, grid); m.Headline && ok {
					fmt.Fprintf(tw, "%s %s %s (%s better)\t%s\n", e.Name, c, m.Label, m.better(e), cells)
				}
			}
		}
	}
	tw.Flush()
	if l := limitsLine(rows); l != "" {
		fmt.Fprintf(&b, "\nphysical limits (machine, best of the runs): %s\n", l)
	}
	if n := countSuspects(raw, rows); n > 0 {
		fmt.Fprintf(&b, "\n%d suspect figure(s): see \"Suspect figures\" in report.md\n", n)
	}
	return b.String()
}

// inGrid reports whether p gets a column: a measured network path.
func inGrid(p PathInfo) bool { return p.Group != OneMachine }

// tableCells are one figure's cells on the grid's paths; ok is false when
// no path has the figure.
func tableCells(rows []Row, e ExperimentInfo, c string, m MetricInfo, grid []string) (string, bool) {
	line, any := "", false
	for _, name := range grid {
		cell := "–"
		if r, ok := findRow(rows, e.Name, c, name); ok && r.Stats[m.Key].N > 0 {
			any = true
			cell = formatValue(r.Stats[m.Key].Median)
			if v, ok := r.Ratios[m.Key]; ok && !math.IsNaN(v) && r.Path.Role != RoleBaseline && !e.NoRatios {
				cell += " ×" + formatRatio(v)
			}
			if len(r.Notes) > 0 {
				cell += " !"
			}
		}
		line += cell + "\t"
	}
	return line, any
}

// limitsLine lists the physical limits, each case's best repetition.
func limitsLine(rows []Row) string {
	var parts []string
	for _, r := range rows {
		if r.Path.Group != OneMachine {
			continue
		}
		for _, m := range r.Exp.Metrics {
			if st := r.Stats[m.Key]; m.Headline && st.N > 0 {
				best := st.Max
				if m.better(r.Exp) == "lower" {
					best = st.Min
				}
				parts = append(parts, fmt.Sprintf("%s %s %s", r.Case, formatValue(best), m.Label))
			}
		}
	}
	return strings.Join(parts, "; ")
}

func countSuspects(raw *Raw, rows []Row) int {
	n := len(raw.Notes)
	for _, r := range rows {
		n += len(r.Notes)
	}
	return n
}
