package bench

import (
	"fmt"
	"slices"
)

// Scaling runs 1, 2, 4, 8 and 16 container pairs at once, each client in
// its own container talking to its own server container, and adds up what
// they achieve together. Host-network paths have one namespace per host,
// so they have no pairs to scale; freeflow-unix, the kernel channel
// FreeFlow falls back to, is left out to keep the full run in 20 minutes
// (its 32 containers and 8 cases).

// scalePairs are the pair counts measured; latency gets fewer points.
var (
	scalePairs        = []int{1, 2, 4, 8, 16}
	scaleLatencyPairs = []int{1, 4, 16}
)

func pairCases(bool) []Case { return casesForPairs(scalePairs) }

func casesForPairs(pairs []int) []Case {
	cs := make([]Case, len(pairs))
	for i, n := range pairs {
		cs[i] = Case{Name: fmt.Sprintf("%d pairs", n), Pairs: n, X: float64(n)}
		if n == 1 {
			cs[i].Name = "1 pair"
		}
	}
	return cs
}

var scaleThroughput = Experiment{
	Info: ExperimentInfo{Name: "scale-throughput", Better: "higher", X: "concurrent container pairs",
		Title: "Scaling: concurrent container pairs, one iperf3 stream each; aggregate Gbit/s and CPU",
		Metrics: append([]MetricInfo{
			{Key: mGbps, Label: "Gbit/s", Headline: true, Plot: true},
			{Key: mRetrans, Label: "retransmits", Sum: true},
		}, cpuMetrics...)},
	Server: iperfServer,
	Cases:  pairCases,
	Client: func(_ toolEnv, d dial, _ Case, seconds int) []string {
		return split("iperf3 -c %s -p %d -t %d -J", d.Addr, portIperf, seconds)
	},
	Parse: parseIperfSample,
	Combine: func(per []map[string]float64) map[string]float64 {
		return map[string]float64{mGbps: sumOf(per, mGbps), mRetrans: sumOf(per, mRetrans), mBytes: sumOf(per, mBytes)}
	},
	OnPath: scalablePath,
}

func scalablePath(p Path) bool { return containerPath(p) && !noShmPath(p) }

// scaleLatency uses ffmem's ping-pong rather than sockperf, whose runs
// cost 3 s more than they measure.
var scaleLatency = Experiment{
	Info: ExperimentInfo{Name: "scale-latency", Better: "lower", X: "concurrent container pairs", LogY: true,
		Title: "Scaling: concurrent container pairs, one 16 B ffmem ping-pong each; median of the pairs' p50, worst pair's p99 (one-way µs)",
		Metrics: []MetricInfo{
			{Key: mP50, Label: "p50 µs", Headline: true, Plot: true},
			{Key: mP99, Label: "p99 µs", Headline: true, Plot: true},
			{Key: mCPUTotal, Label: "CPU % of one core"},
		}},
	SelfWarming: true,
	UsesFFMem:   true,
	Server:      ffmemServer,
	Cases:       func(bool) []Case { return casesForPairs(scaleLatencyPairs) },
	Client: func(e toolEnv, d dial, _ Case, _ int) []string {
		return ffmemClient(e, d, "pingpong", "--sizes", "16", "--ms", "1000")
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		per, err := ParsePingpong(string(out))
		if err != nil {
			return nil, nil, err
		}
		m, ok := per[sizeName(16)]
		if !ok || len(per) != 1 {
			return nil, nil, fmt.Errorf("ffmem pingpong gave %d sizes, want the 16 B one", len(per))
		}
		return m, pingpongSuspect(m), nil
	},
	Combine: func(per []map[string]float64) map[string]float64 {
		var p50s, p99 []float64
		for _, m := range per {
			p50s, p99 = append(p50s, m[mP50]), append(p99, m[mP99])
		}
		return map[string]float64{mP50: Summarize(p50s).Median, mP99: slices.Max(p99), mObs: sumOf(per, mObs)}
	},
	OnPath: scalablePath,
}

func sumOf(per []map[string]float64, key string) float64 {
	s := 0.0
	for _, m := range per {
		s += m[key]
	}
	return s
}
