package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
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
			Warmup:     warmupNote(o.Quick),
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

// runner runs the jobs of one deployment.
type runner struct {
	dep     *Deployment
	cli     CLI
	env     toolEnv
	pin     pinning
	seconds int
	shaper  *fabricShaper // nil unless a shaped experiment runs
	conns   bool          // `freeflow conns` exists: FreeFlow paths are checked
}

// run runs one job's clients (one per concurrent pair) and turns their
// output into a sample. A failed run is a sample too: it is reported,
// never silently dropped.
func (r *runner) run(ctx context.Context, j Job) Sample {
	s := Sample{Experiment: j.Exp.Info.Name, Case: j.Case.Name, X: j.Case.X, Path: j.Path.Name, Rep: j.Rep, Warmup: j.Rep == 0}
	if j.Exp.Shaped {
		if err := r.shaper.Set(ctx, j.Case.Cap); err != nil {
			s.Error = err.Error()
			return s
		}
		defer r.shaper.Clear(context.Background())
	}
	cmds := r.clientCmds(j)
	s.Command = displayCommand(cmds[0].Args, r.env.Script)
	if len(cmds) > 1 {
		s.Command += fmt.Sprintf(" (and the same in %d more pairs at once, each to its own server)", len(cmds)-1)
	}
	// A client that hangs (server gone, path broken) costs a bounded time.
	jctx, cancel := context.WithTimeout(ctx, time.Duration(j.Exp.seconds(r.seconds))*time.Second+30*time.Second)
	defer cancel()
	check := r.startCheck(jctx, j)
	before, cpuErr := readCPUTimes()
	outs, err := runAll(jctx, cmds)
	after, _ := readCPUTimes()
	verdict := check.finish()
	if err == nil {
		s.Metrics, s.Suspect, err = parseAll(r.env, j.Exp, outs)
	}
	if err != nil {
		s.Error = err.Error()
		s.Output = lastLines(string(outs[0]), 20)
		return s
	}
	if cpuErr == nil {
		for k, v := range cpuMetricsBetween(before, after, r.pin, s.Metrics[mBytes]) {
			s.Metrics[k] = v
		}
	}
	if verdict != "" {
		s.Suspect = append(s.Suspect, verdict)
	}
	return s
}

// clientCmds are the job's client commands, one per pair.
func (r *runner) clientCmds(j Job) []*exec.Cmd {
	cmds := make([]*exec.Cmd, j.Case.pairs())
	for i := range cmds {
		argv := j.Exp.Client(r.env, r.dep.Target(j.Path, i), j.Case, j.Exp.seconds(r.seconds))
		cmds[i] = r.dep.ClientCmd(j.Path, i, argv)
	}
	return cmds
}

// runAll runs the commands at once and waits for all of them.
func runAll(ctx context.Context, cmds []*exec.Cmd) ([][]byte, error) {
	outs := make([][]byte, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = runCmd(ctx, c)
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

// parseAll parses every pair's output and combines them.
func parseAll(env toolEnv, e Experiment, outs [][]byte) (map[string]float64, []string, error) {
	var per []map[string]float64
	var suspect []string
	for i, out := range outs {
		m, s, err := e.Parse(env, out)
		if err != nil {
			return nil, nil, err
		}
		per = append(per, m)
		for _, why := range s {
			if len(outs) > 1 {
				why = fmt.Sprintf("pair %d: %s", i+1, why)
			}
			suspect = append(suspect, why)
		}
	}
	if len(per) == 1 || e.Combine == nil {
		return per[0], suspect, nil
	}
	return e.Combine(per), suspect, nil
}

// checkRun is a running check of a FreeFlow path: `freeflow conns` polled
// while the client runs, and the agents' counters before and after; nil
// checks nothing.
type checkRun struct {
	ctx    context.Context
	cli    CLI
	c      *pathCheck
	before connCounters
	berr   error
	stop   chan struct{}
	done   chan struct{}
}

// startCheck starts watching the connections of a FreeFlow path's job.
func (r *runner) startCheck(ctx context.Context, j Job) *checkRun {
	if j.Path.Expect == "" || !r.conns {
		return nil
	}
	c := newPathCheck(j.Path.Expect)
	for i := range j.Case.pairs() {
		cli, srv := r.dep.Containers(j.Path, i)
		c.pairs[[2]string{cli, srv}] = true
	}
	run := &checkRun{ctx: ctx, cli: r.cli, c: c, stop: make(chan struct{}), done: make(chan struct{})}
	run.before, run.berr = readCounters(ctx, r.cli)
	go func() {
		defer close(run.done)
		watchConns(ctx, r.cli, c, run.stop)
	}()
	return run
}

// finish stops the watch and returns its verdict ("" = as expected). The
// connections conns listed must all have taken the expected path, and the
// counters must show no fallback; when conns saw none (connections too
// short-lived to catch), the counters alone must confirm the path.
func (run *checkRun) finish() string {
	if run == nil {
		return ""
	}
	close(run.stop)
	<-run.done
	v := run.c.verdict()
	after, err := readCounters(run.ctx, run.cli)
	if err = errors.Join(run.berr, err); err != nil {
		return joinVerdicts(v, "agent counters not read: "+err.Error())
	}
	cv := counterVerdict(run.before, after, run.c.want)
	if len(run.c.seen) == 0 && run.c.err == nil && cv == "" {
		return "" // conns missed them, the counters confirm them
	}
	if len(run.c.seen) == 0 || strings.Contains(cv, "fell back") {
		return joinVerdicts(v, cv)
	}
	return v
}

func joinVerdicts(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
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
