package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// newRaw starts the record of a run.
func newRaw(o Options, exps []Experiment) *Raw {
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
			Order:    "interleaved: each round runs every case on every path in turn (A B C D, A B C D, ...)",
			Warmup:   warmupNote(o.Quick),
			CC:       o.CC,
			ConnRate: "connrate.py (Python 3, libc sockets: blocking; non-blocking and looked at 100 ms late for late-connect), run as python3 -c; kept next to raw.json",
		},
	}
	for _, e := range exps {
		info := e.Info
		switch {
		case e.DefaultCC:
			info.CC = raw.Machine.DefaultCC + " (the machine's default)"
		case slices.Contains(e.transports(), TransportTCP) && o.CC != "default":
			info.CC = o.CC + " (the run's, --cc)"
		}
		raw.Experiments = append(raw.Experiments, info)
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
	cc      *ccSwitch
	runCC   string // the run's congestion control (--cc)
	machCC  string // the machine's default, for DefaultCC experiments
}

// run runs one job's clients (one per concurrent pair) and turns their
// output into samples: one, or one per case for a sweep. A failed run is
// a sample too: it is reported, never silently dropped.
func (r *runner) run(ctx context.Context, j Job) (samples []Sample) {
	s := Sample{Experiment: j.Exp.Info.Name, Case: j.Case.Name, X: j.Case.X, Path: j.Path.Name, Rep: j.Rep, Warmup: j.Rep == 0}
	if why := r.env.Missing[j.Exp.Info.Name]; why != "" {
		s.Error = why
		return failedSamples(r.env, j, s)
	}
	env, err := r.prepare(ctx, j)
	if j.Exp.Shaped {
		defer r.shaper.Clear(context.Background())
	}
	if err != nil {
		s.Error = err.Error()
		return failedSamples(env, j, s)
	}
	cmds := r.clientCmds(env, j)
	s.Command = displayCommand(cmds[0].Args, r.env.Script)
	if len(cmds) > 1 {
		s.Command += fmt.Sprintf(" (and the same in %d more pairs at once, each to its own server)", len(cmds)-1)
	}
	// A client that hangs (server gone, path broken) costs a bounded time.
	jctx, cancel := context.WithTimeout(ctx, j.Exp.limit(r.seconds))
	defer cancel()
	check := r.startCheck(jctx, j)
	before, cpuErr := readCPUTimes()
	agentBefore, agentErr := agentCPUms(r.cli.Cluster)
	start := time.Now()
	outs, err := runAll(jctx, cmds)
	after, _ := readCPUTimes()
	agentAfter, _ := agentCPUms(r.cli.Cluster)
	verdict := check.finish()
	if err != nil {
		s.Error, s.Output = displayError(err, r.env.Script), lastLines(string(outs[0]), 20)
		// Killed at its limit, by this context or by the timeout inside its
		// container (whole seconds): a hang, said as one.
		if limit := j.Exp.limit(r.seconds); ctx.Err() == nil && time.Since(start) >= limit-time.Second {
			s.Error = fmt.Sprintf("hung: no result within %v, killed: %s", limit, s.Error)
		}
		return failedSamples(env, j, s)
	}
	if j.Exp.AgentCPU && agentErr == nil {
		defer func() { addAgentCPU(samples, agentAfter-agentBefore) }()
	}
	if j.Exp.sweep() {
		samples = sweepSamples(env, j, s, outs[0], verdict)
		if cpuErr == nil {
			addSweepCPU(samples, before, after, r.pin)
		}
		return samples
	}
	if s.Metrics, s.Suspect, err = parseAll(env, j.Exp, outs); err != nil {
		s.Error, s.Output = err.Error(), lastLines(string(outs[0]), 20)
		return []Sample{s}
	}
	if cpuErr == nil {
		for k, v := range cpuMetricsBetween(before, after, r.pin, s.Metrics[mBytes]) {
			s.Metrics[k] = v
		}
	}
	if verdict != "" {
		s.Suspect = append(s.Suspect, verdict)
	}
	if on, off, ok := check.ends(); ok && j.Exp.CountsEnds {
		s.Metrics[mPathEnds], s.Metrics[mOtherEnds] = float64(on), float64(off)
	}
	if d, ok := check.gained(); ok {
		addCounted(j.Exp, &s, d)
	}
	samples = []Sample{s}
	return samples
}

// addSweepCPU adds the CPU metrics of a sweep's whole client run to the
// sample that carries the bytes of the whole run (a verbs bandwidth
// sweep's verbsWholeSweep); the per-size samples share the run and have
// no CPU figure of their own.
func addSweepCPU(samples []Sample, before, after cpuTimes, pin pinning) {
	for i, s := range samples {
		if bytes := s.Metrics[mBytes]; bytes > 0 {
			maps.Copy(samples[i].Metrics, cpuMetricsBetween(before, after, pin, bytes))
		}
	}
}

