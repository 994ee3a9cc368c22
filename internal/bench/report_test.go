package bench

import (
	"path/filepath"
	"strings"
	"testing"
)

func loadSmall(t *testing.T) *Raw {
	t.Helper()
	raw, err := LoadRaw("testdata/raw-small.json")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestSummarizeRawRatios(t *testing.T) {
	rows := SummarizeRaw(loadSmall(t))
	byKey := map[string]Row{}
	for _, r := range rows {
		byKey[r.Exp.Name+"/"+r.Path.Name] = r
	}
	host := byKey["latency/host"]
	// Warm-up (1000 µs) left out: median of 5, 6, 7.
	if st := host.Stats[mP50]; st.Median != 6 || st.Min != 5 || st.Max != 7 || st.N != 3 {
		t.Errorf("host p50 = %+v", st)
	}
	if r := host.Ratios[mP50]; r != 0.5 {
		t.Errorf("host/bridge ratio = %v, want 6/12 = 0.5", r)
	}
	bridge := byKey["throughput/bridge"]
	if bridge.Runs != 1 || bridge.Failed != 1 || len(bridge.Notes) != 2 {
		t.Errorf("bridge throughput runs %d failed %d notes %q", bridge.Runs, bridge.Failed, bridge.Notes)
	}
	if r := byKey["throughput/host"].Ratios[mGbps]; r != 2 {
		t.Errorf("host throughput ratio = %v, want 40/20 = 2", r)
	}
}

// TestSummarizeAbsentMetric: a metric a sample does not carry is not
// counted as 0 (a limits case has a round trip or a bandwidth, not both).
func TestSummarizeAbsentMetric(t *testing.T) {
	raw := loadSmall(t)
	raw.Samples = append(raw.Samples, Sample{Experiment: "latency", Case: "16 B", Path: "host", Rep: 4, Metrics: map[string]float64{mObs: 5000}})
	for _, r := range SummarizeRaw(raw) {
		if r.Exp.Name == "latency" && r.Path.Name == "host" {
			if st := r.Stats[mP50]; st.N != 3 || st.Min != 5 || r.Stats[mObs].N != 4 {
				t.Errorf("p50 %+v, round trips %+v: want the 3 samples that have a p50, 4 with round trips", st, r.Stats[mObs])
			}
		}
	}
}

func TestRenderMarkdown(t *testing.T) {
	md := RenderMarkdown(loadSmall(t))
	for _, want := range []string{
		"Machine: Test CPU @ 1.00GHz, 2 cores, Linux 6.1.0-test; load average 1.50 0.70 0.20 when the run started.",
		"| congestion control | cubic (asked: cubic; set per network namespace, machine default: bbr) |",
		"| 16 B | host (reference) | 6.00 (5.00–7.00) | 0.50 | 1 (ref) | 5000 | 3 |",
		"| 16 B | bridge (baseline) | 12.0 (10.0–14.0) | 1 (baseline) |",
		"`freeflow exec b1-cli-h1 -- sockperf pp -m 16`",
		// hostnet's group has no baseline in this run: no ratio, not 0 or Inf.
		"| 16 B | hostnet (reference) | 20.0 (20.0–20.0) | – |",
		"| 1 stream | bridge (baseline) | 20.0 (20.0–20.0) | 1 (baseline) | 0.50 | 3 | 1 (+1 failed) |",
		"- throughput 1 stream on bridge: rep 2 failed: iperf3 failed: unable to connect to server: Connection refused",
		"- latency 16 B on bridge: p50 µs spread 33% of the median",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
	if strings.Contains(md, "1000") {
		t.Error("warm-up sample leaked into the report")
	}
}

func TestRenderTable(t *testing.T) {
	tab := RenderTable(loadSmall(t))
	lines := strings.Split(tab, "\n")
	var lat string
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "latency 16 B p50") {
			lat = l
		}
	}
	if !strings.Contains(lat, "6.00 ×0.50") || !strings.Contains(lat, "12.0 !") {
		t.Errorf("latency line %q; want host 6.00 ×0.50 and bridge 12.0 flagged", lat)
	}
	if !strings.Contains(tab, "same host: bridge; cross host: none") {
		t.Errorf("table does not say the baselines:\n%s", tab)
	}
}

