package bench

import (
	"context"
	"fmt"
	"time"
)

// newRaw starts the record of a run.
func newRaw(o Options, c *benchCluster, exps []Experiment) *Raw {
	mode := "full"
	if o.Quick {
		mode = "quick"
	}
	raw := &Raw{
		Version: rawVersion,
		Started: time.Now().UTC(),
		Machine: ThisMachine(),
		Setup: Setup{
			Mode: mode, RunSeconds: max(1, int(o.Duration.Round(time.Second)/time.Second)), Reps: o.Reps,
			Order:      "interleaved: each round runs every case on every path in turn (A B C D, A B C D, ...)",
			Warmup:     "sockperf discards its own first 400 ms; the other experiments get one discarded run of their first case on every path before the first round",
			Cluster:    c.cli.Cluster,
			OwnCluster: c.own,
			CC:         o.CC,
			ConnRate:   "connrate.py (Python 3, blocking libc sockets), run as python3 -c; kept next to raw.json",
		},
	}
	for _, e := range exps {
		raw.Experiments = append(raw.Experiments, e.Info)
	}
	if l := raw.Machine.Load; l[0] > busyLoad {
		raw.Notes = append(raw.Notes, fmt.Sprintf("the machine was busy before the run (load average %.2f %.2f %.2f on %d cores): other work skews every figure",
			l[0], l[1], l[2], raw.Machine.Cores))
	}
	return raw
}

// runJob runs one client and turns its output into a sample. A failed run
// is a sample too: it is reported, never silently dropped.
func runJob(ctx context.Context, dep *Deployment, env toolEnv, j Job, seconds int) Sample {
	argv := j.Exp.Client(env, dep.Target(j.Path), j.Case, seconds)
	cmd := dep.ClientCmd(j.Path, argv)
	s := Sample{Experiment: j.Exp.Info.Name, Case: j.Case.Name, Path: j.Path.Name, Rep: j.Rep,
		Warmup: j.Rep == 0, Command: displayCommand(cmd.Args, env.Script)}
	// A client that hangs (server gone, path broken) costs a bounded time.
	jctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+30*time.Second)
	defer cancel()
	out, err := runCmd(jctx, cmd)
	if err == nil {
		s.Metrics, s.Suspect, err = j.Exp.Parse(env, out)
	}
	if err != nil {
		s.Error = err.Error()
		s.Output = lastLines(string(out), 20)
	}
	return s
}

// progressLine says what a sample measured, for the log.
func progressLine(s Sample) string {
	what := fmt.Sprintf("%-10s %-8s %-7s", s.Experiment, s.Case, s.Path)
	if s.Warmup {
		what += " (warm-up)"
	} else {
		what += fmt.Sprintf(" rep %d", s.Rep)
	}
	if s.Error != "" {
		return what + ": FAILED: " + s.Error
	}
	e, ok := experimentByName(s.Experiment)
	if !ok {
		return what
	}
	for _, m := range e.Info.Metrics {
		if m.Headline {
			what += fmt.Sprintf("  %s %s", formatValue(s.Metrics[m.Key]), m.Label)
		}
	}
	return what
}

func experimentByName(name string) (Experiment, bool) {
	for _, e := range Experiments {
		if e.Info.Name == name {
			return e, true
		}
	}
	return Experiment{}, false
}
