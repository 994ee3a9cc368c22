package bench

import (
	"fmt"
	"strings"
)

// The physical limits (the limits experiment) are quoted as the ceiling of
// the same-host paths: half a cache-line round trip is the floor of a
// one-way latency, and the two-copy shared-memory ring's bandwidth at a
// write size the ceiling of any socket-like channel moving that size.

// ceiling is one figure of a same-host experiment and the limit it is
// quoted against.
type ceiling struct {
	exp, caseName, metric string  // the compared figure
	label                 string  // e.g. "pingpong 1 B p50 µs"
	value                 float64 // the limit, in the figure's unit
	about                 string  // what the limit is
}

// ceilings pairs the limits of raw with the figures they bound.
func ceilings(raw *Raw, rows []Row) []ceiling {
	var out []ceiling
	if cl, ok := limitFigure(rows, "cache-line", mRTTns); ok {
		if cs := casesOf(raw, pingpong.Info.Name); len(cs) > 0 {
			out = append(out, ceiling{exp: pingpong.Info.Name, caseName: cs[0], metric: mP50,
				label: "pingpong " + cs[0] + " p50 µs", value: cl / 2 / 1000,
				about: fmt.Sprintf("half the cache-line round trip (%s ns)", formatValue(cl))})
		}
	}
	for _, c := range casesOf(raw, stream.Info.Name) {
		if gbs, ok := limitFigure(rows, fmt.Sprintf("ring, %s writes", c), mGBs); ok {
			out = append(out, ceiling{exp: stream.Info.Name, caseName: c, metric: mGbps,
				label: "stream " + c + " Gbit/s", value: gbs * 8,
				about: fmt.Sprintf("two-copy shm ring, %s writes (%s GB/s)", c, formatValue(gbs))})
		}
	}
	return out
}

// limitFigure is the best repetition of metric in the limits row whose
// case contains name: the limit is what the hardware did undisturbed;
// other work on a shared machine only ever makes it look lower, and most
// of all for these measurements, which spin on both CPUs at once.
func limitFigure(rows []Row, name, metric string) (float64, bool) {
	for _, r := range rows {
		if st := r.Stats[metric]; r.Exp.Name == limits.Info.Name && strings.Contains(r.Case, name) && st.N > 0 {
			if metric == mRTTns {
				return st.Min, true
			}
			return st.Max, true
		}
	}
	return 0, false
}

// writeCeilings quotes the same-host paths against the physical limits:
// each figure and its ratio to the limit.
func writeCeilings(b *strings.Builder, raw *Raw, rows []Row) {
	cs := ceilings(raw, rows)
	var paths []string
	for _, p := range raw.Paths {
		if p.Group == SameHost && hasCeilingRow(rows, cs, p.Name) {
			paths = append(paths, p.Name)
		}
	}
	if len(cs) == 0 || len(paths) == 0 {
		return
	}
	b.WriteString("## Ceilings\n\nThe same-host figures (medians) against this machine's physical limits (the best repetition in the limits table: " +
		"interference only lowers a limit), measured in the same run; × ceiling is the figure / the limit (latency: how many times the floor; " +
		"bandwidth: the share of the ceiling reached).\n\n")
	fmt.Fprintf(b, "| figure | ceiling | %s |\n|---|---|%s\n", strings.Join(paths, " | "), strings.Repeat("---|", len(paths)))
	for _, c := range cs {
		cells := make([]string, len(paths))
		for i, p := range paths {
			cells[i] = "–"
			if r, ok := findRow(rows, c.exp, c.caseName, p); ok && r.Stats[c.metric].N > 0 && c.value > 0 {
				v := r.Stats[c.metric].Median
				cells[i] = flagged(r, fmt.Sprintf("%s (×%s)", formatValue(v), formatRatio(v/c.value)))
			}
		}
		fmt.Fprintf(b, "| %s | %s: %s | %s |\n", c.label, formatValue(c.value), c.about, strings.Join(cells, " | "))
	}
	b.WriteString("\n")
}

// hasCeilingRow reports whether path has a figure compared to a ceiling.
func hasCeilingRow(rows []Row, cs []ceiling, path string) bool {
	for _, c := range cs {
		if r, ok := findRow(rows, c.exp, c.caseName, path); ok && r.Runs > 0 {
			return true
		}
	}
	return false
}
