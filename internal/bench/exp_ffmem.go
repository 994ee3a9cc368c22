package bench

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Experiments run with ffmem (tools/ffmem), the bench's own C program:
// the physical limits, and a ping-pong, stream and idle test that runs
// over TCP and over AF_UNIX alike, so the Unix-socket reference is
// measured by the same code as every network path.

// The sizes ffmem measures. pingpongSizes spans 1 B to 1 MiB (sockperf
// stops at 64 KiB); the ring sizes match the stream's, so each stream
// figure has its ceiling.
var (
	pingpongSizes      = []int{1, 64, 1024, 16384, 65536, 262144, 1 << 20}
	pingpongQuickSizes = []int{1, 1024, 65536, 1 << 20}
	streamSizes        = []int{1024, 16384, 131072, 1 << 20}
	memcpySizes        = []int{4096, 65536, 262144, 8 << 20, 128 << 20} // L1, L2 (the verbs target is at 64 KiB), L2, L3, DRAM here
	ringBytes          = 256 << 10                                      // each ring of the shm channel's test vector
)

// ffmem metrics beyond the shared ones.
const (
	mRTTns      = "rtt_ns"
	mGBs        = "gb_s"
	mCPUPerGBP  = "proc_cpu_s_per_gb" // client and server processes' CPU s per GB
	mIdleCPU    = "idle_cpu_ms"       // both processes' CPU ms over the idle time
	mIdleClient = "idle_client_cpu_ms"
	mIdleServer = "idle_server_cpu_ms"
)

var ffmemServer = func(e toolEnv) Server {
	return Server{Port: portFFMem, Shell: fmt.Sprintf(`exec %s serve --tcp %d --unix "$D/ffmem.sock"`, e.ffmem(), portFFMem)}
}

// ffmemSocket is where a server site's ffmem listens on AF_UNIX.
func ffmemSocket(dir string) string { return dir + "/ffmem.sock" }

// ffmemClient is an ffmem client command for d's transport.
func ffmemClient(e toolEnv, d dial, mode string, args ...string) []string {
	addr := []string{"--tcp", fmt.Sprintf("%s:%d", d.Addr, portFFMem)}
	if d.Transport == TransportUnix {
		addr = []string{"--unix", d.Addr}
	}
	return append(append([]string{e.ffmem(), mode}, addr...), args...)
}

