package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WriteReport saves raw.json in dir and renders report.md and the plots
// from it; `bench --report` calls it again on a kept raw.json.
func WriteReport(dir string, raw *Raw) error {
	if err := SaveRaw(filepath.Join(dir, "raw.json"), raw); err != nil {
		return err
	}
	return RenderReport(dir, raw)
}

// RenderReport writes report.md and the PNG plots into dir.
func RenderReport(dir string, raw *Raw) error {
	if _, err := RenderPlots(raw, dir); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(RenderMarkdown(raw)), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// RenderMarkdown renders report.md from raw.json alone: machine, set-up,
// paths, then one table per experiment with the median, min–max and the
// ratio to the group's baseline, and the command behind every row.
func RenderMarkdown(raw *Raw) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# FreeFlow bench, %s\n\n", raw.Started.Format("2006-01-02 15:04 UTC"))
	writeMachine(&b, raw)
	writePaths(&b, raw)
	rows := SummarizeRaw(raw)
	writeHeadlines(&b, raw, rows)
	writeCeilings(&b, raw, rows)
	writeCPUVersus(&b, raw, rows)
	writeGbpsVersus(&b, raw, rows)
	for _, e := range raw.Experiments {
		writeExperiment(&b, raw, e, rows)
	}
	writePlots(&b, raw, rows)
	writeSuspects(&b, raw, rows)
	return b.String()
}

func writeMachine(b *strings.Builder, raw *Raw) {
	m, s := raw.Machine, raw.Setup
	fmt.Fprintf(b, "Machine: %s, %d cores, Linux %s; load average %.2f %.2f %.2f when the run started.\n\n",
		m.CPU, m.Cores, m.Kernel, m.Load[0], m.Load[1], m.Load[2])
	fmt.Fprintf(b, "| setting | value |\n|---|---|\n")
	fmt.Fprintf(b, "| mode | %s: %d repetitions of %d s per run |\n", s.Mode, s.Reps, s.RunSeconds)
	fmt.Fprintf(b, "| order | %s |\n", s.Order)
	fmt.Fprintf(b, "| warm-up | %s |\n", s.Warmup)
	fmt.Fprintf(b, "| congestion control | %s (asked: %s; set per network namespace, machine default: %s) |\n",
		ccSummary(s.CCUsed), s.CC, m.DefaultCC)
	if s.CCAllowed != "" {
		fmt.Fprintf(b, "| allowed congestion control | %s |\n", s.CCAllowed)
	}
	fmt.Fprintf(b, "| CPU pinning | %s |\n", s.Pinning)
	own := "given with --cluster"
	if s.OwnCluster {
		own = "brought up and removed by the bench"
	}
	if s.Cluster != "" {
		fmt.Fprintf(b, "| cluster | %s (%s) |\n", s.Cluster, own)
	}
	if s.MigrateCluster != "" {
		fmt.Fprintf(b, "| migration's cluster | %s |\n", s.MigrateCluster)
	}
	if s.KubeCluster != "" {
		fmt.Fprintf(b, "| Kubernetes' cluster | %s (brought up and removed by the bench) |\n", s.KubeCluster)
	}
	fmt.Fprintf(b, "| connection rate program | %s |\n", s.ConnRate)
	fmt.Fprintf(b, "| ratios | path median / baseline median within each group (%s); × ref: / the group's first reference path with a figure for the case (host networking for the TCP tools, mpi-shm for mpi) |\n\n", baselines(raw.Paths))
	if len(s.Servers) > 0 {
		b.WriteString("Servers, started once in every server site with `$D` a private directory, and left running:\n\n```sh\n")
		for _, srv := range s.Servers {
			fmt.Fprintf(b, "%s\n", srv)
		}
		b.WriteString("```\n\n")
	}
}

// ccSummary says which algorithm was used, or lists them if they differ.
func ccSummary(used map[string]string) string {
	if len(used) == 0 {
		return "not set: no path experiment ran (the Kubernetes nodes and the migration's containers keep their default)"
	}
	if u := uniformCC(used); u != "" {
		return u
	}
	var parts []string
	for _, k := range sortedKeys(used) {
		parts = append(parts, k+": "+used[k])
	}
	return "MIXED: " + strings.Join(parts, ", ")
}

