package bench

import (
	"fmt"
	"strconv"
	"time"
)

// Ports the bench servers listen on, in every server site.
const (
	portSockperf   = 19111
	portFFMem      = 19151
	portNetPIPE    = 19161
	portIperf      = 19201
	portConnRate   = 19300
	portLate       = 19301
	portRedis      = 19401
	portNginx      = 19402
	portMemcached  = 19403
	portPostgres   = 19404
	portTokioEcho  = 19501
	portUvloopEcho = 19502
	portNodeEcho   = 19503
)

// sockperfSeconds is every sockperf run's length, whatever --duration
// says: sockperf sleeps 2 s after connecting, so each run costs 3 s more
// than this, and 600 ms measured after its own 400 ms warm-up already
// holds tens of thousands of round trips, enough for a stable p99.
const sockperfSeconds = 1

// sockperfMPS is the message rate sockperf is told to allow. Its ping-pong
// mode sizes its table of send times for 600 000 messages a second unless
// told otherwise, and stops with "_seqN > m_maxSequenceNo" on a path that
// goes faster: the shm channel does about 3.5 million round trips a second
// here. A ping-pong sends the next message only once the answer is back,
// so the rate paces nothing; the table takes about 140 MB more memory
// per second of sockperfSeconds.
const sockperfMPS = 5000000

var sockperfServer = func(toolEnv) Server {
	return Server{Port: portSockperf, Shell: fmt.Sprintf("exec sockperf sr --tcp -p %d", portSockperf)}
}

var iperfServer = func(toolEnv) Server {
	return Server{Port: portIperf, Shell: fmt.Sprintf("exec iperf3 -s -p %d", portIperf)}
}

var latency = Experiment{
	Info: ExperimentInfo{Name: "latency", Better: "lower", X: "message size", LogY: true,
		Title: "Latency: sockperf ping-pong over TCP, one-way µs (half the round trip)",
		Metrics: []MetricInfo{
			{Key: mP50, Label: "p50 µs", Headline: true, Plot: true},
			{Key: mP99, Label: "p99 µs", Headline: true, Plot: true},
			{Key: mObs, Label: "round trips"},
		}},
	SelfWarming: true,
	Server:      sockperfServer,
	// sockperf's runs cost 3 s more than they measure, so it measures the
	// sizes the shared-memory issue names (16 B, 1 KiB, 16 KiB) in a full
	// run and 16 B otherwise: the well-known cross-check of pingpong, which
	// covers 1 B to 1 MiB (sockperf takes 14 B to 64 KiB).
	Cases: func(full bool) []Case {
		if full {
			return sizeCases([]int{16, 1024, 16384})
		}
		return sizeCases([]int{16})
	},
	Client: func(_ toolEnv, d dial, c Case, _ int) []string {
		return split("sockperf pp --tcp -i %s -p %d -m %d -t %d --mps %d", d.Addr, portSockperf, c.Size, sockperfSeconds, sockperfMPS)
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParseSockperf(string(out))
		if err != nil {
			return nil, nil, err
		}
		return m, sockperfSuspect(m), nil
	},
}

// cpuMetrics are the /proc/stat figures every throughput-like experiment
// shows (see cpu.go).
var cpuMetrics = []MetricInfo{
	{Key: mCPUPerGB, Label: "CPU s/GB", Headline: true, Better: "lower", Plot: true},
	{Key: mCPUClient, Label: "client CPU %"},
	{Key: mCPUServer, Label: "server CPU %"},
}

var throughput = Experiment{
	Info: ExperimentInfo{Name: "throughput", Better: "higher", X: "write size (iperf3 -l)",
		Title:   "Throughput: iperf3, one TCP stream, Gbit/s received, by write size; CPU from /proc/stat",
		Metrics: throughputMetrics},
	Quick:  true,
	Server: iperfServer,
	Cases: func(full bool) []Case {
		if full {
			return sizeCases([]int{1024, 16384, 65536, 131072, 1 << 20}) // 64 KiB: beside verbs-bw's
		}
		return sizeCases([]int{131072}) // iperf3's default write size
	},
	Client: iperfClient,
	Parse:  parseIperfSample,
	Limit:  iperfLimit,
}

