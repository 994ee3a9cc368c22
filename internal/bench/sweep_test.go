package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSweepSamples: one sweep run becomes a sample per kept case; a case
// missing from the output fails alone; a case's own note stays with it;
// a run that failed fails every case.
func TestSweepSamples(t *testing.T) {
	env := toolEnv{Full: true}
	j := Job{Exp: pingpong, Case: sweepCase, Path: Paths[0], Rep: 1}
	out := readTestdata(t, "ffmem-pingpong.txt")
	// Drop the 1 MiB line, and make the 1 B size too short for a p99.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	lines[0] = strings.Replace(lines[0], "round_trips=17642", "round_trips=50", 1)
	samples := sweepSamples(env, j, Sample{Experiment: "pingpong", Path: "host", Rep: 1}, []byte(strings.Join(lines[:len(lines)-1], "\n")), "")
	if len(samples) != len(pingpongSizes) {
		t.Fatalf("%d samples, want one per size (%d)", len(samples), len(pingpongSizes))
	}
	for _, s := range samples {
		switch s.Case {
		case "1 MiB":
			if !strings.Contains(s.Error, "no figure for 1 MiB") {
				t.Errorf("1 MiB: error %q", s.Error)
			}
		case "1 B":
			if len(s.Suspect) != 1 || !strings.Contains(s.Suspect[0], "only 50 round trips") {
				t.Errorf("1 B: suspect %q", s.Suspect)
			}
		default:
			if s.Error != "" || len(s.Suspect) != 0 || s.Metrics[mP50] <= 0 || s.X <= 0 {
				t.Errorf("%s: %+v", s.Case, s)
			}
		}
	}
	failed := sweepSamples(env, j, Sample{}, []byte("ffmem: connect to 10.0.0.1:19151: Connection refused\n"), "")
	for _, s := range failed {
		if !strings.Contains(s.Error, "Connection refused") {
			t.Errorf("%s: error %q", s.Case, s.Error)
		}
	}
}

// TestCCSwitchBetweenExperiments: real namespaces move from the run's
// congestion control to the machine's default and back, and end as they
// were.
func TestCCSwitchBetweenExperiments(t *testing.T) {
	needTools(t)
	ns := map[string]string{"a": testNetNS(t), "b": testNetNS(t)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := map[string]string{}
	for k, p := range ns {
		before[k], _ = readCC(ctx, p)
	}
	sw := newCCSwitch(ns)
	want := func(algo string) {
		t.Helper()
		for k, p := range ns {
			if got, err := readCC(ctx, p); err != nil || got != algo {
				t.Errorf("namespace %s uses %q (%v), want %s", k, got, err, algo)
			}
		}
	}
	if _, err := sw.set(ctx, "cubic"); err != nil {
		t.Fatal(err)
	}
	want("cubic")
	if err := sw.use(ctx, "reno"); err != nil {
		t.Fatal(err)
	}
	want("reno")
	if err := sw.use(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	for k, p := range ns {
		if got, _ := readCC(ctx, p); got != before[k] {
			t.Errorf("default: namespace %s uses %s, want its own %s", k, got, before[k])
		}
	}
	if err := sw.use(ctx, "cubic"); err != nil {
		t.Fatal(err)
	}
	if err := sw.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	for k, p := range ns {
		if got, _ := readCC(ctx, p); got != before[k] {
			t.Errorf("restored: namespace %s uses %s, want %s", k, got, before[k])
		}
	}
}
