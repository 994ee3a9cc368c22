package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderReportPlots renders the report and plots of a small run with
// sizes on two paths: every plot the report embeds exists and is a
// non-empty PNG, and `--report` (RenderReport) writes them again.
func TestRenderReportPlots(t *testing.T) {
	raw := loadSmall(t)
	raw.Experiments[0].X, raw.Experiments[0].LogY = "message size", true
	raw.Experiments[0].Metrics[0].Plot = true
	for _, size := range []int{1024, 65536} {
		for _, p := range []string{"host", "bridge"} {
			raw.Samples = append(raw.Samples, Sample{Experiment: "latency", Case: sizeName(size), X: float64(size), Path: p, Rep: 1,
				Command: "sockperf pp", Metrics: map[string]float64{mP50: float64(size) / 100, mP99: float64(size) / 50, mObs: 5000}})
		}
	}
	for i := range raw.Samples {
		if raw.Samples[i].Case == "16 B" {
			raw.Samples[i].X = 16
		}
	}
	dir := t.TempDir()
	if err := WriteReport(dir, raw); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := "![latency: p50 µs](latency-p50_us.png)"
	if !strings.Contains(string(md), want) {
		t.Errorf("report does not embed %s", want)
	}
	checkPNG(t, filepath.Join(dir, "latency-p50_us.png"))
	if _, err := os.Stat(filepath.Join(dir, "latency-p99_us.png")); err == nil {
		t.Error("a metric not marked Plot was plotted")
	}
	os.Remove(filepath.Join(dir, "latency-p50_us.png"))
	again, err := LoadRaw(filepath.Join(dir, "raw.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := RenderReport(dir, again); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, filepath.Join(dir, "latency-p50_us.png"))
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Errorf("%s: %d bytes, not a PNG plot", path, len(b))
	}
}