func TestDisplayCommand(t *testing.T) {
	script := "import sys\nprint('x')"
	got := displayCommand([]string{"nsenter", "--net=/run/netns/b-h1", "--", "/usr/bin/python3", "-c", script, "client", "10.0.0.1", "19300", "1"}, script)
	want := `nsenter --net=/run/netns/b-h1 -- /usr/bin/python3 -c "$(cat connrate.py)" client 10.0.0.1 19300 1`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := commandLine([]string{"sh", "-c", "a & b; it's"}); got != `sh -c 'a & b; it'\''s'` {
		t.Errorf("quoting: %s", got)
	}
}

func TestRawRoundTrip(t *testing.T) {
	raw := loadSmall(t)
	p := filepath.Join(t.TempDir(), "raw.json")
	if err := SaveRaw(p, raw); err != nil {
		t.Fatal(err)
	}
	again, err := LoadRaw(p)
	if err != nil {
		t.Fatal(err)
	}
	if RenderMarkdown(again) != RenderMarkdown(raw) {
		t.Error("a saved and reloaded raw.json renders differently")
	}
}

// TestHeadlineRatios: a candidate path is compared to its group's baseline
// and reference in the report's summary table, and its notes are flagged.
func TestHeadlineRatios(t *testing.T) {
	raw := loadSmall(t)
	raw.Paths = append(raw.Paths, PathInfo{Name: "freeflow", Group: SameHost, Role: RoleCandidate, Expect: "unix"})
	raw.Samples = append(raw.Samples,
		Sample{Experiment: "latency", Case: "16 B", Path: "freeflow", Rep: 1, Metrics: map[string]float64{mP50: 3, mObs: 5000}},
		Sample{Experiment: "latency", Case: "16 B", Path: "freeflow", Rep: 2, Metrics: map[string]float64{mP50: 3, mObs: 5000},
			Suspect: []string{"connections took path overlay (policy) ×1, expected unix"}})
	md := RenderMarkdown(raw)
	for _, want := range []string{
		"| figure | better | freeflow / bridge | freeflow / host |",
		"ref: the group's first reference path",
		// 3 µs against bridge's 12 and host's 6.
		"| latency 16 B p50 µs | lower | 0.25 ! | 0.50 ! |",
		"- latency 16 B on freeflow: rep 2: connections took path overlay (policy) ×1, expected unix",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
}

// TestGbpsVersusSameSize: a verbs bandwidth figure sits beside iperf3's at
// the same write size on every TCP path of its group, and only there.
func TestGbpsVersusSameSize(t *testing.T) {
	raw := &Raw{
		Experiments: []ExperimentInfo{
			{Name: "throughput", Metrics: throughputMetrics},
			{Name: "verbs-bw", Metrics: verbsBWMetrics, CPUVersus: "throughput"},
		},
		Paths: []PathInfo{
			{Name: "hostnet", Group: "cross host", Role: RoleReference},
			{Name: "freeflow-x", Group: "cross host"},
			{Name: "freeflow-verbs-x", Group: "cross host"},
			{Name: "bridge", Group: "same host", Role: RoleBaseline},
		},
	}
	add := func(exp, c, path string, gbps float64) {
		raw.Samples = append(raw.Samples, Sample{Experiment: exp, Case: c, Path: path, Rep: 1, Metrics: map[string]float64{mGbps: gbps}})
	}
	add("throughput", "64 KiB", "hostnet", 25)
	add("throughput", "64 KiB", "freeflow-x", 20)
	add("throughput", "64 KiB", "bridge", 99)
	add("throughput", "128 KiB", "hostnet", 35)
	add("verbs-bw", "64 KiB", "freeflow-verbs-x", 22.5)
	add("verbs-bw", "2 B", "freeflow-verbs-x", 0.01)
	md := RenderMarkdown(raw)
	want := "| verbs-bw 64 KiB | freeflow-verbs-x | 22.5 | throughput 64 KiB | hostnet 25.0 (×0.90); freeflow-x 20.0 (×1.12) |"
	if !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
	if strings.Contains(md, "verbs-bw 2 B |") || strings.Contains(md, "bridge 99") {
		t.Errorf("a size iperf3 did not run, or a path of another group, is in the comparison:\n%s", md)
	}
}