// addAgentCPU adds the agents' CPU ms of a client run to each of its
// samples that has figures (a sweep's cases share the one run's).
func addAgentCPU(samples []Sample, ms float64) {
	for i := range samples {
		if samples[i].Metrics != nil {
			samples[i].Metrics[mAgentCPU] = ms
		}
	}
}

// addCounted adds to s what the agents counted while its client ran, as
// far as e asks for it: the share of ends on a fast path, the overlay
// ends and their reasons.
func addCounted(e Experiment, s *Sample, d connCounters) {
	if all := d.fast() + d.Fallback; e.FastShare && all > 0 {
		s.Metrics[mFastShare] = 100 * float64(d.fast()) / float64(all)
	}
	if e.Info.FallbackReasons {
		s.Metrics[mOverlayEnds] = float64(d.Fallback)
		if len(d.Reasons) > 0 {
			s.Fallback = d.Reasons
		}
	}
}

// clientMargin is how much longer than its seconds a client may take
// (start-up, sockperf's 2 s pause, a sweep's sizes) before it is killed.
const clientMargin = 40 * time.Second

// prepare readies the cluster for j: the congestion control it runs
// under, the fabric cap, a restarted server. It returns the tools'
// environment for j.
func (r *runner) prepare(ctx context.Context, j Job) (toolEnv, error) {
	env, algo := r.env, r.runCC
	if j.Exp.DefaultCC {
		algo = r.machCC
	}
	if err := r.cc.use(ctx, algo); err != nil {
		return env, err
	}
	switch {
	case j.Path.Expect == "unix" || j.Path.Expect == "shm":
		// No TCP under the channel: the library answers TCP_CONGESTION
		// with a stand-in, so there is nothing to check.
		env.CC = ""
	case algo != "default":
		env.CC = algo
	}
	if j.Exp.Shaped {
		if err := r.shaper.Set(ctx, j.Case.Cap); err != nil {
			return env, err
		}
	}
	if j.Exp.Restarts {
		for pair := range j.Case.pairs() {
			if err := waitListening(ctx, r.dep.site(j.Path.Server, true, pair), []int{j.Exp.Server(env).Port}); err != nil {
				return env, err
			}
		}
	}
	return env, nil
}

// failedSamples are the samples of a run that produced no figure: one,
// or one per case of a sweep, so every row of the table says it failed.
func failedSamples(env toolEnv, j Job, s Sample) []Sample {
	if !j.Exp.sweep() {
		return []Sample{s}
	}
	var out []Sample
	for _, c := range j.Exp.Cases(env.Full) {
		cs := s
		cs.Case, cs.X = c.Name, c.X
		out = append(out, cs)
	}
	return out
}

// sweepSamples turns one sweep run's output into a sample per case; a
// case missing from the output is a failed sample.
func sweepSamples(env toolEnv, j Job, s Sample, out []byte, verdict string) []Sample {
	per, suspect, err := j.Exp.ParseSweep(env, out)
	var samples []Sample
	for _, c := range j.Exp.Cases(env.Full) {
		cs := s
		cs.Case, cs.X = c.Name, c.X
		m, ok := per[c.Name]
		switch {
		case err != nil:
			cs.Error, cs.Output = err.Error(), lastLines(string(out), 20)
		case !ok:
			cs.Error = fmt.Sprintf("the output has no figure for %s", c.Name)
		default:
			cs.Metrics = m
		}
		for _, why := range suspect {
			if rest, ok := strings.CutPrefix(why, c.Name+": "); ok {
				cs.Suspect = append(cs.Suspect, rest)
			}
		}
		if verdict != "" {
			cs.Suspect = append(cs.Suspect, verdict)
		}
		samples = append(samples, cs)
	}
	return samples
}

// clientCmds are the job's client commands, one per pair.
func (r *runner) clientCmds(env toolEnv, j Job) []*exec.Cmd {
	cmds := make([]*exec.Cmd, j.Case.pairs())
	for i := range cmds {
		argv := clientArgv(env, j, r.dep.Dial(j.Path, i), r.seconds)
		if j.Exp.Launcher {
			cmds[i] = r.dep.LauncherCmd(j.Path, argv)
		} else {
			cmds[i] = r.dep.ClientCmd(j.Path, i, argv, j.Exp.limit(r.seconds))
		}
	}
	return cmds
}