func writePaths(b *strings.Builder, raw *Raw) {
	fmt.Fprintf(b, "## Paths\n\n| path | group | role | server | client | client dials | checked path | what |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range raw.Paths {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Name, p.Group, p.Role, p.Server, p.Client, p.Target, dash(p.Expect), p.About)
	}
	b.WriteString("\n")
}

func writeExperiment(b *strings.Builder, raw *Raw, e ExperimentInfo, rows []Row) {
	fmt.Fprintf(b, "## %s\n\n%s", e.Title, betterText(e))
	if e.CC != "" {
		fmt.Fprintf(b, "; TCP congestion control: %s", e.CC)
	}
	b.WriteString(".\n\n")
	head := []string{"case", "path"}
	for _, m := range e.Metrics {
		if m.Headline && e.NoRatios {
			head = append(head, m.Label+" median (min–max)")
		} else if m.Headline {
			head = append(head, m.Label+" median (min–max)", "× baseline", "× ref")
		} else if m.Sum {
			head = append(head, m.Label+" (total)")
		} else {
			head = append(head, m.Label+" (median)")
		}
	}
	if e.FallbackReasons {
		head = append(head, "overlay reasons (agents, total)")
	}
	head = append(head, "runs", "notes", "command")
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, r := range rows {
		if r.Exp.Name == e.Name && r.ran() {
			fmt.Fprintf(b, "| %s |\n", strings.Join(markdownCells(r), " | "))
		}
	}
	b.WriteString("\n")
}

func markdownCells(r Row) []string {
	cells := []string{r.Case, pathLabel(r.Path)}
	ratioCols := !r.Exp.NoRatios
	for _, m := range r.Exp.Metrics {
		st := r.Stats[m.Key]
		switch {
		case st.N == 0:
			cells = append(cells, "–")
			if m.Headline && ratioCols {
				cells = append(cells, "–", "–")
			}
		case m.Headline && !ratioCols:
			cells = append(cells, fmt.Sprintf("%s (%s–%s)", formatValue(st.Median), formatValue(st.Min), formatValue(st.Max)))
		case m.Headline:
			cells = append(cells, fmt.Sprintf("%s (%s–%s)", formatValue(st.Median), formatValue(st.Min), formatValue(st.Max)),
				ratioText(r, m.Key), refText(r, m.Key))
		case m.Sum:
			cells = append(cells, fmt.Sprintf("%.0f", st.Sum))
		default:
			cells = append(cells, formatValue(st.Median))
		}
	}
	if r.Exp.FallbackReasons {
		cells = append(cells, fallbackCell(r))
	}
	runs := fmt.Sprint(r.Runs)
	if r.Failed > 0 {
		runs += fmt.Sprintf(" (+%d failed)", r.Failed)
	}
	cmd := "–"
	if r.Command != "" {
		cmd = "`" + r.Command + "`"
	}
	return append(cells, runs, escapeCell(strings.Join(r.Notes, "; ")), cmd)
}

// fallbackCell lists the row's overlay reasons: "none" when the agents
// counted its ends and put none on the overlay, "–" when they were not
// counted (a path without FreeFlow).
func fallbackCell(r Row) string {
	switch {
	case len(r.Fallback) > 0:
		return reasonList(r.Fallback)
	case r.Stats[mOverlayEnds].N > 0:
		return "none"
	}
	return "–"
}

// pathLabel marks the baseline and reference rows.
func pathLabel(p PathInfo) string {
	if p.Role == RoleCandidate || p.Role == RoleMeasured {
		return p.Name
	}
	return fmt.Sprintf("%s (%s)", p.Name, p.Role)
}

// ratioText is the row's ratio to its group's baseline.
func ratioText(r Row, key string) string {
	v, ok := r.Ratios[key]
	return ratioCell(r.Path.Role == RoleBaseline, "1 (baseline)", v, ok)
}

// refText is the row's ratio to its reference (see refPath).
func refText(r Row, key string) string {
	v, ok := r.RefRat[key]
	return ratioCell(r.Path.Name == r.Ref, "1 (ref)", v, ok)
}

// ratioCell formats ratio v, or self on the row the ratio is taken against;
// a missing ratio (!ok or NaN) shows as a dash.
func ratioCell(isSelf bool, self string, v float64, ok bool) string {
	if isSelf {
		return self
	}
	if !ok || math.IsNaN(v) {
		return "–"
	}
	return formatRatio(v)
}

