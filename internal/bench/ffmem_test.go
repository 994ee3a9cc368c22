package bench

import (
	"strings"
	"testing"
)

// The ffmem sample outputs were captured from tools/ffmem on this machine:
// limits with the bench's arguments, pingpong over a Unix socket, stream
// over TCP loopback, idle for 2 s.

func TestParseLimits(t *testing.T) {
	per, err := ParseLimits(string(readTestdata(t, "ffmem-limits.txt")))
	if err != nil {
		t.Fatal(err)
	}
	// Every case the limits experiment shows, and nothing else.
	cases := limits.Cases(true)
	if len(per) != len(cases) {
		t.Errorf("%d cases parsed, want %d: %v", len(per), len(cases), per)
	}
	for _, c := range cases {
		if _, ok := per[c.Name]; !ok {
			t.Errorf("no figure for %q", c.Name)
		}
	}
	if got := per["cache-line ping-pong, CPU 0 and 1"][mRTTns]; got != 215.4 {
		t.Errorf("cache-line round trip %v ns, want 215.4", got)
	}
	if got := per["memcpy 128 MiB"][mGBs]; got != 4.60 {
		t.Errorf("memcpy 128 MiB %v GB/s, want 4.60", got)
	}
	if got := per["two-copy shm ring, 16 KiB writes"][mGBs]; got != 9.35 {
		t.Errorf("ring 16 KiB %v GB/s, want 9.35", got)
	}
	if _, err := ParseLimits("ffmem: limits needs CPUs 0 and 1; this machine has 1\n"); err == nil ||
		!strings.Contains(err.Error(), "this machine has 1") {
		t.Errorf("ffmem's error not passed on: %v", err)
	}
	if _, err := ParseLimits(""); err == nil {
		t.Error("empty output parsed")
	}
}

func TestParsePingpong(t *testing.T) {
	per, err := ParsePingpong(string(readTestdata(t, "ffmem-pingpong.txt")))
	if err != nil {
		t.Fatal(err)
	}
	if len(per) != len(pingpongSizes) {
		t.Errorf("%d sizes, want %d", len(per), len(pingpongSizes))
	}
	m := per["1 MiB"]
	if m[mP50] != 203.534 || m[mP99] != 248.576 || m[mObs] != 600 || m[mAvg] != 208.435 {
		t.Errorf("1 MiB: %v", m)
	}
	for c, m := range per {
		if m[mP99] < m[mP50] || len(pingpongSuspect(m)) != 0 {
			t.Errorf("%s: implausible or flagged: %v", c, m)
		}
	}
	if s := pingpongSuspect(map[string]float64{mObs: 20}); len(s) != 1 {
		t.Errorf("20 round trips not flagged: %v", s)
	}
	if _, err := ParsePingpong("stream size=1 bytes=1\n"); err == nil {
		t.Error("output without pingpong lines parsed")
	}
	if _, err := ParsePingpong("pingpong size=16 round_trips=0 p50_us=0\n"); err == nil {
		t.Error("a size without round trips parsed")
	}
}

func TestParseStream(t *testing.T) {
	per, err := ParseStream(string(readTestdata(t, "ffmem-stream.txt")))
	if err != nil {
		t.Fatal(err)
	}
	m := per["16 KiB"]
	if m[mGbps] != 23.487 {
		t.Errorf("16 KiB: %v Gbit/s, want 23.487", m[mGbps])
	}
	// (0.1755 + 0.2930) CPU s for 1.471 GB.
	if g := m[mCPUPerGBP]; g < 0.318 || g > 0.319 {
		t.Errorf("process CPU s/GB %v, want 0.318", g)
	}
	if c := m[mCPUClient]; c < 35 || c > 35.1 {
		t.Errorf("client CPU %v %%, want 35.0", c)
	}
	if _, err := ParseStream("stream size=1024 bytes=0 seconds=0.5 gbit_s=0\n"); err == nil {
		t.Error("a stream that moved nothing parsed")
	}
}

func TestParseIdle(t *testing.T) {
	m, err := ParseIdle(string(readTestdata(t, "ffmem-idle.txt")))
	if err != nil {
		t.Fatal(err)
	}
	if m[mIdleClient] != 0.029 || m[mIdleServer] != 0.020 || m[mIdleCPU] != 0.049 {
		t.Errorf("idle: %v", m)
	}
	if _, err := ParseIdle("ffmem: the server sent data on an idle connection (revents 0x1)\n"); err == nil {
		t.Error("ffmem's error not passed on")
	}
}

// TestFFMemClientCommands: the same client over TCP and over a Unix
// socket, from where the deployment says the server is.
func TestFFMemClientCommands(t *testing.T) {
	env := toolEnv{Tools: "/tmp/t", Full: true}
	tcp := strings.Join(pingpong.Client(env, dial{Addr: "10.244.1.2"}, sweepCase, 1), " ")
	if tcp != "/tmp/t/ffmem pingpong --tcp 10.244.1.2:19151 --sizes 1,64,1024,16384,65536,262144,1048576 --ms 250" {
		t.Errorf("tcp: %s", tcp)
	}
	unix := strings.Join(stream.Client(env, dial{Addr: ffmemSocket("/tmp/d"), Transport: TransportUnix}, sweepCase, 1), " ")
	if unix != "/tmp/t/ffmem stream --unix /tmp/d/ffmem.sock --sizes 1024,16384,131072,1048576 --ms 500" {
		t.Errorf("unix: %s", unix)
	}
	if srv := ffmemServer(env).Shell; srv != `exec /tmp/t/ffmem serve --tcp 19151 --unix "$D/ffmem.sock"` {
		t.Errorf("server: %s", srv)
	}
}
