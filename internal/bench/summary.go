package bench

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Row is one case of one experiment on one path, summarised over its
// repetitions (warm-up runs left out).
type Row struct {
	Exp     ExperimentInfo
	Case    string
	Path    PathInfo
	Stats   map[string]Summary // every metric, over the successful runs
	X       float64            // the case on the plots' x axis
	Ratios  map[string]float64 // headline metrics: median / the group baseline's median
	RefRat  map[string]float64 // headline metrics: median / the reference's median
	Ref     string             // the reference path RefRat compares to; "" = none
	Runs    int                // successful runs
	Failed  int
	Command string
	Notes   []string
	// Fallback sums the samples' overlay ends by reason
	// (ExperimentInfo.FallbackReasons).
	Fallback map[string]uint64
	// Versus is the other experiment's case the CPU s/GB ratios compare
	// to (ExperimentInfo.CPUVersus), e.g. "throughput 128 KiB"; "" = the
	// row's own experiment and case.
	Versus string
}

// ran reports whether the experiment ran this case on this path at all.
func (r Row) ran() bool { return r.Runs+r.Failed > 0 }

// spreadLimit is the (max-min)/median above which a figure is flagged.
const spreadLimit = 0.3

// Summarize turns raw samples into rows, in experiment, case, path order.
func SummarizeRaw(raw *Raw) []Row {
	var rows []Row
	for _, e := range raw.Experiments {
		for _, c := range casesOf(raw, e.Name) {
			for _, p := range raw.Paths {
				rows = append(rows, summarizeRow(raw, e, c, p))
			}
		}
	}
	for i := range rows {
		rows[i].Ratios = ratios(rows, rows[i], groupPath(raw.Paths, rows[i].Path.Group, RoleBaseline))
		rows[i].Ref = refPath(raw.Paths, rows, rows[i])
		rows[i].RefRat = ratios(rows, rows[i], rows[i].Ref)
		if rows[i].Exp.CPUVersus != "" {
			cpuVersus(raw.Paths, rows, &rows[i])
		}
	}
	return rows
}

// cpuVersus takes r's CPU s/GB ratios against the TCP experiment r's
// experiment names (ExperimentInfo.CPUVersus), which runs on other paths:
// its rows on r's group's baseline and first reference path with a
// figure, at its largest case (versusCase).
func cpuVersus(paths []PathInfo, rows []Row, r *Row) {
	c, ok := versusCase(rows, r.Exp.CPUVersus)
	if !ok || r.Stats[mCPUPerGB].N == 0 {
		return
	}
	r.Versus = r.Exp.CPUVersus + " " + c
	if b, ok := findRow(rows, r.Exp.CPUVersus, c, groupPath(paths, r.Path.Group, RoleBaseline)); ok && b.Stats[mCPUPerGB].N > 0 {
		r.Ratios[mCPUPerGB] = Ratio(r.Stats[mCPUPerGB], b.Stats[mCPUPerGB])
	}
	for _, p := range paths {
		if p.Group != r.Path.Group || p.Role != RoleReference {
			continue
		}
		if ref, ok := findRow(rows, r.Exp.CPUVersus, c, p.Name); ok && ref.Stats[mCPUPerGB].N > 0 {
			r.Ref = p.Name
			r.RefRat[mCPUPerGB] = Ratio(r.Stats[mCPUPerGB], ref.Stats[mCPUPerGB])
			return
		}
	}
}

// versusCase is the case of experiment exp with the largest x that has a
// CPU s/GB figure: the TCP write size closest to a verbs sweep's bytes,
// which its largest messages dominate.
func versusCase(rows []Row, exp string) (string, bool) {
	best, found := Row{}, false
	for _, r := range rows {
		if r.Exp.Name == exp && r.Stats[mCPUPerGB].N > 0 && (!found || r.X > best.X) {
			best, found = r, true
		}
	}
	return best.Case, found
}

// refPath is the reference r is compared to: the first reference path of
// its group, in table order, with a figure for r's case (host networking
// for the TCP tools, Open MPI's shared memory for mpi), or "".
func refPath(paths []PathInfo, rows []Row, r Row) string {
	for _, p := range paths {
		if p.Group != r.Path.Group || p.Role != RoleReference {
			continue
		}
		if ref, ok := findRow(rows, r.Exp.Name, r.Case, p.Name); ok && ref.Runs > 0 {
			return p.Name
		}
	}
	return ""
}

