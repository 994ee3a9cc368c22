package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestParseMigrateReport: `freeflow migrate -o json` (a real one's line) gives CRIU's parts;
// a dry run or anything else is no move.
func TestParseMigrateReport(t *testing.T) {
	rep, err := ParseMigrateReport(readTestdata(t, "migrate-report.json"))
	if err != nil || rep.To != "h2" || rep.Images != 2802042 || rep.Switch != 6735055 || rep.Dump != 104870664 ||
		rep.Restore != 117109789 || rep.Resume != 1027552 || rep.Down != 229743454 {
		t.Fatalf("got %+v %v", rep, err)
	}
	for _, bad := range []string{
		`{"name":"s","from":"h1","to":"h2","dry_run":true,"images_bytes":0,"dump_ns":0,"restore_ns":0,"down_ns":0}`,
		"s moved from h1 to h2: down 516.7 ms",
		"",
	} {
		if _, err := ParseMigrateReport([]byte(bad)); err == nil {
			t.Errorf("%q parsed as a move", bad)
		}
	}
}

// TestParseRedisMemory: used_memory from redis 7's INFO memory (CRLF
// lines), VmRSS from /proc/PID/status.
func TestParseRedisMemory(t *testing.T) {
	used, err := ParseRedisUsedMemory(string(readTestdata(t, "redis-info-memory.txt")))
	if err != nil || used != 67629960 {
		t.Errorf("used_memory = %v %v, want 67629960", used, err)
	}
	if _, err := ParseRedisUsedMemory("ERR unknown command"); err == nil {
		t.Error("an error reply parsed")
	}
	rss, err := ParseVmRSS("Name:\tredis-server\nVmHWM:\t  80000 kB\nVmRSS:\t   74356 kB\nRssAnon:\t   70000 kB\n")
	if err != nil || rss != 74356*1024 {
		t.Errorf("VmRSS = %v %v, want %d", rss, err, 74356*1024)
	}
	if _, err := ParseVmRSS("Name:\tkthreadd\n"); err == nil {
		t.Error("a status without VmRSS parsed")
	}
}

// TestParseMigratePeer: a peer's result line; one that saw a wrong reply
// or lost its connection, or printed nothing, fails.
func TestParseMigratePeer(t *testing.T) {
	r, err := ParseMigratePeer(`{"requests": 1412, "slowest_before_ms": 1.9, "slowest_ms": 243.5}` + "\n")
	if err != nil || r.Requests != 1412 || r.BeforeMs != 1.9 || r.SlowestMs != 243.5 {
		t.Fatalf("got %+v %v", r, err)
	}
	for _, bad := range []string{
		`{"error": "reply 57 was b':58\\r\\n'", "requests": 56}`,
		`{"error": "timed out", "requests": 300}`,
		`{"requests": 0, "slowest_before_ms": 0, "slowest_ms": 0}`,
		"Traceback (most recent call last):",
		"",
	} {
		if _, err := ParseMigratePeer(bad); err == nil {
			t.Errorf("%q parsed as a peer's result", bad)
		}
	}
}

// TestMigrateMetrics: the target is 150 ms + 3 ms per MiB of the server's
// RSS, and a run counts as over it when either peer waited longer.
func TestMigrateMetrics(t *testing.T) {
	rep, err := ParseMigrateReport(readTestdata(t, "migrate-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := migrateMetrics(rep, 64<<20, 70<<20, peerResult{BeforeMs: 2, SlowestMs: 300}, peerResult{BeforeMs: 3, SlowestMs: 420})
	want := map[string]float64{mPeerH1: 300, mPeerH2: 420, mTargetMs: 360, mOverTarget: 1, mBeforeMs: 3,
		mRSSMiB: 70, mUsedMiB: 64, mMigSwitch: 6.735055, mMigDump: 104.870664, mMigRestore: 117.109789, mMigResume: 1.027552, mMigDown: 229.743454}
	for k, v := range want {
		if d := m[k] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if m := migrateMetrics(rep, 64<<20, 70<<20, peerResult{SlowestMs: 300}, peerResult{SlowestMs: 359}); m[mOverTarget] != 0 {
		t.Errorf("peers within the target counted over it: %v", m)
	}
}

// TestMigrateCases: the three sizes in the full run, the first
// with --quick.
func TestMigrateCases(t *testing.T) {
	var names []string
	for _, c := range migrateCases(true) {
		names = append(names, c.name())
	}
	if got := strings.Join(names, ","); got != "64 MiB,256 MiB,1024 MiB" || len(migrateCases(false)) != 1 {
		t.Errorf("cases %s (quick: %d)", got, len(migrateCases(false)))
	}
}

// TestMigratePeerOnLoopback runs migrate_peer.py against a real
// redis-server in a private namespace: a peer left alone reports its
// slowest replies before and after the mark; a peer whose counter
// someone else moved (a reply lost or repeated, as a broken migration
// would make it) and one whose connection is cut fail their run.
func TestMigratePeerOnLoopback(t *testing.T) {
	if why := testenv.Missing("redis-server", "redis-cli", "/usr/bin/python3"); why != "" {
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ns := testNetNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := netns.Command(ns, migrateServer[0], migrateServer[1:]...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	cli := func(args ...string) string {
		out, err := netns.Command(ns, "redis-cli", append([]string{"-p", "6379"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	testenv.WaitFor(t, "redis-server to answer", func() bool {
		return exec.Command("ip", "netns", "exec", filepath.Base(ns), "redis-cli", "-p", "6379", "PING").Run() == nil
	})
	script := filepath.Join(t.TempDir(), migratePeerFile)
	if err := os.WriteFile(script, migratePeerScript, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(key string) *migratePeer {
		p, err := startPeer(ctx, netns.Command(ns, "/usr/bin/python3", script, "127.0.0.1", "6379", key), "h1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		if err := p.waitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return p
	}

	ok, wrong := start("ok"), start("wrong")
	time.Sleep(200 * time.Millisecond)
	ok.mark()
	wrong.mark()
	cli("INCR", "wrong")
	time.Sleep(200 * time.Millisecond)
	r, err := ok.finish(ctx)
	if err != nil || r.Requests < 50 || r.BeforeMs <= 0 || r.SlowestMs <= 0 {
		t.Errorf("peer left alone: %+v %v; want its requests and slowest replies", r, err)
	}
	if _, err := wrong.finish(ctx); err == nil || !strings.Contains(err.Error(), "reply") {
		t.Errorf("peer whose counter jumped: %v; want a failed run naming the wrong reply", err)
	}

	cut := start("cut")
	cut.mark()
	cli("CLIENT", "KILL", "TYPE", "normal") // every client but this one: the peer alone
	if _, err := cut.finish(ctx); err == nil {
		t.Error("peer whose connection was cut did not fail its run")
	} else {
		t.Logf("peer whose connection was cut: %v", err)
	}
}

// TestRenderMigrate: the migration's rows in report.md (no ratios, the
// target and the runs over it), its line in the terminal table, its
// plots, and a failed run said as one.
func TestRenderMigrate(t *testing.T) {
	rep, err := ParseMigrateReport(readTestdata(t, "migrate-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	raw := &Raw{Version: rawVersion, Setup: Setup{Mode: "full", Reps: 2, MigrateCluster: "benchabc"},
		Paths: []PathInfo{migratePath}, Experiments: []ExperimentInfo{migrateInfo}}
	for i, c := range migrateCases(true) {
		for rep1 := 1; rep1 <= 2; rep1++ {
			s := Sample{Experiment: MigrateName, Case: c.name(), X: float64(c.mib << 20), Path: pathMigrate, Rep: rep1, Command: "freeflow migrate"}
			if i == 2 && rep1 == 2 {
				s.Error = "the migration peer on h2: after 56 right replies: reply 57 was b':58\\r\\n'"
			} else {
				s.Metrics = migrateMetrics(rep, float64(c.mib<<20), float64(c.mib<<20), peerResult{SlowestMs: 200 * float64(i+1)}, peerResult{SlowestMs: 210})
			}
			raw.Samples = append(raw.Samples, s)
		}
	}
	md := RenderMarkdown(raw)
	for _, want := range []string{
		"| migration's cluster | benchabc |",
		"| 64 MiB | h1-to-h2 | 200 (200–200) | 210 (210–210) | 230 (230–230) | 6.74 | 105 | 117 | 1.03 | 2.67 | 64.0 | 64.0 | 342 | 0 |",
		"| 1024 MiB | h1-to-h2 | 600 (600–600) |",
		"- migrate 1024 MiB on h1-to-h2: rep 2 failed: the migration peer on h2: after 56 right replies: reply 57 was",
		"Transfer is 0",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
	if tab := RenderTable(raw); !strings.Contains(tab, "migrate 256 MiB slowest reply, peer on h1 (source host) ms (lower better)") {
		t.Errorf("table lacks the migration:\n%s", tab)
	}
	files, err := RenderPlots(raw, t.TempDir())
	if err != nil || len(files) != 3 {
		t.Errorf("plots %v %v; want the peers' slowest replies and down against memory", files, err)
	}
}
