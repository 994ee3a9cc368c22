package bench

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
)

// RenderTable renders the side-by-side terminal table: one line per
// headline figure, one column per path, each cell the median and its ratio
// to the group's baseline.
func RenderTable(raw *Raw) string {
	var b strings.Builder
	s := raw.Setup
	fmt.Fprintf(&b, "FreeFlow bench (%s): median of %d interleaved runs of %d s, congestion control %s, CPU pinning: %s\n",
		s.Mode, s.Reps, s.RunSeconds, ccSummary(s.CCUsed), s.Pinning)
	fmt.Fprintf(&b, "×N = ratio to the baseline (%s); %s, %d cores, Linux %s\n\n",
		baselines(raw.Paths), raw.Machine.CPU, raw.Machine.Cores, raw.Machine.Kernel)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head, groups := "\t", "\t"
	for _, p := range raw.Paths {
		head += p.Name + "\t"
		groups += p.Group + "\t"
	}
	fmt.Fprintln(tw, head)
	fmt.Fprintln(tw, groups)
	rows := SummarizeRaw(raw)
	for _, e := range raw.Experiments {
		for _, c := range casesOf(raw, e.Name) {
			for _, m := range e.Metrics {
				if m.Headline {
					fmt.Fprintln(tw, tableLine(rows, e, c, m))
				}
			}
		}
	}
	tw.Flush()
	if n := countSuspects(raw, rows); n > 0 {
		fmt.Fprintf(&b, "\n%d suspect figure(s): see \"Suspect figures\" in report.md\n", n)
	}
	return b.String()
}

func tableLine(rows []Row, e ExperimentInfo, c string, m MetricInfo) string {
	line := fmt.Sprintf("%s %s %s (%s better)\t", e.Name, c, m.Label, m.better(e))
	for _, r := range rows {
		if r.Exp.Name != e.Name || r.Case != c {
			continue
		}
		st := r.Stats[m.Key]
		cell := "–"
		if st.N > 0 {
			cell = formatValue(st.Median)
			if v, ok := r.Ratios[m.Key]; ok && !math.IsNaN(v) && r.Path.Role != RoleBaseline {
				cell += fmt.Sprintf(" ×%.2f", v)
			}
			if len(r.Notes) > 0 {
				cell += " !"
			}
		}
		line += cell + "\t"
	}
	return line
}

func countSuspects(raw *Raw, rows []Row) int {
	n := len(raw.Notes)
	for _, r := range rows {
		n += len(r.Notes)
	}
	return n
}
