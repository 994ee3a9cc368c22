package bench

import (
	"fmt"
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		xs       []float64
		want     Summary
		wantSpr  float64
		describe string
	}{
		{[]float64{3, 1, 2}, Summary{N: 3, Median: 2, Min: 1, Max: 3, Sum: 6}, 1, "odd count"},
		{[]float64{4, 1, 3, 2}, Summary{N: 4, Median: 2.5, Min: 1, Max: 4, Sum: 10}, 1.2, "even count: mean of the middle two"},
		{[]float64{7}, Summary{N: 1, Median: 7, Min: 7, Max: 7, Sum: 7}, 0, "one value"},
		{nil, Summary{}, 0, "no values"},
	} {
		got := Summarize(tc.xs)
		if got != tc.want {
			t.Errorf("%s: Summarize(%v) = %+v, want %+v", tc.describe, tc.xs, got, tc.want)
		}
		if sp := got.Spread(); math.Abs(sp-tc.wantSpr) > 1e-9 {
			t.Errorf("%s: spread %v, want %v", tc.describe, sp, tc.wantSpr)
		}
	}
	xs := []float64{3, 1, 2}
	Summarize(xs)
	if xs[0] != 3 {
		t.Error("Summarize reordered its input")
	}
}

func TestRatio(t *testing.T) {
	base := Summarize([]float64{10, 12, 14})
	if r := Ratio(Summarize([]float64{6}), base); r != 0.5 {
		t.Errorf("ratio = %v, want 0.5", r)
	}
	if r := Ratio(Summarize(nil), base); !math.IsNaN(r) {
		t.Errorf("ratio of no value = %v, want NaN", r)
	}
	if r := Ratio(base, Summarize(nil)); !math.IsNaN(r) {
		t.Errorf("ratio to no baseline = %v, want NaN", r)
	}
	if r := Ratio(base, Summarize([]float64{0})); !math.IsNaN(r) {
		t.Errorf("ratio to a zero baseline = %v, want NaN", r)
	}
}

func TestSchedule(t *testing.T) {
	paths, _ := SelectPaths([]string{"bridge", "host"})
	exps, _ := SelectExperiments([]string{"latency", "throughput", "cap"}, false)
	jobs := Schedule(exps, paths, 2, false, true)
	// warm-up: throughput on each path (sockperf warms up by itself; the
	// cap runs cross host only); then 2 rounds of (1 size + 1 throughput
	// case) x 2 paths.
	if len(jobs) != 2+2*2*2 {
		t.Fatalf("%d jobs", len(jobs))
	}
	var got []string
	for _, j := range jobs {
		got = append(got, j.Path.Name+"/"+j.Case.Name+"/"+string(rune('0'+j.Rep)))
	}
	want := []string{"host/128 KiB/0", "bridge/128 KiB/0",
		"host/16 B/1", "bridge/16 B/1", "host/128 KiB/1", "bridge/128 KiB/1",
		"host/16 B/2", "bridge/16 B/2", "host/128 KiB/2", "bridge/128 KiB/2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order:\n got %v\nwant %v", got, want)
		}
	}
}

// TestScheduleSweepsAndTransports: a sweep runs once per path and round
// for all its cases; an experiment runs only on the transports it can
// measure; a capped experiment stops at its repetitions.
func TestScheduleSweepsAndTransports(t *testing.T) {
	paths, _ := SelectPaths([]string{"host", "unix", "bridge", "freeflow", "mpi-shm", "machine"})
	exps, _ := SelectExperiments([]string{"limits", "pingpong", "netpipe", "idle", "mpi"}, true)
	count := map[string]int{}
	for _, j := range Schedule(exps, paths, 3, true, false) {
		if j.Exp.sweep() && j.Case.Name != sweepCase.Name {
			t.Errorf("%s scheduled per case (%s)", j.Exp.Info.Name, j.Case.Name)
		}
		count[j.Exp.Info.Name+"/"+j.Path.Name]++
	}
	want := map[string]int{
		"limits/machine": 3,
		"pingpong/host":  3, "pingpong/unix": 3, "pingpong/bridge": 3, "pingpong/freeflow": 3,
		"netpipe/host": 3, "netpipe/bridge": 3, "netpipe/freeflow": 3, // NPtcp speaks TCP only
		"idle/bridge": 1, "idle/freeflow": 1, // same-host containers, one repetition
		"mpi/bridge": 3, "mpi/freeflow": 3, "mpi/mpi-shm": 3,
	}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("jobs per experiment/path:\n got %v\nwant %v", count, want)
	}
}

func TestSelect(t *testing.T) {
	if _, err := SelectPaths([]string{"bridge", "rdma"}); err == nil {
		t.Error("unknown path accepted")
	}
	if _, err := SelectExperiments([]string{"nas"}, false); err == nil {
		t.Error("unknown experiment accepted")
	}
	ps, err := SelectPaths([]string{"vxlan", "host"})
	if err != nil || len(ps) != 2 || ps[0].Name != "host" {
		t.Errorf("SelectPaths keeps table order: %v %v", ps, err)
	}
	quick, _ := SelectExperiments(nil, true)
	var names []string
	for _, e := range quick {
		names = append(names, e.Info.Name)
	}
	if fmt.Sprint(names) != "[limits pingpong throughput connrate connrate-nolib late-connect tokio-echo uvloop-echo node-echo]" {
		t.Errorf("quick experiments: %v", names)
	}
	for _, g := range []string{SameHost, CrossHost} {
		n := 0
		for _, p := range Paths {
			if p.Group == g && p.Role == RoleBaseline {
				n++
			}
		}
		if n != 1 {
			t.Errorf("group %s has %d baselines, want 1", g, n)
		}
	}
}

func TestSizeName(t *testing.T) {
	for n, want := range map[int]string{16: "16 B", 1024: "1 KiB", 16384: "16 KiB", 1500: "1500 B", 1 << 20: "1 MiB"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q, want %q", n, got, want)
		}
	}
}
