package bench

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseAsyncEcho(t *testing.T) {
	m, suspect, err := parseAsyncEcho(toolEnv{}, []byte("round 0.2\nround 0.1\nround 0.4\nfailed reset 1 timeout 2 other 0\nOK 93\n"))
	want := map[string]float64{mRoundMs: 200, mTail: 2, mFirstMs: 200, mLaterTail: 1.6, mResets: 1, mHangs: 2, mBroken: 0}
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("metrics %v, %v; want %v", m, err, want)
	}
	if len(suspect) != 1 || !strings.Contains(suspect[0], "3 of 96 connections failed: 1 reset, 2 hung") {
		t.Errorf("suspect %q: want the failed connections said", suspect)
	}
	if _, _, err := parseAsyncEcho(toolEnv{}, []byte("connection 3: reset\n")); err == nil {
		t.Error("output without rounds parsed")
	}
}

// TestCheckRunEnds: the ends counted are the counters' growth during the
// run, on the checked path and elsewhere (other paths and the overlay).
func TestCheckRunEnds(t *testing.T) {
	run := &checkRun{c: newPathCheck("shm"),
		before: connCounters{Paths: map[string]uint64{"shm": 10, "unix": 4}, Fallback: 1},
		after:  connCounters{Paths: map[string]uint64{"shm": 74, "unix": 5, "host-tcp": 2}, Fallback: 3}}
	if on, off, ok := run.ends(); !ok || on != 64 || off != 5 {
		t.Errorf("ends = %d on, %d off, %v; want 64, 5 (1 unix, 2 host-tcp, 2 overlay), true", on, off, ok)
	}
	run.aerr = errors.New("agent gone")
	if _, _, ok := run.ends(); ok {
		t.Error("ends counted from counters that were not read")
	}
	if _, _, ok := (*checkRun)(nil).ends(); ok {
		t.Error("ends counted on an unchecked path")
	}
}

// TestUnavailableRuntime: a runtime that cannot be prepared fails its own
// rows with why, keeps its server out of the plan, and leaves the rest to run.
func TestUnavailableRuntime(t *testing.T) {
	broken := nodeEcho
	broken.Prepare = func(context.Context, string) error { return errors.New("node: not found") }
	exps := []Experiment{broken, pgBench}
	missing := prepareAll(context.Background(), exps, t.TempDir())
	if len(missing) != 1 || !strings.Contains(missing["node-echo"], "not run: node: not found") {
		t.Fatalf("missing = %v, want node-echo's reason only", missing)
	}
	if got := runnable(exps, missing); len(got) != 1 || got[0].Info.Name != "pgbench" {
		t.Errorf("runnable = %v, want pgbench only", got)
	}
	r := &runner{env: toolEnv{Missing: missing}}
	s := r.run(context.Background(), Job{Exp: broken, Case: broken.Cases(false)[1], Path: pathNamed(t, "freeflow"), Rep: 1})
	if len(s) != 1 || s[0].Error != missing["node-echo"] || s[0].Case != "1 MiB" {
		t.Errorf("samples %+v: want one failed 1 MiB sample saying why", s)
	}
}

// TestUncheckedPathRunsUnderTheSamePolls: a baseline path's client runs
// under the same `freeflow conns` polls as a FreeFlow path's, which it
// does not check; a poll costs CPU, and only the FreeFlow paths paying it
// made their connection rates look lower than they are.
func TestUncheckedPathRunsUnderTheSamePolls(t *testing.T) {
	dir := t.TempDir()
	calls := dir + "/calls"
	bin := dir + "/freeflow"
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\necho '[]'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &runner{cli: CLI{Bin: bin, Cluster: "c"}}
	run := r.startCheck(context.Background(), Job{Path: Path{Name: "bridge"}})
	var out []byte
	for end := time.Now().Add(10 * connsPoll); time.Now().Before(end) && !strings.Contains(string(out), "conns -o json"); {
		time.Sleep(connsPoll / 4)
		out, _ = os.ReadFile(calls)
	}
	if v := run.finish(); v != "" {
		t.Errorf("an unchecked path got verdict %q", v)
	}
	if !strings.Contains(string(out), "conns -o json") {
		t.Errorf("no conns poll while the bridge client ran; calls: %q", out)
	}
	if _, _, ok := run.ends(); ok {
		t.Error("ends counted on an unchecked path")
	}
}
