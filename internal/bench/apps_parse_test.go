package bench

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
)

// The sample outputs were captured on this machine (Debian bookworm:
// redis 7.0, wrk 4.1, libmemcached-tools 1.1, PostgreSQL 15) on loopback.
func TestParseApps(t *testing.T) {
	for _, tc := range []struct {
		file  string
		parse func(string) (map[string]float64, error)
		want  map[string]float64
	}{
		{"redis-benchmark.csv", ParseRedisBenchmark, map[string]float64{"set_rps": 79051.38, "get_rps": 83333.34, "set_p99_ms": 0.383, "get_p99_ms": 0.343}},
		{"wrk.txt", ParseWrk, map[string]float64{"rps": 83684.59, "p50_ms": 0.164, "p99_ms": 0.373}},
		{"memaslap.txt", ParseMemaslap, map[string]float64{"ops": 40467}},
		{"pgbench-S.txt", ParsePgbench, map[string]float64{"tps": 19826.660898, "latency_ms": 0.202, "failed": 0}},
	} {
		m, err := tc.parse(string(readTestdata(t, tc.file)))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		for k, v := range tc.want {
			if got := m[k]; got < v*0.9999 || got > v*1.0001 {
				t.Errorf("%s: %s = %v, want %v", tc.file, k, got, v)
			}
		}
	}
}

func TestParseAppsFailures(t *testing.T) {
	if _, err := ParseRedisBenchmark("Could not connect to Redis at 10.0.0.1:19401: Connection refused\n"); err == nil {
		t.Error("redis-benchmark connection error parsed")
	}
	if _, err := ParseWrk("unable to connect to 10.0.0.1:19402 Connection refused\n"); err == nil {
		t.Error("wrk connection error parsed")
	}
	if _, err := ParseMemaslap("Run time: 2.0s Ops: 0 TPS: 0 Net_rate: 0.0M/s\n"); err == nil {
		t.Error("memaslap run without operations parsed")
	}
	if _, err := ParsePgbench("pgbench: error: connection to server failed\n"); err == nil {
		t.Error("pgbench connection error parsed")
	}
	m, err := ParseWrk(string(readTestdata(t, "wrk.txt")) + "  Socket errors: connect 0, read 2, write 0, timeout 1\nNon-2xx or 3xx responses: 4\n")
	if err != nil || m["errors"] != 7 {
		t.Errorf("wrk errors = %v (%v), want 7", m["errors"], err)
	}
}

// TestParseMemcachedLatency: ffmem memcached's line gives the figures; a
// run whose gets missed is flagged, and an error line is the run's error.
func TestParseMemcachedLatency(t *testing.T) {
	line := "memcached conns=16 requests=63674 misses=%d ops_s=63143 p50_us=230.392 p99_us=501.642 p999_us=1190.585 max_us=2449.247\n"
	m, suspect, err := memcachedLatency.Parse(toolEnv{}, []byte(fmt.Sprintf(line, 0)))
	if err != nil || m[mP50] != 230.392 || m[mP99] != 501.642 || m["ops"] != 63143 || len(suspect) != 0 {
		t.Errorf("metrics %v, suspect %q, %v", m, suspect, err)
	}
	if _, suspect, _ = memcachedLatency.Parse(toolEnv{}, []byte(fmt.Sprintf(line, 12))); len(suspect) != 1 ||
		!strings.Contains(suspect[0], "12 of 63674 requests were gets that missed") {
		t.Errorf("suspect %q: want the misses said", suspect)
	}
	if _, _, err := memcachedLatency.Parse(toolEnv{}, []byte("ffmem: no answer from memcached within 5000 ms\n")); err == nil {
		t.Error("an ffmem error line parsed")
	}
}

func TestCPUMetrics(t *testing.T) {
	a := parseCPUTimes(bufio.NewScanner(strings.NewReader(
		"cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\n")))
	b := parseCPUTimes(bufio.NewScanner(strings.NewReader(
		"cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 150 0 150 900 0 0 0 0 0 0\ncpu1 0 0 50 1150 0 0 50 0 0 0\n")))
	b.at = a.at.Add(2e9) // 2 s
	m := cpuMetricsBetween(a, b, pinning{on: true, clientCPU: 0, srv: 1}, 4e9)
	// cpu0: 100 busy of 200 ticks = 50 %; cpu1: 100 of 250 = 40 %;
	// total 200 of 450 ticks on 2 CPUs = 88.9 % of one CPU.
	if m[mCPUClient] != 50 || m[mCPUServer] != 40 {
		t.Errorf("client/server CPU %v/%v, want 50/40", m[mCPUClient], m[mCPUServer])
	}
	if tot := m[mCPUTotal]; tot < 88.8 || tot > 88.9 {
		t.Errorf("total CPU %v, want 88.9", tot)
	}
	// 0.889 CPU x 2 s = 1.78 CPU s for 4 GB.
	if g := m[mCPUPerGB]; g < 0.44 || g > 0.45 {
		t.Errorf("CPU s/GB %v, want 0.444", g)
	}
}

func TestFabricShaping(t *testing.T) {
	out := "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n" +
		"3: fab0    inet 10.99.0.11/24 brd 10.99.0.255 scope global fab0\\       valid_lft forever\n"
	if dev := fabricDev(out, "10.99.0.11"); dev != "fab0" {
		t.Errorf("fabric dev %q, want fab0", dev)
	}
	if dev := fabricDev(out, "10.99.0.1"); dev != "" {
		t.Errorf("prefix of another address matched: %q", dev)
	}
	got := strings.Join(tbfArgs("fab0", 2), " ")
	if got != "tc qdisc replace dev fab0 root tbf rate 2000mbit burst 2500000 latency 20ms" {
		t.Errorf("tbf: %s", got)
	}
}