// writeGbpsVersus sets each verbs bandwidth figure (an experiment with a
// CPUVersus) beside that TCP experiment's at the same size, on every path
// of the same group: ib_write_bw 64 KiB over freeflow-verbs-x beside
// iperf3 -l 64K over hostnet, freeflow-x and vxlan.
func writeGbpsVersus(b *strings.Builder, raw *Raw, rows []Row) {
	var lines []string
	for _, r := range rows {
		if r.Exp.CPUVersus != "" && r.Stats[mGbps].N > 0 {
			lines = appendVersus(lines, raw, rows, r, mGbps, r.Exp.CPUVersus, r.Case, false)
		}
	}
	writeVersus(b, "Bandwidth: verbs against TCP at the same size", "Medians in Gbit/s: each verbs bandwidth figure beside iperf3's "+
		"throughput at the same write size in this run, on every TCP path of the same group; (×) is the verbs figure / the TCP one.",
		"Gbit/s", lines)
}

// writeCPUVersus sets each CPU s/GB taken against another experiment
// (ExperimentInfo.CPUVersus: a verbs sweep's) beside that experiment's on
// every path of the same group, e.g. ib_write_bw over freeflow-verbs-x
// beside iperf3 over hostnet, freeflow-x and vxlan.
func writeCPUVersus(b *strings.Builder, raw *Raw, rows []Row) {
	var lines []string
	for _, r := range rows {
		if r.Versus != "" {
			exp, c, _ := strings.Cut(r.Versus, " ")
			lines = appendVersus(lines, raw, rows, r, mCPUPerGB, exp, c, true)
		}
	}
	writeVersus(b, "CPU per GB: verbs against TCP", "All CPUs' busy seconds (/proc/stat) per GB moved, medians: a verbs bandwidth sweep's whole run "+
		"(every row's bytes, size × iterations, over the run's busy time; its largest sizes dominate both) beside iperf3's throughput "+
		"at its largest write size in this run, on every TCP path of the same group; (×) is the verbs figure / the TCP one. "+
		"perftest's client polls its completion queue for the whole run, iperf3 sleeps in the kernel.",
		"CPU s/GB", lines)
}

// appendVersus adds r's line of a versus table: its metric beside experiment
// exp's case c on every path of r's group that has it; none, a line only
// if keepAlone.
func appendVersus(lines []string, raw *Raw, rows []Row, r Row, metric, exp, c string, keepAlone bool) []string {
	v := r.Stats[metric].Median
	var cells []string
	for _, p := range raw.Paths {
		if t, ok := findRow(rows, exp, c, p.Name); ok && p.Group == r.Path.Group && t.Stats[metric].N > 0 {
			tv := t.Stats[metric].Median
			cells = append(cells, flagged(t, fmt.Sprintf("%s %s (×%s)", p.Name, formatValue(tv), formatRatio(v/tv))))
		}
	}
	if len(cells) == 0 && !keepAlone {
		return lines
	}
	return append(lines, fmt.Sprintf("| %s %s | %s | %s | %s %s | %s |", r.Exp.Name, r.Case, r.Path.Name,
		flagged(r, formatValue(v)), exp, c, strings.Join(cells, "; ")))
}

func writeVersus(b *strings.Builder, title, intro, unit string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "## %s\n\n%s\n\n", title, intro)
	fmt.Fprintf(b, "| verbs figure | path | %s | TCP figure | TCP paths: %s (verbs ×) |\n|---|---|---|---|---|\n", unit, unit)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
}

// writePlots embeds the plots RenderPlots draws.
func writePlots(b *strings.Builder, raw *Raw, rows []Row) {
	ps := plotted(raw, rows)
	if len(ps) == 0 {
		return
	}
	b.WriteString("## Plots\n\nMedian per case, bars from min to max over the repetitions.\n\n")
	for _, p := range ps {
		fmt.Fprintf(b, "![%s: %s](%s)\n\n", p.Exp.Name, p.Metric.Label, PlotFile(p.Exp, p.Metric))
	}
}

