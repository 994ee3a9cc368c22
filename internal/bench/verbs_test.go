package bench

import (
	"bufio"
	"math"
	"strings"
	"testing"
)

// Shortened from real runs of perftest 4.5 between two FreeFlow containers.
const perftestLat = `
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       1000          0.15           62.01        0.22     	       0.29        	0.95   		0.40    		13.83  
 64      1000          0.16           10.01        0.23     	       0.25        	0.10   		0.41    		2.10   
---------------------------------------------------------------------------------------
`

const perftestBW = `
 local address: LID 0x10c QPN 0x000c PSN 0xe89872 RKey 0x823f1c4b VAddr 0x007f31b3c70000
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 64         5000             877.97             657.32 		   10.769565
 65536      5000             39842.97            38140.84		   0.610253
---------------------------------------------------------------------------------------
`

func TestParsePerftest(t *testing.T) {
	lat, err := ParsePerftest(perftestLat)
	if err != nil || len(lat) != 2 || lat["2 B"][mP50] != 0.22 || lat["2 B"][mP99] != 0.40 || lat["64 B"][mP50] != 0.23 {
		t.Fatalf("latency table: %v %v", lat, err)
	}
	bw, err := ParsePerftest(perftestBW)
	if err != nil || len(bw) != 3 || math.Abs(bw["64 KiB"][mGbps]-305.13) > 0.01 || bw["64 B"][mMpps] != 10.769565 {
		t.Fatalf("bandwidth table: %v %v", bw, err)
	}
	// 64 B x 5000 + 64 KiB x 5000.
	if got := bw[verbsWholeSweep]; len(got) != 1 || got[mBytes] != 64*5000+65536*5000 {
		t.Errorf("whole sweep: %v, want only its bytes, 328000000", got)
	}
	if _, ok := lat[verbsWholeSweep]; ok {
		t.Error("a latency table got a whole-sweep row")
	}
	if _, err := ParsePerftest("Did not detect devices\nUnable to find the Infiniband/RoCE device\n"); err == nil {
		t.Fatal("an output without a table parsed")
	}
}

// TestVerbsSweepCPUPerGB: a bandwidth sweep's CPU per GB is the whole
// run's busy CPU seconds over every row's bytes, on the whole-sweep row
// alone; the per-size rows, which share the run, get none.
func TestVerbsSweepCPUPerGB(t *testing.T) {
	j := Job{Exp: verbsWriteBW, Case: sweepCase, Path: Paths[0], Rep: 1}
	samples := sweepSamples(toolEnv{}, j, Sample{Experiment: "verbs-bw", Path: "freeflow-verbs-x", Rep: 1}, []byte(perftestBW), "")
	// The readings of TestCPUMetrics: 1.78 busy CPU seconds.
	a := parseCPUTimes(bufio.NewScanner(strings.NewReader(
		"cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\n")))
	b := parseCPUTimes(bufio.NewScanner(strings.NewReader(
		"cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 150 0 150 900 0 0 0 0 0 0\ncpu1 0 0 50 1150 0 0 50 0 0 0\n")))
	b.at = a.at.Add(2e9)
	addSweepCPU(samples, a, b, pinning{on: true, clientCPU: 0, srv: 1})
	whole := false
	for _, s := range samples {
		_, has := s.Metrics[mCPUPerGB]
		switch s.Case {
		case verbsWholeSweep:
			whole = true
			// 1.778 CPU s / 0.328 GB.
			if g := s.Metrics[mCPUPerGB]; math.Abs(g-5.42) > 0.01 || s.Metrics[mCPUClient] != 50 || s.X != 0 {
				t.Errorf("whole sweep: %+v, want 5.42 CPU s/GB, client CPU 50 %%, not plotted", s)
			}
		case "64 KiB":
			if has || s.Metrics[mGbps] == 0 {
				t.Errorf("64 KiB: %v, want its Gbit/s and no CPU per GB", s.Metrics)
			}
		default:
			if has {
				t.Errorf("%s: CPU per GB %v", s.Case, s.Metrics)
			}
		}
	}
	if !whole {
		t.Fatalf("no whole-sweep sample: %+v", samples)
	}
}

// TestVerbsCPUAgainstTCP: the whole sweep's CPU s/GB on a verbs path is
// compared to iperf3's throughput at its largest write size on the same
// group's baseline and reference, in the headline ratios and beside every
// TCP path's; sizes without the figure have no headline line for it.
func TestVerbsCPUAgainstTCP(t *testing.T) {
	raw := &Raw{
		Paths: []PathInfo{
			{Name: "vxlan", Group: CrossHost, Role: RoleBaseline},
			{Name: "hostnet", Group: CrossHost, Role: RoleReference},
			{Name: "freeflow-x", Group: CrossHost, Role: RoleCandidate},
			{Name: "freeflow-verbs-x", Group: CrossHost, Role: RoleCandidate},
		},
		Experiments: []ExperimentInfo{throughput.Info, verbsWriteBW.Info},
	}
	add := func(exp, c, path string, x float64, m map[string]float64) {
		raw.Samples = append(raw.Samples, Sample{Experiment: exp, Case: c, X: x, Path: path, Rep: 1, Metrics: m})
	}
	add("throughput", "128 KiB", "hostnet", 131072, map[string]float64{mGbps: 30, mCPUPerGB: 0.4})
	add("throughput", "1 MiB", "hostnet", 1<<20, map[string]float64{mGbps: 40, mCPUPerGB: 0.2})
	add("throughput", "1 MiB", "vxlan", 1<<20, map[string]float64{mGbps: 10, mCPUPerGB: 0.8})
	add("throughput", "1 MiB", "freeflow-x", 1<<20, map[string]float64{mGbps: 35, mCPUPerGB: 0.25})
	add("verbs-bw", "64 KiB", "freeflow-verbs-x", 65536, map[string]float64{mGbps: 31, mMpps: 0.06})
	add("verbs-bw", verbsWholeSweep, "freeflow-verbs-x", 0, map[string]float64{mBytes: 1e11, mCPUPerGB: 0.6})
	md := RenderMarkdown(raw)
	for _, want := range []string{
		// 0.6 against vxlan's 0.8 and hostnet's 0.2 at 1 MiB, not 128 KiB.
		"| verbs-bw whole sweep CPU s/GB (against throughput 1 MiB) | lower | – | – | 0.75 | 3.00 |",
		"| verbs-bw whole sweep | freeflow-verbs-x | 0.60 | throughput 1 MiB | vxlan 0.80 (×0.75); hostnet 0.20 (×3.00); freeflow-x 0.25 (×2.40) |",
		"| whole sweep | freeflow-verbs-x | – | – | – | – | – | – | – | 0.60 (0.60–0.60) | 0.75 | 3.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
	for _, unwanted := range []string{"verbs-bw 64 KiB CPU s/GB", "verbs-bw whole sweep Gbit/s"} {
		if strings.Contains(md, unwanted) {
			t.Errorf("report has a headline line %q of dashes\n%s", unwanted, md)
		}
	}
}
