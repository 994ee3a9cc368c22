package bench

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/openmpi"
)

// NetPIPE measures a whole latency and bandwidth curve in one run: for
// each size it times nrepeat round trips, three trials, and reports the
// best trial's mean one-way time (no percentiles: pingpong has those).
//
// Why NPtcp "hangs" when driven naively: its receiver does not learn the
// sizes from the transmitter. Each side walks the size schedule its own
// -l, -u and -p (perturbation) options give, so a receiver started with
// other options (NPtcp's defaults are -p 3, upper bound 8 MiB) waits for
// sizes the transmitter never sends, and the transmitter blocks forever
// in read(). Only -n (repeats) is sent over. And the receiver serves one
// transmitter, then exits. So: identical -l/-u/-p on both sides, a
// receiver restarted after each run, the bench waiting until it listens
// again before the next client, and -o /dev/null (the default output file
// np.out in the working directory cannot be written in a container).

// netpipeArgs are the options both NetPIPE sides must share: 1 B to 1 MiB,
// every power of two and the midpoints, no perturbation.
const netpipeArgs = "-l 1 -u 1048576 -p 0"

// netpipeRepeats fixes the round trips per size and trial: NetPIPE's own
// choice (enough for 0.1 s per trial) takes 15 s per run on loopback.
const netpipeRepeats = 100

// netpipeSizes are the sizes the report keeps of NetPIPE's 40.
var netpipeSizes = []int{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20}

var netpipeMetrics = []MetricInfo{
	{Key: mAvg, Label: "latency µs", Headline: true, Plot: true},
	{Key: mGbps, Label: "Gbit/s", Headline: true, Better: "higher", Plot: true},
}

var netpipe = Experiment{
	Info: ExperimentInfo{Name: "netpipe", Better: "lower", X: "message size", LogY: true,
		Title:   fmt.Sprintf("NetPIPE NPtcp, 1 B to 1 MiB: one-way latency (best of 3 trials' mean over %d round trips) and bandwidth", netpipeRepeats),
		Metrics: netpipeMetrics},
	Server: func(toolEnv) Server {
		return Server{Port: portNetPIPE, Shell: fmt.Sprintf("while :; do NPtcp -P %d %s; sleep 0.1; done", portNetPIPE, netpipeArgs)}
	},
	Cases: func(bool) []Case { return sizeCases(netpipeSizes) },
	Client: func(_ toolEnv, d dial, _ Case, _ int) []string {
		return withStderr(split("NPtcp -h %s -P %d %s -n %d -o /dev/null", d.Addr, portNetPIPE, netpipeArgs, netpipeRepeats))
	},
	ParseSweep: func(_ toolEnv, out []byte) (map[string]map[string]float64, []string, error) {
		m, err := ParseNetPIPE(string(out))
		return m, nil, err
	},
	Restarts: true,
	Limit:    30 * time.Second,
}

// mpiBench runs NPopenmpi between two ranks in two containers over Open
// MPI's TCP transport (what FreeFlow sees) and, on the verbs paths,
// through UCX over the containers' virtual RDMA devices, and between two
// ranks in one container over Open MPI's shared memory (the HPC
// reference). mpirun
// runs in the client host's namespace and starts the ranks through
// `freeflow exec` (internal/openmpi); each rank is pinned like the bench's
// clients and servers, rank 0 (client container) to CPU 0, rank 1 to CPU 1.
var mpiBench = Experiment{
	Info: ExperimentInfo{Name: "mpi", Better: "lower", X: "message size", LogY: true,
		Title:   fmt.Sprintf("Open MPI between containers: NetPIPE NPopenmpi, 1 B to 1 MiB, one-way latency (best of 3 trials' mean over %d round trips) and bandwidth", netpipeRepeats),
		Metrics: netpipeMetrics},
	Server:     func(toolEnv) Server { return Server{} },
	Cases:      func(bool) []Case { return sizeCases(netpipeSizes) },
	Transports: []string{TransportTCP, TransportMPIShm, TransportVerbs},
	OnPath:     containerPath,
	Launcher:   true,
	Client: func(e toolEnv, d dial, _ Case, _ int) []string {
		return withStderr(mpirunArgs(e, d))
	},
	ParseSweep: func(_ toolEnv, out []byte) (map[string]map[string]float64, []string, error) {
		m, err := ParseNetPIPE(string(out))
		return m, nil, err
	},
	// Each orted connects to mpirun, which runs outside any container.
	LauncherFallback: "not-a-container",
	// A run takes 1 to 6 s; a hung job must not cost the full margin
	// three times over.
	Limit: 30 * time.Second,
}

// mpirunArgs is the mpirun command for d: one rank per container over
// TCP or UCX (verbs), or two ranks in one container over shared memory.
func mpirunArgs(e toolEnv, d dial) []string {
	np := split("NPopenmpi %s -n %d -o /dev/null", netpipeArgs, netpipeRepeats)
	rank0, rank1, transport := d.Hosts[0], d.Hosts[len(d.Hosts)-1], openmpi.TCP()
	switch d.Transport {
	case TransportMPIShm:
		// Both ranks in one container: it needs two slots.
		rank0, rank1, transport = d.Hosts[0]+":2", d.Hosts[0]+":2", openmpi.SharedMemory()
	case TransportVerbs:
		transport = openmpi.UCX()
	}
	argv := append([]string{"mpirun", "--host", strings.Join(slices.Compact([]string{rank0, rank1}), ","), "--bind-to", "none"},
		openmpi.Args(e.Tools+"/rsh")...)
	argv = append(argv, transport...)
	argv = append(append(argv, "-np", "1", "--host", rank0, "taskset", "-c", "0"), np...)
	return append(append(argv, ":", "-np", "1", "--host", rank1, "taskset", "-c", "1"), np...)
}

// withStderr runs argv with its stderr in its stdout: NetPIPE prints its
// results on stderr.
func withStderr(argv []string) []string {
	return []string{"sh", "-c", "exec " + commandLine(argv) + " 2>&1"}
}

var netpipeLineRE = regexp.MustCompile(`(?m)^\s*\d+:\s+(\d+) bytes\s+\d+ times -->\s+([0-9.]+) Mbps in\s+([0-9.]+) usec`)

// ParseNetPIPE reads NPtcp's or NPopenmpi's lines ("  9:  32 bytes  100
// times -->  30.94 Mbps in  7.89 usec"): per size, the one-way latency
// in µs and the bandwidth in Gbit/s. A run that stopped before 1 MiB is
// an error: NetPIPE stops early when a side failed.
func ParseNetPIPE(out string) (map[string]map[string]float64, error) {
	per := map[string]map[string]float64{}
	largest := 0
	for _, l := range netpipeLineRE.FindAllStringSubmatch(out, -1) {
		size, _ := strconv.Atoi(l[1])
		per[sizeName(size)] = map[string]float64{mAvg: atof(l[3]), mGbps: atof(l[2]) / 1000}
		largest = max(largest, size)
	}
	if largest < 1<<20 {
		return nil, fmt.Errorf("NetPIPE stopped at %d bytes, before 1 MiB: %s", largest, lastLines(strings.TrimSpace(out), 3))
	}
	return per, nil
}