// iperfLimit bounds an iperf3 client run (1 to 2 s): a stalled data path
// leaves it waiting forever.
const iperfLimit = 12 * time.Second

// throughputDefaultCC is throughput again under the machine's default
// congestion control (bbr here), which the run otherwise replaces with
// --cc (cubic): bbr reads veth reordering as loss and halves some paths.
var throughputDefaultCC = Experiment{
	Info: ExperimentInfo{Name: "throughput-default-cc", Better: "higher", X: "write size (iperf3 -l)",
		Title:   "Throughput under the machine's default congestion control: iperf3, one TCP stream, Gbit/s received; CPU from /proc/stat",
		Metrics: throughputMetrics},
	Server:    iperfServer,
	Cases:     func(bool) []Case { return sizeCases([]int{131072, 1 << 20}) },
	Client:    iperfClient,
	Parse:     parseIperfSample,
	Limit:     iperfLimit,
	DefaultCC: true,
}

var throughputMetrics = append([]MetricInfo{
	{Key: mGbps, Label: "Gbit/s", Headline: true, Plot: true},
	{Key: mRetrans, Label: "retransmits", Sum: true},
}, cpuMetrics...)

func iperfClient(_ toolEnv, d dial, c Case, seconds int) []string {
	return split("iperf3 -c %s -p %d -t %d -l %d -J", d.Addr, portIperf, seconds, c.Size)
}

// capped is FreeFlow's figure 3: one stream's throughput and CPU when the
// fabric between the hosts is capped with tbf. Only cross-host paths use
// the fabric.
var capped = Experiment{
	Info: ExperimentInfo{Name: "cap", Better: "higher", X: "fabric cap, Gbit/s",
		Title: "Throughput under a bandwidth cap on the fabric (tbf on both hosts' fabric interfaces): iperf3, one stream, Gbit/s",
		Metrics: append([]MetricInfo{
			{Key: mGbps, Label: "Gbit/s", Headline: true, Plot: true},
			{Key: mRetrans, Label: "retransmits", Sum: true},
		}, cpuMetrics...)},
	Server: iperfServer,
	Cases: func(bool) []Case {
		var cs []Case
		for _, c := range []float64{1, 2, 5, 10} {
			cs = append(cs, Case{Name: strconv.FormatFloat(c, 'g', -1, 64) + " Gbit/s", Cap: c, X: c})
		}
		return cs
	},
	Client: func(_ toolEnv, d dial, _ Case, seconds int) []string {
		return split("iperf3 -c %s -p %d -t %d -J", d.Addr, portIperf, seconds)
	},
	// Retransmits are what a cap does to TCP, not a measuring error.
	Parse: func(e toolEnv, out []byte) (map[string]float64, []string, error) {
		r, err := ParseIperf3(out)
		if err != nil {
			return nil, nil, err
		}
		return r.Metrics, r.ccSuspect(e.CC), nil
	},
	OnPath: func(p Path) bool { return p.Group == CrossHost },
	Shaped: true,
	// Under a cap TCP settles within a fraction of a second.
	MaxSeconds: 1,
}

func parseIperfSample(e toolEnv, out []byte) (map[string]float64, []string, error) {
	r, err := ParseIperf3(out)
	if err != nil {
		return nil, nil, err
	}
	return r.Metrics, r.suspect(e.CC), nil
}

var connRate = Experiment{
	Info: ExperimentInfo{Name: "connrate", Better: "higher",
		Title: "Connection setup rate: connrate.py (connect, 1-byte request, 1-byte reply, close), connections/s",
		Metrics: []MetricInfo{
			{Key: mConnRate, Label: "conn/s", Headline: true},
			{Key: mConnErrors, Label: "failed", Sum: true},
		}},
	Quick: true,
	Server: func(e toolEnv) Server {
		return Server{Port: portConnRate, Shell: commandLine([]string{"exec", "/usr/bin/python3", "-c", e.Script, "server", "0.0.0.0", strconv.Itoa(portConnRate)})}
	},
	Cases: func(bool) []Case { return []Case{{Name: "1 client"}} },
	Client: func(e toolEnv, d dial, _ Case, seconds int) []string {
		return []string{"/usr/bin/python3", "-c", e.Script, "client", d.Addr, strconv.Itoa(portConnRate), strconv.Itoa(seconds)}
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, last, err := ParseConnRate(string(out))
		if err != nil {
			return nil, nil, err
		}
		return m, connrateSuspect(m, last), nil
	},
}

