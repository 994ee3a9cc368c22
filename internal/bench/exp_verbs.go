package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The virtual verbs device (issues 17 and 19, docs/VERBS.md): Debian's
// perftest between two FreeFlow containers over their ffv0 devices, on one
// host (path freeflow-verbs) and on two (freeflow-verbs-x). The same sizes
// over TCP are the pingpong and stream experiments' rows of the same run;
// the machine's memcpy is the limits experiment's.

// Ports of the perftest servers (their out-of-band exchange), one per tool.
const (
	portVerbsSendLat  = 18515
	portVerbsWriteLat = 18516
	portVerbsWriteBW  = 18517
	portVerbsSendBW   = 18518
)

// Verbs metrics beyond the shared ones.
const (
	mMpps     = "mpps"      // messages per second, millions
	mAgentCPU = "agent_cpu" // ms the agents' processes used during the client run
)

// verbsSizes are the sizes the tables keep of perftest's -a sweep (2 B to 8 MiB).
var verbsSizes = []int{2, 64, 1024, 16384, 65536, 1 << 20}

var verbsLatMetrics = []MetricInfo{
	{Key: mP50, Label: "typical µs", Headline: true, Plot: true},
	{Key: mP99, Label: "p99 µs", Headline: true, Plot: true},
	{Key: mAgentCPU, Label: "agent CPU ms per run"},
}

var verbsBWMetrics = append([]MetricInfo{
	{Key: mGbps, Label: "Gbit/s", Headline: true, Plot: true},
	{Key: mMpps, Label: "Mpps", Headline: true},
	{Key: mAgentCPU, Label: "agent CPU ms per run"},
}, cpuMetrics...)

// verbsWholeSweep is a bandwidth sweep's row of its own: its CPU per GB.
// /proc/stat is read around the whole client run, so the busy time cannot
// be split by size; it is set against every row's bytes (size x
// iterations) together, which the largest sizes dominate.
const verbsWholeSweep = "whole sweep"

var (
	verbsSendLat = verbsExperiment("verbs-lat", "ib_send_lat", portVerbsSendLat, "lower", verbsLatMetrics,
		"Verbs SEND/RECV latency, 2 B to 1 MiB: perftest ib_send_lat on the containers' virtual RDMA devices, one-way µs (typical, p99); TCP at the same sizes: pingpong")
	verbsWriteLat = verbsExperiment("verbs-write-lat", "ib_write_lat", portVerbsWriteLat, "lower", verbsLatMetrics,
		"Verbs RDMA WRITE latency, 2 B to 1 MiB: perftest ib_write_lat, the target polling memory, one-way µs (typical, p99)")
	verbsWriteBW = verbsExperiment("verbs-bw", "ib_write_bw", portVerbsWriteBW, "higher", verbsBWMetrics,
		"Verbs RDMA WRITE bandwidth and message rate, 2 B to 1 MiB: perftest ib_write_bw; TCP at similar sizes: stream; the machine's memcpy: limits")
	verbsSendBW = verbsExperiment("verbs-send-bw", "ib_send_bw", portVerbsSendBW, "higher", verbsBWMetrics,
		"Verbs SEND bandwidth and message rate, 2 B to 1 MiB: perftest ib_send_bw")
)

// verbsExperiment is perftest's tool on the verbs path: one -a sweep per
// run, server restarted after each client.
func verbsExperiment(name, tool string, port int, better string, metrics []MetricInfo, title string) Experiment {
	args := fmt.Sprintf("-a -F -p %d", port)
	info := ExperimentInfo{Name: name, Better: better, X: "message size", LogY: better == "lower", Title: title, Metrics: metrics}
	cases := sizeCases(verbsSizes)
	if better == "higher" {
		info.CPUVersus = throughput.Info.Name
		cases = append(cases, Case{Name: verbsWholeSweep}) // X 0: not plotted
	}
	return Experiment{
		Info:       info,
		Transports: []string{TransportVerbs},
		Server: func(toolEnv) Server {
			return Server{Port: port, Shell: verbsServerShell(tool+" "+args, port)}
		},
		Cases: func(bool) []Case { return cases },
		Client: func(_ toolEnv, d dial, _ Case, _ int) []string {
			return withStderr(split("%s %s %s", tool, args, d.Addr))
		},
		ParseSweep: func(_ toolEnv, out []byte) (map[string]map[string]float64, []string, error) {
			m, err := ParsePerftest(string(out))
			return m, nil, err
		},
		Restarts: true,
		AgentCPU: true,
		Limit:    90 * time.Second,
	}
}

// verbsServerShell serves one perftest client after another where the
// container has the device. Every bench site runs every server, and the
// bench waits until each listens: a site without the device (the bridge's
// containers, host namespaces) only holds the port, and no verbs client
// ever runs there.
func verbsServerShell(cmd string, port int) string {
	hold := fmt.Sprintf(`exec python3 -c 'import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", %d)); s.listen(); time.sleep(1e9)'`, port)
	return fmt.Sprintf("if [ -e /dev/infiniband/uverbs0 ]; then while :; do %s; sleep 0.05; done; else %s; fi", cmd, hold)
}

// ParsePerftest reads perftest's result table: latency rows (#bytes,
// #iterations, t_min, t_max, t_typical, t_avg, t_stdev, 99%, 99.9%) or
// bandwidth rows (#bytes, #iterations, BW peak, BW average MB/s, MsgRate
// Mpps), by message size. A bandwidth table adds the row verbsWholeSweep
// with the bytes all its rows moved (#bytes x #iterations each).
func ParsePerftest(out string) (map[string]map[string]float64, error) {
	per := map[string]map[string]float64{}
	var moved float64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 && len(f) != 9 {
			continue
		}
		v := make([]float64, len(f))
		ok := true
		for i, s := range f {
			var err error
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				ok = false
				break
			}
		}
		if !ok || v[0] < 1 || v[1] < 1 {
			continue
		}
		name := sizeName(int(v[0]))
		if len(f) == 9 {
			per[name] = map[string]float64{mP50: v[4], mP99: v[7]}
		} else {
			per[name] = map[string]float64{mGbps: v[3] * 8 * 1e6 / 1e9, mMpps: v[4]}
			moved += v[0] * v[1]
		}
	}
	if len(per) == 0 {
		return nil, fmt.Errorf("perftest printed no result row")
	}
	if moved > 0 {
		per[verbsWholeSweep] = map[string]float64{mBytes: moved}
	}
	return per, nil
}

// agentCPUms is the CPU time, in ms, the freeflowd processes of cluster
// have used (user + system), from /proc.
func agentCPUms(cluster string) (float64, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	var ticks float64
	found := false
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.HasSuffix(strings.SplitN(string(cmd), "\x00", 2)[0], "freeflowd") ||
			!strings.Contains(string(cmd), "\x00--cluster\x00"+cluster+"\x00") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis; utime and stime are fields 14 and 15.
		rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(rest) < 13 {
			continue
		}
		u, _ := strconv.ParseFloat(rest[11], 64)
		s, _ := strconv.ParseFloat(rest[12], 64)
		ticks += u + s
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no freeflowd of cluster %s in /proc", cluster)
	}
	return ticks * 1000 / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times on Linux.
const clockTicks = 100
