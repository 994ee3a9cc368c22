package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// Ports the bench servers listen on, in every server placement.
const (
	portSockperf = 19111
	portIperf    = 19201
	portConnRate = 19300
)

// Case is one variant of an experiment, e.g. one message size.
type Case struct {
	Name string
	Size int
}

// toolEnv is what commands and parsers need to know about the run.
type toolEnv struct {
	// Script is connrate.py's text, passed with python3 -c: containers
	// have a private /tmp and their own /run/freeflow, so a file path
	// that works on the host may not exist inside them.
	Script string
	CC     string // congestion control every sample should use; "" = unchecked
}

// Experiment is one kind of measurement: a server started once per server
// placement, and a client run per case, path and repetition.
type Experiment struct {
	Info ExperimentInfo
	// SelfWarming experiments warm up on their own (sockperf discards its
	// first 400 ms), so the warm-up round skips them.
	SelfWarming bool
	Server      func(e toolEnv) []string
	Cases       func(full bool) []Case
	Client      func(e toolEnv, target string, c Case, seconds int) []string
	// Parse turns the client's output into metrics and the reasons, if
	// any, to distrust them.
	Parse func(e toolEnv, out []byte) (map[string]float64, []string, error)
}

// Experiments are the experiments the bench knows, in the order shown.
var Experiments = []Experiment{latency, throughput, connRate}

var latency = Experiment{
	Info: ExperimentInfo{Name: "latency", Better: "lower",
		Title: "Latency: sockperf ping-pong over TCP, one-way µs (half the round trip)",
		Metrics: []MetricInfo{
			{Key: mP50, Label: "p50 µs", Headline: true},
			{Key: mP99, Label: "p99 µs", Headline: true},
			{Key: mObs, Label: "round trips"},
		}},
	SelfWarming: true,
	Server:      func(toolEnv) []string { return split("sockperf sr --tcp -p %d", portSockperf) },
	Cases: func(full bool) []Case {
		sizes := []int{16, 1024, 16384}
		if full {
			sizes = []int{16, 64, 256, 1024, 4096, 16384, 65536}
		}
		cs := make([]Case, len(sizes))
		for i, s := range sizes {
			cs[i] = Case{Name: sizeName(s), Size: s}
		}
		return cs
	},
	Client: func(_ toolEnv, target string, c Case, seconds int) []string {
		return split("sockperf pp --tcp -i %s -p %d -m %d -t %d", target, portSockperf, c.Size, seconds)
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParseSockperf(string(out))
		if err != nil {
			return nil, nil, err
		}
		return m, sockperfSuspect(m), nil
	},
}

var throughput = Experiment{
	Info: ExperimentInfo{Name: "throughput", Better: "higher",
		Title: "Throughput: iperf3, one TCP stream, Gbit/s received",
		Metrics: []MetricInfo{
			{Key: mGbps, Label: "Gbit/s", Headline: true},
			{Key: mRetrans, Label: "retransmits", Sum: true},
			{Key: mCPUSender, Label: "sender CPU %"},
			{Key: mCPUReceiver, Label: "receiver CPU %"},
		}},
	Server: func(toolEnv) []string { return split("iperf3 -s -p %d", portIperf) },
	Cases:  func(bool) []Case { return []Case{{Name: "1 stream"}} },
	Client: func(_ toolEnv, target string, _ Case, seconds int) []string {
		return split("iperf3 -c %s -p %d -t %d -J", target, portIperf, seconds)
	},
	Parse: func(e toolEnv, out []byte) (map[string]float64, []string, error) {
		r, err := ParseIperf3(out)
		if err != nil {
			return nil, nil, err
		}
		return r.Metrics, r.suspect(e.CC), nil
	},
}

var connRate = Experiment{
	Info: ExperimentInfo{Name: "connrate", Better: "higher",
		Title: "Connection setup rate: connrate.py (connect, 1-byte request, 1-byte reply, close), connections/s",
		Metrics: []MetricInfo{
			{Key: mConnRate, Label: "conn/s", Headline: true},
			{Key: mConnErrors, Label: "failed", Sum: true},
		}},
	Server: func(e toolEnv) []string {
		return []string{"/usr/bin/python3", "-c", e.Script, "server", "0.0.0.0", strconv.Itoa(portConnRate)}
	},
	Cases: func(bool) []Case { return []Case{{Name: "1 client"}} },
	Client: func(e toolEnv, target string, _ Case, seconds int) []string {
		return []string{"/usr/bin/python3", "-c", e.Script, "client", target, strconv.Itoa(portConnRate), strconv.Itoa(seconds)}
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, last, err := ParseConnRate(string(out))
		if err != nil {
			return nil, nil, err
		}
		return m, connrateSuspect(m, last), nil
	},
}

// SelectExperiments returns the named experiments in table order; empty
// names means all.
func SelectExperiments(names []string) ([]Experiment, error) {
	return selectNamed(Experiments, names, func(e Experiment) string { return e.Info.Name }, "experiment")
}

// sizeName writes a message size the way the report shows it.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// split formats a command line whose words contain no spaces.
func split(format string, a ...any) []string { return strings.Fields(fmt.Sprintf(format, a...)) }