// clientArgv is j's client command for dial d, when the run says seconds;
// a NoLibClient's runs without the FreeFlow library its container preloads.
func clientArgv(env toolEnv, j Job, d dial, seconds int) []string {
	argv := j.Exp.Client(env, d, j.Case, j.Exp.seconds(seconds))
	if j.Exp.NoLibClient {
		argv = append([]string{"/usr/bin/env", "-u", "LD_PRELOAD"}, argv...)
	}
	return argv
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
// while the client runs, and the agents' counters before and after; on
// other paths only the polls (c nil, see connsPoll).
type checkRun struct {
	ctx    context.Context
	cli    CLI
	c      *pathCheck // nil: the path is not checked
	before connCounters
	after  connCounters
	berr   error
	aerr   error
	noLib  bool // the client has no library (Experiment.NoLibClient)
	stop   chan struct{}
	done   chan struct{}
}

// startCheck starts watching the connections of a FreeFlow path's job,
// and the same polls on any other path's.
func (r *runner) startCheck(ctx context.Context, j Job) *checkRun {
	run := &checkRun{ctx: ctx, cli: r.cli, noLib: j.Exp.NoLibClient, stop: make(chan struct{}), done: make(chan struct{})}
	if j.Path.Expect != "" {
		run.c = newPathCheck(j.Path.Expect)
		run.c.launcher = j.Exp.LauncherFallback
		for i := range j.Case.pairs() {
			cli, srv := r.dep.Containers(j.Path, i)
			run.c.pairs[[2]string{cli, srv}] = true
		}
		run.before, run.berr = readCounters(ctx, r.cli)
	}
	go func() {
		defer close(run.done)
		// Nothing to check and the agents' CPU measured: the watch's own
		// `freeflow conns` calls would be most of what they use.
		if run.c == nil && j.Exp.AgentCPU {
			return
		}
		watchConns(ctx, r.cli, run.c, run.stop)
	}()
	return run
}

// finish stops the watch and returns its verdict ("" = as expected). The
// connections conns listed must all have taken the expected path, and the
// counters must show no fallback; when conns saw none (connections too
// short-lived to catch), the counters alone must confirm the path.
func (run *checkRun) finish() string {
	close(run.stop)
	<-run.done
	if run.c == nil {
		return ""
	}
	v := run.c.verdict()
	run.after, run.aerr = readCounters(run.ctx, run.cli)
	if err := errors.Join(run.berr, run.aerr); err != nil {
		return joinVerdicts(v, "agent counters not read: "+err.Error())
	}
	if run.noLib { // conns lists no client end: the client asks nothing
		return noLibVerdict(gained(run.before, run.after))
	}
	cv := counterVerdict(run.before, run.after, run.c.want, run.c.launcher)
	if len(run.c.seen) == 0 && run.c.err == nil && cv == "" {
		return "" // conns missed them, the counters confirm them
	}
	if len(run.c.seen) == 0 || strings.Contains(cv, "fell back") {
		return joinVerdicts(v, cv)
	}
	return v
}

// gained is what the agents' counters gained while the client ran (after
// finish); ok is false when nothing was checked or a reading failed.
func (run *checkRun) gained() (connCounters, bool) {
	if run == nil || run.c == nil || run.berr != nil || run.aerr != nil {
		return connCounters{}, false
	}
	return gained(run.before, run.after), true
}

// ends counts the connection ends the agents decided while the client
// ran (after finish): on the checked path, and on any other path or the
// overlay; ok is false when nothing was checked or a reading failed.
func (run *checkRun) ends() (on, off uint64, ok bool) {
	d, ok := run.gained()
	if !ok {
		return 0, 0, false
	}
	on = d.Paths[run.c.want]
	return on, d.fast() - on + d.Fallback, true
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

// progressLine says what a job measured, for the log: its sample, or
// for a sweep its first and last case.
func progressLine(samples []Sample) string {
	s := samples[0]
	what := fmt.Sprintf("%-10s %-8s %-7s", s.Experiment, s.Case, s.Path)
	if len(samples) > 1 {
		what = fmt.Sprintf("%-10s %-8s %-7s", s.Experiment, fmt.Sprintf("(%d cases)", len(samples)), s.Path)
	}
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
	if len(samples) > 1 {
		return what + "  " + firstFigure(e, s) + " ... " + firstFigure(e, samples[len(samples)-1])
	}
	for _, m := range e.Info.Metrics {
		if m.Headline {
			what += fmt.Sprintf("  %s %s", formatValue(s.Metrics[m.Key]), m.Label)
		}
	}
	if len(s.Fallback) > 0 {
		what += "  overlay: " + reasonList(s.Fallback)
	}
	return what
}

// firstFigure is a sample's first figure, with its case and label.
func firstFigure(e Experiment, s Sample) string {
	for _, m := range e.Info.Metrics {
		if v, ok := s.Metrics[m.Key]; ok {
			return fmt.Sprintf("%s: %s %s", s.Case, formatValue(v), m.Label)
		}
	}
	return s.Case + ": " + firstLine(s.Error)
}

func experimentByName(name string) (Experiment, bool) {
	for _, e := range Experiments {
		if e.Info.Name == name {
			return e, true
		}
	}
	return Experiment{}, false
}
