package bench

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestParseConnRateLate: client-late's line gives the per-connection
// times; client's has none.
func TestParseConnRateLate(t *testing.T) {
	m, last, err := ParseConnRate(string(readTestdata(t, "connrate-late.txt")))
	if err != nil || m[mConnMs] != 101 || m[mConnMsP99] != 147.5 || m[mConnErrors] != 2 || last != "timed out" {
		t.Fatalf("got %v %q %v; want 101 ms, p99 147.5 ms, 2 failed (timed out)", m, last, err)
	}
	m, _, _ = ParseConnRate(string(readTestdata(t, "connrate-client.txt")))
	if _, ok := m[mConnMs]; ok {
		t.Errorf("client's line gave a per-connection time: %v", m)
	}
}

// TestNoLibClientCommand: connrate-nolib's client runs connrate's command
// with LD_PRELOAD unset, so its container's library is not loaded.
func TestNoLibClientCommand(t *testing.T) {
	env, d := toolEnv{Script: "print()"}, dial{Addr: "10.244.1.2"}
	plain := clientArgv(env, Job{Exp: connRate, Case: connRate.Cases(false)[0]}, d, 1)
	nolib := clientArgv(env, Job{Exp: connRateNoLib, Case: connRateNoLib.Cases(false)[0]}, d, 1)
	if want := append([]string{"/usr/bin/env", "-u", "LD_PRELOAD"}, plain...); !reflect.DeepEqual(nolib, want) {
		t.Errorf("connrate-nolib client = %q, want %q", nolib, want)
	}
	if slices.Contains(plain, "LD_PRELOAD") {
		t.Errorf("connrate's client runs without the library: %q", plain)
	}
}

// TestNoLibVerdict: with a client without the library, the agents answer
// the server's ends only, on the overlay whatever the reason; an end on a
// fast path, or none answered, makes the sample suspect.
func TestNoLibVerdict(t *testing.T) {
	a := connCounters{Paths: map[string]uint64{"shm": 10}, Fallback: 1, Reasons: map[string]uint64{"policy": 1}}
	b := connCounters{Paths: map[string]uint64{"shm": 10}, Fallback: 41, Reasons: map[string]uint64{"policy": 1, "peer-timeout": 40}}
	if v := noLibVerdict(gained(a, b)); v != "" {
		t.Errorf("40 server ends on the overlay: verdict %q", v)
	}
	b.Paths["shm"] = 12
	if v := noLibVerdict(gained(a, b)); v != "2 connection ends took a fast path (shm ×2), but the client has no library" {
		t.Errorf("ends on shm: verdict %q", v)
	}
	if v := noLibVerdict(gained(a, a)); !strings.Contains(v, "counted no connection end") {
		t.Errorf("nothing answered: verdict %q", v)
	}
}

// TestAddCounted: late-connect gets the share of ends on any fast path and
// the overlay reasons from the counters' growth; connrate-nolib the
// reasons only; connrate nothing.
func TestAddCounted(t *testing.T) {
	run := &checkRun{c: newPathCheck("shm"),
		before: connCounters{Paths: map[string]uint64{"shm": 10}, Fallback: 2, Reasons: map[string]uint64{"policy": 2}},
		after: connCounters{Paths: map[string]uint64{"shm": 160, "unix": 10}, Fallback: 42,
			Reasons: map[string]uint64{"policy": 2, "peer-timeout": 38, "no-commit": 2}}}
	d, ok := run.gained()
	if !ok {
		t.Fatal("counters read, nothing gained")
	}
	s := Sample{Metrics: map[string]float64{}}
	addCounted(lateConnect, &s, d)
	wantReasons := map[string]uint64{"peer-timeout": 38, "no-commit": 2}
	if s.Metrics[mFastShare] != 80 || s.Metrics[mOverlayEnds] != 40 || !reflect.DeepEqual(s.Fallback, wantReasons) {
		t.Errorf("late-connect: %v, reasons %v; want 80%% fast (160 of 200 ends), 40 overlay, %v", s.Metrics, s.Fallback, wantReasons)
	}
	s = Sample{Metrics: map[string]float64{}}
	addCounted(connRateNoLib, &s, d)
	if _, ok := s.Metrics[mFastShare]; ok || s.Metrics[mOverlayEnds] != 40 || len(s.Fallback) != 2 {
		t.Errorf("connrate-nolib: %v, reasons %v; want the overlay ends and reasons, no share", s.Metrics, s.Fallback)
	}
	s = Sample{Metrics: map[string]float64{}}
	addCounted(connRate, &s, d)
	if len(s.Metrics) != 0 || s.Fallback != nil {
		t.Errorf("connrate: %v, reasons %v; want nothing added", s.Metrics, s.Fallback)
	}
	s = Sample{Metrics: map[string]float64{}}
	addCounted(lateConnect, &s, connCounters{})
	if _, ok := s.Metrics[mFastShare]; ok || s.Metrics[mOverlayEnds] != 0 || s.Fallback != nil {
		t.Errorf("no end decided: %v, reasons %v; want no share, 0 overlay ends", s.Metrics, s.Fallback)
	}
	run.aerr = errors.New("agent gone")
	if _, ok := run.gained(); ok {
		t.Error("gained from counters that were not read")
	}
}

// TestRenderFallbackReasons: the report sums each row's overlay reasons
// over its repetitions, says "none" when the agents counted no overlay
// end, "–" on a path they did not count, and keeps them in raw.json.
func TestRenderFallbackReasons(t *testing.T) {
	raw := loadSmall(t)
	raw.Experiments = append(raw.Experiments, lateConnect.Info)
	raw.Paths = append(raw.Paths, PathInfo{Name: "freeflow", Group: SameHost, Role: RoleCandidate, Expect: "shm"},
		PathInfo{Name: "freeflow-unix", Group: SameHost, Role: RoleCandidate, Expect: "unix"})
	late := func(path string, rep int, fast, overlay float64, reasons map[string]uint64) Sample {
		return Sample{Experiment: "late-connect", Case: "200 conns", Path: path, Rep: rep, Fallback: reasons,
			Metrics: map[string]float64{mFastShare: fast, mConnMs: 110, mConnMsP99: 150, mConnErrors: 0, mOverlayEnds: overlay}}
	}
	raw.Samples = append(raw.Samples,
		late("freeflow", 1, 90, 40, map[string]uint64{"peer-timeout": 38, "no-commit": 2}),
		late("freeflow", 2, 95, 20, map[string]uint64{"peer-timeout": 20}),
		late("freeflow-unix", 1, 100, 0, nil),
		Sample{Experiment: "late-connect", Case: "200 conns", Path: "bridge", Rep: 1, Metrics: map[string]float64{mConnMs: 101}})
	p := filepath.Join(t.TempDir(), "raw.json")
	if err := SaveRaw(p, raw); err != nil {
		t.Fatal(err)
	}
	again, err := LoadRaw(p)
	if err != nil {
		t.Fatal(err)
	}
	md := RenderMarkdown(again)
	for _, want := range []string{
		"| fast path % median (min–max) | ms per conn median (min–max) | p99 ms per conn (median) | failed (total) | overlay ends (total) | overlay reasons (agents, total) | runs |",
		"| 200 conns | freeflow | 92.5 (90.0–95.0) | 110 (110–110) | 150 | 0 | 60 | no-commit ×2, peer-timeout ×58 | 2 |",
		"| 200 conns | freeflow-unix | 100 (100–100) | 110 (110–110) | 150 | 0 | 0 | none | 1 |",
		"| 200 conns | bridge (baseline) | – | 101 (101–101) | – | – | – | – | 1 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
}