// casesOf lists an experiment's cases in the order they were first run.
func casesOf(raw *Raw, exp string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range raw.Samples {
		if s.Experiment == exp && !s.Warmup && !seen[s.Case] {
			seen[s.Case] = true
			out = append(out, s.Case)
		}
	}
	return out
}

func summarizeRow(raw *Raw, e ExperimentInfo, c string, p PathInfo) Row {
	r := Row{Exp: e, Case: c, Path: p, Stats: map[string]Summary{}, Fallback: map[string]uint64{}}
	values := map[string][]float64{}
	for _, s := range raw.Samples {
		if s.Experiment != e.Name || s.Case != c || s.Path != p.Name || s.Warmup {
			continue
		}
		if r.Command == "" {
			r.Command, r.X = s.Command, s.X
		}
		if s.Error != "" {
			r.Failed++
			r.Notes = append(r.Notes, fmt.Sprintf("rep %d failed: %s", s.Rep, firstLine(s.Error)))
			continue
		}
		r.Runs++
		for _, m := range e.Metrics {
			if v, ok := s.Metrics[m.Key]; ok { // a limits case has one of the two figures
				values[m.Key] = append(values[m.Key], v)
			}
		}
		for _, why := range s.Suspect {
			r.Notes = append(r.Notes, fmt.Sprintf("rep %d: %s", s.Rep, why))
		}
		for why, n := range s.Fallback {
			r.Fallback[why] += n
		}
	}
	for _, m := range e.Metrics {
		r.Stats[m.Key] = Summarize(values[m.Key])
		if sp := r.Stats[m.Key].Spread(); m.Headline && sp > spreadLimit {
			r.Notes = append(r.Notes, fmt.Sprintf("%s spread %.0f%% of the median", m.Label, 100*sp))
		}
	}
	return r
}

// ratios compares r's headline medians to those of path base.
func ratios(rows []Row, r Row, base string) map[string]float64 {
	out := map[string]float64{}
	for _, b := range rows {
		if b.Exp.Name != r.Exp.Name || b.Case != r.Case || b.Path.Name != base {
			continue
		}
		for _, m := range r.Exp.Metrics {
			if m.Headline {
				out[m.Key] = Ratio(r.Stats[m.Key], b.Stats[m.Key])
			}
		}
	}
	return out
}

// groupPath names the path of a group with role, or "" if none was run.
func groupPath(paths []PathInfo, group, role string) string {
	for _, p := range paths {
		if p.Group == group && p.Role == role {
			return p.Name
		}
	}
	return ""
}

// baselines says which path each group is compared to, e.g.
// "same host: bridge; cross host: vxlan".
func baselines(paths []PathInfo) string {
	groups := map[string]string{}
	for _, p := range paths {
		if _, ok := groups[p.Group]; !ok {
			groups[p.Group] = "none"
		}
		if p.Role == RoleBaseline {
			groups[p.Group] = p.Name
		}
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		if g != OneMachine { // the limits have no baseline to speak of
			names = append(names, g)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names))) // "same host" before "cross host"
	var parts []string
	for _, g := range names {
		parts = append(parts, g+": "+groups[g])
	}
	return strings.Join(parts, "; ")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// formatValue shows about three significant digits, and two of a small
// figure (1 B at 0.0012 Gbit/s), which must not read as 0.
func formatValue(v float64) string {
	switch {
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	case v != 0 && v > -0.01 && v < 0.01:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
	return fmt.Sprintf("%.2f", v)
}

// formatRatio shows a ratio with two decimals; two significant digits
// when it is below 0.1 (a 70 times faster path is 0.014, not 0.01), and
// about three when it is 10 or more.
func formatRatio(v float64) string {
	switch {
	case v > 0 && v < 0.1:
		return strconv.FormatFloat(v, 'g', 2, 64)
	case v >= 10:
		return formatValue(v)
	}
	return fmt.Sprintf("%.2f", v)
}