func TestPathCheck(t *testing.T) {
	cs, err := ParseConns([]byte(`[
	  {"local":"10.244.1.3:4000","remote":"10.244.1.2:19111","local_container":"b-cli-h1-ff","remote_container":"b-srv-h1-ff","path":"unix","reason":""},
	  {"local":"10.244.1.2:19111","remote":"10.244.1.3:4000","local_container":"b-srv-h1-ff","remote_container":"b-cli-h1-ff","path":"unix","reason":""},
	  {"local":"10.244.1.9:5000","remote":"10.244.2.2:80","local_container":"other","remote_container":"","path":"overlay","reason":"peer is not a container"}]`))
	if err != nil {
		t.Fatal(err)
	}
	c := newPathCheck("unix")
	c.pairs[[2]string{"b-cli-h1-ff", "b-srv-h1-ff"}] = true
	if v := c.verdict(); !strings.Contains(v, "showed none") {
		t.Errorf("no connection seen must be suspect, got %q", v)
	}
	c.add(cs)
	if v := c.verdict(); v != "" {
		t.Errorf("all unix: verdict %q", v)
	}
	// A fast path with a reason (why not a faster one) is still that path.
	c.add([]connEntry{{LocalContainer: "b-cli-h1-ff", RemoteContainer: "b-srv-h1-ff", Path: "unix", Reason: "shm-off"}})
	if v := c.verdict(); v != "" {
		t.Errorf("unix with a reason: verdict %q", v)
	}
	c.add([]connEntry{{LocalContainer: "b-cli-h1-ff", RemoteContainer: "b-srv-h1-ff", Path: "overlay", Reason: "policy denies"}})
	if v := c.verdict(); v != "connections took path overlay (policy denies) ×1, expected unix" {
		t.Errorf("fallback verdict %q", v)
	}
}

func TestCounterVerdict(t *testing.T) {
	a, err := ParseStatusCounters([]byte(`{"hosts":[{"name":"h1","agent":{"connections":{"fast_path":5,"unix":4,"host_tcp":1,"fallback":0,"fallback_reasons":{},"live":3}}},
	  {"name":"h2","agent":{"connections":{"unix":0,"host_tcp":1,"fallback":1,"fallback_reasons":{"policy":1}}}}]}`))
	if err != nil || a.Paths["unix"] != 4 || a.Paths["host-tcp"] != 2 || a.Fallback != 1 || len(a.Paths) != 2 {
		t.Fatalf("sum %+v %v", a, err)
	}
	b := connCounters{Paths: map[string]uint64{"unix": 10, "host-tcp": 2}, Fallback: 1, Reasons: map[string]uint64{"policy": 1}}
	if v := counterVerdict(a, b, "unix", ""); v != "" {
		t.Errorf("unix gained, no fallback: %q", v)
	}
	if v := counterVerdict(a, b, "host-tcp", ""); !strings.Contains(v, "no host-tcp connection") || !strings.Contains(v, "unix +6") {
		t.Errorf("host-tcp not gained: %q", v)
	}
	b.Fallback, b.Reasons = 3, map[string]uint64{"policy": 3}
	if v := counterVerdict(a, b, "unix", ""); v != "2 connection ends fell back to the overlay (policy ×2), expected unix" {
		t.Errorf("fallback: %q", v)
	}
	// Connections to a launcher outside the containers (mpirun) are
	// expected on the overlay; any other fallback is not.
	b.Reasons["not-a-container"] = 2
	b.Fallback = 5
	if v := counterVerdict(a, b, "unix", "not-a-container"); v != "2 connection ends fell back to the overlay (policy ×2), expected unix" {
		t.Errorf("launcher fallbacks counted: %q", v)
	}
	b.Fallback, b.Reasons["policy"] = 3, 1
	if v := counterVerdict(a, b, "unix", "not-a-container"); v != "" {
		t.Errorf("only launcher fallbacks: %q", v)
	}
	if _, err := ParseStatusCounters([]byte(`{"hosts":[{"name":"h1"}]}`)); err == nil {
		t.Error("a host without agent answer passed")
	}
}

// TestCounterVerdictShm: a path the agent adds (shm) is counted without a
// change to the bench.
func TestCounterVerdictShm(t *testing.T) {
	st := func(shm, unix int) []byte {
		return []byte(fmt.Sprintf(`{"hosts":[{"name":"h1","agent":{"connections":{"fast_path":%[1]d,"shm":%[1]d,"unix":%[2]d,"host_tcp":0,
		  "fallback":0,"fallback_reasons":{},"not_shm_reasons":{"shm-off":%[2]d},"live":0,"shm_bytes":2113536}}}]}`, shm, unix))
	}
	a, _ := ParseStatusCounters(st(0, 0))
	b, err := ParseStatusCounters(st(2, 0))
	if err != nil || len(b.Paths) != 3 {
		t.Fatalf("paths %v (want shm, unix, host-tcp), %v", b.Paths, err)
	}
	if v := counterVerdict(a, b, "shm", ""); v != "" {
		t.Errorf("shm gained: %q", v)
	}
	c, _ := ParseStatusCounters(st(0, 2))
	if v := counterVerdict(a, c, "shm", ""); !strings.Contains(v, "no shm connection") || !strings.Contains(v, "unix +2") {
		t.Errorf("unix instead of shm: %q", v)
	}
}
