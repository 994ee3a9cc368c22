package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Case is one variant of an experiment: a message size, a bandwidth cap,
// a number of concurrent pairs, or just the one way the tool runs.
type Case struct {
	Name  string
	X     float64 // position on the plot's x axis; 0 = not plotted
	Size  int     // message size in bytes, where the tool takes one
	Cap   float64 // fabric bandwidth cap in Gbit/s (the cap experiment)
	Pairs int     // concurrent container pairs; 0 means 1
}

// pairs is how many client/server pairs the case runs at once.
func (c Case) pairs() int { return max(1, c.Pairs) }

// Server is one server program, started once in every server site and left
// running for the whole run.
type Server struct {
	Port int
	// Shell is one shell command. $D is a private, writable directory of
	// the site (a container's private /tmp, or a temporary directory made
	// for a host namespace) for config files and data. Daemons run in the
	// foreground.
	Shell string
}

// toolEnv is what commands and parsers need to know about the run.
type toolEnv struct {
	// Script is connrate.py's text, passed with python3 -c: containers
	// have a private /tmp and their own /run/freeflow, so a file path
	// that works on the host may not exist inside them.
	Script string
	CC     string // congestion control every sample should use; "" = unchecked
	// Tools is the run's tools directory (tools.go), at the same path on
	// the host and in every bench container: ffmem and the Open MPI
	// launch agent.
	Tools string
	Full  bool // the full run, not --quick
	// Missing says, per experiment that cannot run here, why (Prepare).
	Missing map[string]string
}

// ffmem is the path of the bench's own measuring program.
func (e toolEnv) ffmem() string { return e.Tools + "/ffmem" }

// dial is how a client reaches its server.
type dial struct {
	Addr      string // TCP: the server's IP; unix: the socket path
	Transport string
	// Hosts are the containers an Open MPI job's ranks run in, the
	// client's first (one for mpi-shm).
	Hosts []string
}

// Experiment is one kind of measurement: a server started once per server
// site, and a client run per case, path and repetition.
type Experiment struct {
	Info ExperimentInfo
	// Quick experiments are part of --quick (with their first case only
	// when full is false: Cases decides).
	Quick bool
	// SelfWarming experiments warm up on their own (sockperf discards its
	// first 400 ms), so the warm-up round skips them.
	SelfWarming bool
	// Server is the experiment's server; Port 0 = it needs none.
	Server func(e toolEnv) Server
	Cases  func(full bool) []Case
	Client func(e toolEnv, d dial, c Case, seconds int) []string
	// Parse turns one client's output into metrics and the reasons, if
	// any, to distrust them.
	Parse func(e toolEnv, out []byte) (map[string]float64, []string, error)
	// ParseSweep replaces Parse for sweeps: one client run measures every
	// case (NetPIPE's whole curve), so the run is scheduled once per path
	// and repetition, and its output gives metrics per case name. Cases
	// lists the cases kept (a NetPIPE run measures more sizes than the
	// report shows).
	ParseSweep func(e toolEnv, out []byte) (map[string]map[string]float64, []string, error)
	// Combine merges the metrics of concurrent pairs (scaling); nil for
	// experiments that run one pair.
	Combine func(per []map[string]float64) map[string]float64
	// Transports the experiment can measure; nil = TCP only.
	Transports []string
	// OnPath says whether the experiment applies to a path of a transport
	// it measures; nil = all of them.
	OnPath func(p Path) bool
	// Shaped experiments cap the fabric with tbf at Case.Cap while a
	// client runs.
	Shaped bool
	// MaxSeconds caps the run's seconds per client (0 = no cap): what
	// converges fast runs shorter, so the full run fits in 20 minutes.
	MaxSeconds int
	// Limit is how long a client may run before it is killed and its
	// sample failed; 0 = its seconds and clientMargin.
	Limit time.Duration
	// Reps caps the run's repetitions (0 = no cap), for long runs whose
	// figure barely varies (an idle connection's CPU).
	Reps int
	// DefaultCC runs the experiment under the machine's own default
	// congestion control instead of the run's (--cc).
	DefaultCC bool
	// Launcher runs the client command in the client host's namespace
	// rather than in the client container (mpirun, which starts the
	// ranks in the containers itself), unpinned: it pins each rank.
	Launcher bool
	// UsesFFMem experiments need bin/ffmem next to the freeflow binary.
	UsesFFMem bool
	// Restarts: the server serves one client, then its site's loop starts
	// it again; each client waits until it listens.
	Restarts bool
	// LauncherFallback is the overlay reason expected for connections
	// between the containers and a launcher outside them; the path check
	// ignores those.
	LauncherFallback string
	// Prepare readies what the experiment runs on this machine (builds or
	// writes its program into the tools directory, tools.go); an error
	// marks its rows as not run, with why, and the rest of the bench runs.
	Prepare func(ctx context.Context, tools string) error
	// CountsEnds adds to each sample on a checked FreeFlow path the
	// connection ends the agents decided during the run, on the path
	// checked and elsewhere.
	CountsEnds bool
	// FastShare adds to each sample on a checked FreeFlow path the share
	// of the connection ends the agents decided during the run that took
	// a fast path (any: shm, unix, host-tcp), in percent.
	FastShare bool
	// AgentCPU adds the CPU time the cluster's agents used while each
	// client ran (mAgentCPU): what a path costs beyond its two ends.
	AgentCPU bool
	// NoLibClient runs the client without the FreeFlow library (LD_PRELOAD
	// unset) in its container: the connection ends the agents answer are
	// the server's, and none may take a fast path.
	NoLibClient bool
}