// connRateNoLib is connrate with a client that has no library (a static
// binary, a process without the preload) against a FreeFlow server, next
// to the same server run with --no-freeflow (bridge): a FreeFlow server
// must accept such clients as fast as a plain one (issue 13: at least
// 0.95× the bridge), so it must not wait for a CONNECT that never comes
// (its library tells from the SYN that the client has none, PROTOCOL.md
// "The SYN mark"). The reasons column says how the server's ends were
// decided, as its agent counts them.
var connRateNoLib = Experiment{
	Info: ExperimentInfo{Name: "connrate-nolib", Better: "higher", FallbackReasons: true,
		Title: "Connection setup rate, client without the library: connrate.py run with LD_PRELOAD unset against a server with it, connections/s",
		Metrics: []MetricInfo{
			{Key: mConnRate, Label: "conn/s", Headline: true},
			{Key: mConnErrors, Label: "failed", Sum: true},
			{Key: mOverlayEnds, Label: "overlay ends", Sum: true},
		}},
	Quick:  true,
	Server: connRate.Server,
	Cases:  connRate.Cases,
	Client: connRate.Client,
	Parse:  connRate.Parse,
	// Same host: across hosts the server's agent hears of a connection
	// only from the connector's agent, which a client without the library
	// never asks.
	OnPath:      func(p Path) bool { return p.Group == SameHost },
	NoLibClient: true,
}

// lateCount is how many connections one late-connect run makes: the
// issue's 1000 in the full run, fewer in the quick one (on a path where
// every ACCEPT waits out its 45 ms, 200 take some 10 s).
func lateCount(full bool) int {
	if full {
		return 1000
	}
	return 200
}

// lateConnect measures the share of connection ends the agents put on a
// fast path for a client that observes its non-blocking connects 100 ms
// late (the JVM's HttpClient does), 20 at a time, and the overlay reasons
// of the others, from the agents' counters. Its server answers each
// connection in a thread of its own: connrate's serial server would
// accept the next connection only after the previous client woke up,
// measuring a slow acceptor instead.
var lateConnect = Experiment{
	Info: ExperimentInfo{Name: "late-connect", Better: "higher", NoRatios: true, FallbackReasons: true,
		Title: "Client observing its connects 100 ms late: connrate.py client-late (non-blocking connect, 100 ms asleep, epoll, 1-byte request and reply), 20 in flight; share of connection ends on a fast path (agents' counters), ms per connection",
		Metrics: []MetricInfo{
			{Key: mFastShare, Label: "fast path %", Headline: true},
			{Key: mConnMs, Label: "ms per conn", Headline: true, Better: "lower"},
			{Key: mConnMsP99, Label: "p99 ms per conn", Better: "lower"},
			{Key: mConnErrors, Label: "failed", Sum: true},
			{Key: mOverlayEnds, Label: "overlay ends", Sum: true},
		}},
	Quick: true,
	Server: func(e toolEnv) Server {
		return Server{Port: portLate, Shell: commandLine([]string{"exec", "/usr/bin/python3", "-c", e.Script, "server-threads", "0.0.0.0", strconv.Itoa(portLate)})}
	},
	Cases: func(full bool) []Case { return []Case{{Name: fmt.Sprintf("%d conns", lateCount(full))}} },
	Client: func(e toolEnv, d dial, _ Case, _ int) []string {
		return []string{"/usr/bin/python3", "-c", e.Script, "client-late", d.Addr, strconv.Itoa(portLate), strconv.Itoa(lateCount(e.Full))}
	},
	Parse: connRate.Parse,
	// The share comes from the agents' counters: FreeFlow paths only,
	// same host and across hosts.
	OnPath:    func(p Path) bool { return p.Role == RoleCandidate },
	FastShare: true,
	// One run is the 1000 connections; on a path where each ACCEPT
	// waits 45 ms in turn it takes under a minute.
	Limit: 2 * time.Minute,
	Reps:  1,
}
