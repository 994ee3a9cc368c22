package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The sample outputs were captured from this machine's sockperf 3.7 and
// iperf3 3.12 on loopback.
func TestParseSockperf(t *testing.T) {
	for _, tc := range []struct {
		file          string
		p50, p99, obs float64
	}{
		{"sockperf-pp-16.txt", 8.091, 13.105, 31653},
		{"sockperf-pp-16k.txt", 0, 0, 0}, // checked for presence only
	} {
		m, err := ParseSockperf(string(readTestdata(t, tc.file)))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if m[mP50] <= 0 || m[mP99] < m[mP50] || m[mObs] <= 0 {
			t.Errorf("%s: implausible metrics %v", tc.file, m)
		}
		if tc.p50 != 0 && (m[mP50] != tc.p50 || m[mP99] != tc.p99 || m[mObs] != tc.obs) {
			t.Errorf("%s: got p50 %v p99 %v obs %v, want %v %v %v", tc.file, m[mP50], m[mP99], m[mObs], tc.p50, tc.p99, tc.obs)
		}
		if s := sockperfSuspect(m); len(s) != 0 {
			t.Errorf("%s: clean run flagged: %v", tc.file, s)
		}
	}
}

func TestParseSockperfFailure(t *testing.T) {
	_, err := ParseSockperf(string(readTestdata(t, "sockperf-pp-refused.txt")))
	if err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("want the connect error, got %v", err)
	}
	if _, err := ParseSockperf("sockperf: Test ended\n"); err == nil {
		t.Fatal("output without percentiles parsed without error")
	}
}

func TestSockperfSuspect(t *testing.T) {
	s := sockperfSuspect(map[string]float64{mObs: 10, mLost: 2})
	if len(s) != 2 {
		t.Fatalf("want lost-message and few-observations notes, got %v", s)
	}
}

func TestParseIperf3(t *testing.T) {
	r, err := ParseIperf3(readTestdata(t, "iperf3-client.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Metrics[mGbps]; got < 37.23 || got > 37.24 {
		t.Errorf("Gbit/s = %v, want 37.23 (receiver side)", got)
	}
	if r.Metrics[mBytes] <= 0 {
		t.Errorf("bytes received = %v; CPU per GB needs it", r.Metrics[mBytes])
	}
	if r.Metrics[mRetrans] != 1 || r.SenderCC != "bbr" || r.ReceiverCC != "bbr" {
		t.Errorf("retransmits %v, cc %s/%s; want 1, bbr/bbr", r.Metrics[mRetrans], r.SenderCC, r.ReceiverCC)
	}
	if r.Metrics[mCPUSender] < 98 || r.Metrics[mCPUReceiver] < 73 {
		t.Errorf("cpu %v/%v", r.Metrics[mCPUSender], r.Metrics[mCPUReceiver])
	}
	s := r.suspect("cubic")
	if len(s) != 2 || !strings.Contains(s[0], "1 retransmits") || !strings.Contains(s[1], "bbr/bbr, not cubic") {
		t.Errorf("suspect = %q", s)
	}
	if s := r.suspect("bbr"); len(s) != 1 {
		t.Errorf("matching cc still flagged: %q", s)
	}
}

func TestParseIperf3Failure(t *testing.T) {
	// iperf3 -J exits 0 here even when it cannot connect: the JSON says so.
	_, err := ParseIperf3(readTestdata(t, "iperf3-refused.json"))
	if err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("want the connect error, got %v", err)
	}
	if _, err := ParseIperf3([]byte("iperf3: error - unable to connect")); err == nil {
		t.Fatal("non-JSON output parsed without error")
	}
}

func TestParseConnRate(t *testing.T) {
	m, last, err := ParseConnRate(string(readTestdata(t, "connrate-client.txt")))
	if err != nil {
		t.Fatal(err)
	}
	if m[mConnRate] < 7492 || m[mConnRate] > 7493 || m[mConnErrors] != 0 || last != "" {
		t.Errorf("got %v %q", m, last)
	}
	if s := connrateSuspect(m, last); s != nil {
		t.Errorf("clean run flagged: %v", s)
	}
	_, _, err = ParseConnRate(string(readTestdata(t, "connrate-refused.txt")))
	if err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("want the connect error, got %v", err)
	}
	s := connrateSuspect(map[string]float64{mConnRate: 5, mConnErrors: 3}, "timed out")
	if len(s) != 1 || !strings.Contains(s[0], "3 failed connections (last: timed out)") {
		t.Errorf("suspect = %q", s)
	}
}

func TestMissingPorts(t *testing.T) {
	ss := "LISTEN 0      10           0.0.0.0:19111      0.0.0.0:*\n" +
		"LISTEN 0      4096               *:19201            *:*\n"
	got := missingPorts(ss, []int{19111, 19201, 19300})
	if len(got) != 1 || got[0] != 19300 {
		t.Fatalf("missing = %v, want [19300]", got)
	}
}

// TestPlanServers checks each server runs once per site, and that the
// pairs beyond the first run only what scaling needs.
func TestPlanServers(t *testing.T) {
	pl := plan(Experiments, Paths, toolEnv{Script: "print()"}, true)
	var ports []int
	for _, s := range pl.Servers {
		ports = append(ports, s.Port)
	}
	// limits and mpi need no server; pingpong, stream, idle and
	// scale-latency share ffmem's, connrate-nolib connrate's; late-connect
	// has its own (threaded).
	want := []int{portFFMem, portSockperf, portNetPIPE, portIperf, portConnRate, portLate, portRedis, portNginx, portMemcached, portPostgres,
		portTokioEcho, portUvloopEcho, portNodeEcho, portVerbsSendLat, portVerbsWriteLat, portVerbsWriteBW, portVerbsSendBW}
	if fmt.Sprint(ports) != fmt.Sprint(want) {
		t.Errorf("server ports = %v, want %v", ports, want)
	}
	if len(pl.Scaled) != 2 || pl.Scaled[0].Port != portIperf || pl.Scaled[1].Port != portFFMem {
		t.Errorf("scaled servers = %+v", pl.Scaled)
	}
	if pl.Pairs["bridge"] != 16 || pl.Pairs["host"] != 1 || pl.Pairs["freeflow-x"] != 16 || pl.Pairs["freeflow-unix"] != 1 {
		t.Errorf("pairs = %v", pl.Pairs)
	}
}