// seconds is how long e's clients run when the run says base.
func (e Experiment) seconds(base int) int {
	if e.MaxSeconds > 0 {
		return min(base, e.MaxSeconds)
	}
	return base
}

// limit is how long e's client may run when the run says seconds.
func (e Experiment) limit(seconds int) time.Duration {
	if e.Limit > 0 {
		return e.Limit
	}
	return time.Duration(e.seconds(seconds))*time.Second + clientMargin
}

// applies reports whether e runs on p.
func (e Experiment) applies(p Path) bool {
	return slices.Contains(e.transports(), p.Transport) && (e.OnPath == nil || e.OnPath(p))
}

func (e Experiment) transports() []string {
	if e.Transports == nil {
		return []string{TransportTCP}
	}
	return e.Transports
}

// sweep reports whether one client run measures every case.
func (e Experiment) sweep() bool { return e.ParseSweep != nil }

// sweepCase stands for all of a sweep's cases in the schedule.
var sweepCase = Case{Name: "all cases"}

// jobCases are the cases the schedule runs: every case, or for a sweep
// one run that measures them all.
func (e Experiment) jobCases(full bool) []Case {
	if e.sweep() {
		return []Case{sweepCase}
	}
	return e.Cases(full)
}

// reps is how many repetitions e gets when the run says base.
func (e Experiment) reps(base int) int {
	if e.Reps > 0 {
		return min(base, e.Reps)
	}
	return base
}

// Experiments are the experiments the bench knows, in the order shown.
var Experiments = []Experiment{limits, pingpong, latency, netpipe, throughput, throughputDefaultCC, stream,
	capped, connRate, connRateNoLib, lateConnect, idle, scaleThroughput, scaleLatency, redisBench, nginxBench, memcachedBench, memcachedLatency, pgBench, mpiBench,
	tokioEcho, uvloopEcho, nodeEcho, verbsSendLat, verbsWriteLat, verbsWriteBW, verbsSendBW}

// SelectExperiments returns the named experiments in table order; empty
// names means all, or the quick ones when quick is set.
func SelectExperiments(names []string, quick bool) ([]Experiment, error) {
	if len(names) == 0 && quick {
		var out []Experiment
		for _, e := range Experiments {
			if e.Quick {
				out = append(out, e)
			}
		}
		return out, nil
	}
	return selectNamed(Experiments, names, func(e Experiment) string { return e.Info.Name }, "experiment")
}

// sizeCases makes one case per message size.
func sizeCases(sizes []int) []Case {
	cs := make([]Case, len(sizes))
	for i, s := range sizes {
		cs[i] = Case{Name: sizeName(s), Size: s, X: float64(s)}
	}
	return cs
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
