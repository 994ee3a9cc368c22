package bench

import (
	"fmt"
	"math"
	"strings"
)

// RenderMarkdown renders report.md from raw.json alone: machine, set-up,
// paths, then one table per experiment with the median, min–max and the
// ratio to the group's baseline, and the command behind every row.
func RenderMarkdown(raw *Raw) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# FreeFlow bench, %s\n\n", raw.Started.Format("2006-01-02 15:04 UTC"))
	writeMachine(&b, raw)
	writePaths(&b, raw)
	rows := SummarizeRaw(raw)
	for _, e := range raw.Experiments {
		writeExperiment(&b, raw, e, rows)
	}
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
	for _, srv := range s.Servers {
		fmt.Fprintf(b, "| server, in every server site | `%s` |\n", srv)
	}
	own := "given with --cluster"
	if s.OwnCluster {
		own = "brought up and removed by the bench"
	}
	fmt.Fprintf(b, "| cluster | %s (%s) |\n", s.Cluster, own)
	fmt.Fprintf(b, "| connection rate program | %s |\n", s.ConnRate)
	fmt.Fprintf(b, "| ratios | path median / baseline median within each group (%s) |\n\n", baselines(raw.Paths))
}

// ccSummary says which algorithm was used, or lists them if they differ.
func ccSummary(used map[string]string) string {
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
	fmt.Fprintf(b, "## Paths\n\n| path | group | role | server | client | client dials | what |\n|---|---|---|---|---|---|---|\n")
	for _, p := range raw.Paths {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", p.Name, p.Group, p.Role, p.Server, p.Client, p.Target, p.About)
	}
	b.WriteString("\n")
}

func writeExperiment(b *strings.Builder, raw *Raw, e ExperimentInfo, rows []Row) {
	fmt.Fprintf(b, "## %s\n\n%s is better.\n\n", e.Title, capitalize(e.Better))
	head := []string{"case", "path"}
	for _, m := range e.Metrics {
		if m.Headline {
			head = append(head, m.Label+" median (min–max)", "× baseline")
		} else if m.Sum {
			head = append(head, m.Label+" (total)")
		} else {
			head = append(head, m.Label+" (median)")
		}
	}
	head = append(head, "runs", "notes", "command")
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, r := range rows {
		if r.Exp.Name == e.Name {
			fmt.Fprintf(b, "| %s |\n", strings.Join(markdownCells(r), " | "))
		}
	}
	b.WriteString("\n")
}

func markdownCells(r Row) []string {
	cells := []string{r.Case, pathLabel(r.Path)}
	for _, m := range r.Exp.Metrics {
		st := r.Stats[m.Key]
		switch {
		case st.N == 0:
			cells = append(cells, "–")
			if m.Headline {
				cells = append(cells, "–")
			}
		case m.Headline:
			cells = append(cells, fmt.Sprintf("%s (%s–%s)", formatValue(st.Median), formatValue(st.Min), formatValue(st.Max)),
				ratioText(r, m.Key))
		case m.Sum:
			cells = append(cells, fmt.Sprintf("%.0f", st.Sum))
		default:
			cells = append(cells, formatValue(st.Median))
		}
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

// pathLabel marks the baseline and reference rows.
func pathLabel(p PathInfo) string {
	if p.Role == RoleCandidate {
		return p.Name
	}
	return fmt.Sprintf("%s (%s)", p.Name, p.Role)
}

func ratioText(r Row, key string) string {
	if r.Path.Role == RoleBaseline {
		return "1 (baseline)"
	}
	v, ok := r.Ratios[key]
	if !ok || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
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