func sizeList(sizes []int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

var socketTransports = []string{TransportTCP, TransportUnix}

var limits = Experiment{
	Info: ExperimentInfo{Name: "limits", Better: "higher", NoRatios: true,
		Title: "Physical limits of this machine (ffmem limits, no network): the ceiling every path is quoted against",
		Metrics: []MetricInfo{
			{Key: mRTTns, Label: "round trip ns", Headline: true, Better: "lower"},
			{Key: mGBs, Label: "GB/s", Headline: true},
		}},
	Quick:       true,
	SelfWarming: true,
	UsesFFMem:   true,
	Transports:  []string{TransportMemory},
	Server:      func(toolEnv) Server { return Server{} },
	Cases: func(bool) []Case {
		cs := []Case{{Name: "cache-line ping-pong, CPU 0 and 1"}}
		for _, n := range memcpySizes {
			cs = append(cs, Case{Name: "memcpy " + sizeName(n), Size: n})
		}
		for _, n := range streamSizes {
			cs = append(cs, Case{Name: fmt.Sprintf("two-copy shm ring, %s writes", sizeName(n)), Size: n})
		}
		return cs
	},
	Client: func(e toolEnv, _ dial, _ Case, _ int) []string {
		return split("%s limits --cpus 0,1 --ms 200 --memcpy %s --ring-sizes %s --ring %d",
			e.ffmem(), sizeList(memcpySizes), sizeList(streamSizes), ringBytes)
	},
	ParseSweep: func(_ toolEnv, out []byte) (map[string]map[string]float64, []string, error) {
		m, err := ParseLimits(string(out))
		return m, nil, err
	},
}

var pingpong = Experiment{
	Info: ExperimentInfo{Name: "pingpong", Better: "lower", X: "message size", LogY: true,
		Title: "Latency, 1 B to 1 MiB: ffmem ping-pong over TCP or a Unix socket, one-way µs (half the round trip), one connection per size",
		Metrics: []MetricInfo{
			{Key: mP50, Label: "p50 µs", Headline: true, Plot: true},
			{Key: mP99, Label: "p99 µs", Headline: true, Plot: true},
			{Key: mObs, Label: "round trips"},
		}},
	Quick:       true,
	SelfWarming: true,
	UsesFFMem:   true,
	Transports:  socketTransports,
	Server:      ffmemServer,
	Cases: func(full bool) []Case {
		if full {
			return sizeCases(pingpongSizes)
		}
		return sizeCases(pingpongQuickSizes)
	},
	Client: func(e toolEnv, d dial, _ Case, _ int) []string {
		sizes, ms := pingpongQuickSizes, "150"
		if e.Full {
			sizes, ms = pingpongSizes, "250"
		}
		return ffmemClient(e, d, "pingpong", "--sizes", sizeList(sizes), "--ms", ms)
	},
	ParseSweep: func(_ toolEnv, out []byte) (map[string]map[string]float64, []string, error) {
		per, err := ParsePingpong(string(out))
		if err != nil {
			return nil, nil, err
		}
		var suspect []string
		for _, c := range sortedKeys(per) {
			for _, s := range pingpongSuspect(per[c]) {
				suspect = append(suspect, c+": "+s)
			}
		}
		return per, suspect, nil
	},
}

var stream = Experiment{
	Info: ExperimentInfo{Name: "stream", Better: "higher", X: "write size",
		Title: "Stream: ffmem, one connection over TCP or a Unix socket, Gbit/s the server received, by write size; CPU of the two processes",
		Metrics: []MetricInfo{
			{Key: mGbps, Label: "Gbit/s", Headline: true, Plot: true},
			{Key: mCPUPerGBP, Label: "process CPU s/GB", Headline: true, Better: "lower", Plot: true},
			{Key: mCPUClient, Label: "client process CPU %"},
			{Key: mCPUServer, Label: "server process CPU %"},
		}},
	UsesFFMem:  true,
	Transports: socketTransports,
	Server:     ffmemServer,
	Cases:      func(bool) []Case { return sizeCases(streamSizes) },
	Client: func(e toolEnv, d dial, _ Case, _ int) []string {
		return ffmemClient(e, d, "stream", "--sizes", sizeList(streamSizes), "--ms", "500")
	},
	ParseSweep: func(_ toolEnv, out []byte) (map[string]map[string]float64, []string, error) {
		m, err := ParseStream(string(out))
		return m, nil, err
	},
}

// idleSeconds is how long the idle experiment keeps a connection idle.
const idleSeconds = 10

var idle = Experiment{
	Info: ExperimentInfo{Name: "idle", Better: "lower",
		Title: fmt.Sprintf("Idle connection: ffmem, one connection open and unused for %d s (client waiting in poll, server in read); CPU ms both processes used", idleSeconds),
		Metrics: []MetricInfo{
			{Key: mIdleCPU, Label: "CPU ms (both)", Headline: true},
			{Key: mIdleClient, Label: "client CPU ms"},
			{Key: mIdleServer, Label: "server CPU ms"},
		}},
	UsesFFMem: true,
	Server:    ffmemServer,
	Cases:     func(bool) []Case { return []Case{{Name: fmt.Sprintf("%d s", idleSeconds)}} },
	Client: func(e toolEnv, d dial, _ Case, _ int) []string {
		return ffmemClient(e, d, "idle", "--seconds", strconv.Itoa(idleSeconds))
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParseIdle(string(out))
		return m, nil, err
	},
	// The same-host container paths: bridge, and each FreeFlow channel.
	// A blocked connection costs nothing unless something spins, so one
	// repetition says it.
	OnPath: func(p Path) bool { return p.Group == SameHost && containerPath(p) },
	Reps:   1,
}

// ffmemRecord is one result line of ffmem: "KIND key=value ...".
type ffmemRecord struct {
	Kind string
	V    map[string]float64
}

// ParseFFMem reads ffmem's result lines; an error line ("ffmem: ...")
// is the run's error.
func ParseFFMem(out string) ([]ffmemRecord, error) {
	var recs []ffmemRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "ffmem: ") {
			return nil, fmt.Errorf("%s", line)
		}
		f := strings.Fields(line)
		if len(f) < 2 || !strings.Contains(f[1], "=") {
			continue
		}
		r := ffmemRecord{Kind: f[0], V: map[string]float64{}}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if n, err := strconv.ParseFloat(v, 64); ok && err == nil {
				r.V[k] = n
			}
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// ffmemKind returns the records of one kind, or an error naming it.
func ffmemKind(out, kind string) ([]ffmemRecord, error) {
	recs, err := ParseFFMem(out)
	if err != nil {
		return nil, err
	}
	var of []ffmemRecord
	for _, r := range recs {
		if r.Kind == kind {
			of = append(of, r)
		}
	}
	if len(of) == 0 {
		return nil, fmt.Errorf("ffmem printed no %s result: %s", kind, lastLines(strings.TrimSpace(out), 3))
	}
	return of, nil
}

// ParsePingpong reads `ffmem pingpong`: per size, the one-way median,
// p99 and mean in µs and the number of round trips.
func ParsePingpong(out string) (map[string]map[string]float64, error) {
	recs, err := ffmemKind(out, "pingpong")
	if err != nil {
		return nil, err
	}
	per := map[string]map[string]float64{}
	for _, r := range recs {
		if r.V["round_trips"] <= 0 {
			return nil, fmt.Errorf("ffmem pingpong: no round trip at size %.0f", r.V["size"])
		}
		per[sizeName(int(r.V["size"]))] = map[string]float64{
			mP50: r.V["p50_us"], mP99: r.V["p99_us"], mAvg: r.V["avg_us"], mObs: r.V["round_trips"]}
	}
	return per, nil
}

// pingpongSuspect flags a size with too few round trips for a p99.
func pingpongSuspect(m map[string]float64) []string {
	if m[mObs] < 100 {
		return []string{fmt.Sprintf("only %.0f round trips", m[mObs])}
	}
	return nil
}

// ParseStream reads `ffmem stream`: per size, Gbit/s received, and the
// two processes' CPU.
func ParseStream(out string) (map[string]map[string]float64, error) {
	recs, err := ffmemKind(out, "stream")
	if err != nil {
		return nil, err
	}
	per := map[string]map[string]float64{}
	for _, r := range recs {
		b, s := r.V["bytes"], r.V["seconds"]
		if b <= 0 || s <= 0 {
			return nil, fmt.Errorf("ffmem stream moved no data at size %.0f", r.V["size"])
		}
		per[sizeName(int(r.V["size"]))] = map[string]float64{
			mGbps: r.V["gbit_s"], mBytes: b,
			mCPUPerGBP: (r.V["client_cpu_s"] + r.V["server_cpu_s"]) / (b / 1e9),
			mCPUClient: 100 * r.V["client_cpu_s"] / s, mCPUServer: 100 * r.V["server_cpu_s"] / s,
		}
	}
	return per, nil
}

// ParseIdle reads `ffmem idle`.
func ParseIdle(out string) (map[string]float64, error) {
	recs, err := ffmemKind(out, "idle")
	if err != nil {
		return nil, err
	}
	v := recs[0].V
	return map[string]float64{mIdleCPU: v["client_cpu_ms"] + v["server_cpu_ms"],
		mIdleClient: v["client_cpu_ms"], mIdleServer: v["server_cpu_ms"]}, nil
}

// ParseLimits reads `ffmem limits` into the limits experiment's cases.
func ParseLimits(out string) (map[string]map[string]float64, error) {
	recs, err := ParseFFMem(out)
	if err != nil {
		return nil, err
	}
	per := map[string]map[string]float64{}
	for _, r := range recs {
		switch r.Kind {
		case "cacheline":
			per[fmt.Sprintf("cache-line ping-pong, CPU %.0f and %.0f", r.V["cpu_a"], r.V["cpu_b"])] = map[string]float64{mRTTns: r.V["rtt_ns"]}
		case "memcpy":
			per["memcpy "+sizeName(int(r.V["size"]))] = map[string]float64{mGBs: r.V["gb_s"]}
		case "ring":
			per[fmt.Sprintf("two-copy shm ring, %s writes", sizeName(int(r.V["size"])))] = map[string]float64{mGBs: r.V["gb_s"]}
		}
	}
	if len(per) == 0 {
		return nil, fmt.Errorf("ffmem limits printed no result: %s", lastLines(strings.TrimSpace(out), 3))
	}
	return per, nil
}