// writeHeadlines is the report's summary: each candidate path (FreeFlow)
// against its group's baseline overlay and reference, for every headline
// figure, measured side by side in this run.
func writeHeadlines(b *strings.Builder, raw *Raw, rows []Row) {
	var cands []PathInfo
	for _, p := range raw.Paths {
		if p.Role == RoleCandidate {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return
	}
	b.WriteString("## Headline ratios\n\nMedian of the candidate path / median of the compared path, same run. ")
	b.WriteString("`!` marks a figure with a note in \"Suspect figures\".\n\n| figure | better |")
	for _, c := range cands {
		fmt.Fprintf(b, " %s / %s | %s / %s |", c.Name, dash(groupPath(raw.Paths, c.Group, RoleBaseline)), c.Name, refsOf(rows, c))
	}
	fmt.Fprintf(b, "\n|---|---|%s\n", strings.Repeat("---|---|", len(cands)))
	for _, e := range raw.Experiments {
		if e.NoRatios {
			continue
		}
		for _, c := range casesOf(raw, e.Name) {
			for _, m := range e.Metrics {
				if m.Headline {
					writeHeadline(b, rows, e, c, m, cands)
				}
			}
		}
	}
	b.WriteString("\nref: the group's first reference path (in the paths table's order) with a figure for the case: host networking for the TCP tools, Open MPI's shared memory for mpi.\n\n")
}

// refsOf names the references a candidate's rows were compared to.
func refsOf(rows []Row, c PathInfo) string {
	var refs []string
	for _, r := range rows {
		if r.Path.Name == c.Name && r.Ref != "" && !slices.Contains(refs, r.Ref) {
			refs = append(refs, r.Ref)
		}
	}
	if len(refs) == 0 {
		return "ref"
	}
	return strings.Join(refs, " or ")
}

func writeHeadline(b *strings.Builder, rows []Row, e ExperimentInfo, c string, m MetricInfo, cands []PathInfo) {
	cells, versus := "", ""
	any := false
	for _, p := range cands {
		r, ok := findRow(rows, e.Name, c, p.Name)
		if !ok || !r.ran() {
			cells += " – | – |"
			continue
		}
		// A case that ran without this figure (a sweep's per-size rows and
		// its whole-sweep row carry different ones) has no line for it.
		any = any || r.Runs == 0 || r.Stats[m.Key].N > 0
		if r.Versus != "" && m.Key == mCPUPerGB {
			versus = " (against " + r.Versus + ")"
		}
		cells += fmt.Sprintf(" %s | %s |", flagged(r, ratioText(r, m.Key)), flagged(r, refText(r, m.Key)))
	}
	if any {
		fmt.Fprintf(b, "| %s %s %s%s | %s |%s\n", e.Name, c, m.Label, versus, m.better(e), cells)
	}
}

// flagged marks a ratio whose row has notes.
func flagged(r Row, ratio string) string {
	if len(r.Notes) > 0 && ratio != "–" {
		return ratio + " !"
	}
	return ratio
}

func findRow(rows []Row, exp, c, path string) (Row, bool) {
	for _, r := range rows {
		if r.Exp.Name == exp && r.Case == c && r.Path.Name == path {
			return r, true
		}
	}
	return Row{}, false
}

func dash(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// writeSuspects lists, in one place, everything that makes a figure doubtful.
func writeSuspects(b *strings.Builder, raw *Raw, rows []Row) {
	var lines []string
	lines = append(lines, raw.Notes...)
	for _, r := range rows {
		for _, n := range r.Notes {
			lines = append(lines, fmt.Sprintf("%s %s on %s: %s", r.Exp.Name, r.Case, r.Path.Name, n))
		}
	}
	if len(lines) == 0 {
		b.WriteString("## Suspect figures\n\nNone: no failed run, retransmit, lost message or wide spread.\n")
		return
	}
	b.WriteString("## Suspect figures\n\n")
	for _, l := range lines {
		fmt.Fprintf(b, "- %s\n", l)
	}
}

// betterText says which way is better, per metric when they differ.
func betterText(e ExperimentInfo) string {
	var per []string
	mixed := false
	for _, m := range e.Metrics {
		if m.Headline {
			per = append(per, m.Label+": "+m.better(e))
			mixed = mixed || m.better(e) != e.Better
		}
	}
	if mixed {
		return "Better: " + strings.Join(per, ", ")
	}
	return capitalize(e.Better) + " is better"
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// escapeCell keeps a table cell on one line and its pipes literal.
func escapeCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
