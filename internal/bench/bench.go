// Package bench is `freeflow bench`: it measures the container network
// paths of a cluster side by side and writes raw.json and report.md.
//
// Design: the machine is shared and noisy, so absolute numbers mean little
// and ratios between paths measured in the same run mean much. Every path
// is a table entry (path.go) saying where the server and the client run;
// every experiment (experiment.go) is a real tool with a server started
// once per server site and a client run per case, path and repetition (or
// once per path and repetition for a sweep that measures every case, as
// NetPIPE does). What no packaged tool measures (the physical limits, a
// Unix socket) ffmem does, the bench's own C program (tools/ffmem).
// Repetitions are interleaved (schedule.go), every sample is kept in
// raw.json with the exact command that produced it, and the report is
// rendered from raw.json alone (report.go), so it can be re-rendered.
// The bench brings up its own cluster unless told to use one, and always
// removes what it made, also on error or Ctrl-C.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
)

// Options configure a bench run.
type Options struct {
	Bin      string        // the freeflow binary that drives the cluster
	Cluster  string        // existing cluster to use; "" brings up (and removes) its own
	Quick    bool          // the < 2 min run `make demo` ends with
	Only     []string      // experiments; empty = all
	Paths    []string      // paths; empty = all
	Out      string        // results go to Out/<UTC time>/
	CC       string        // congestion control in the cluster's namespaces, or "default"
	Duration time.Duration // per client run; 0 = the mode's default
	Reps     int           // interleaved repetitions; 0 = the mode's default
	Log      io.Writer     // progress lines
}

// Result is a finished run.
type Result struct {
	Dir string
	Raw *Raw
}

// mode holds the per-mode defaults.
func (o *Options) defaults() {
	if o.Duration == 0 {
		// One second of iperf3, connrate or an application load tool
		// settles on these virtual paths (slow start takes milliseconds);
		// repetitions, not longer runs, are what the spread needs.
		o.Duration = 1 * time.Second
	}
	if o.Reps == 0 {
		// Two rounds is what fits the quick run in 2 minutes, and three
		// the full run's seventeen experiments in 20.
		o.Reps = 2
		if !o.Quick {
			o.Reps = 3
		}
	}
	if o.Out == "" {
		o.Out = "results"
	}
	if o.CC == "" {
		o.CC = "cubic"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Run measures every selected experiment on every selected path, then
// the experiments that run on a cluster of their own if selected
// (separateRuns).
func Run(ctx context.Context, o Options) (res *Result, err error) {
	o.defaults()
	separate, exps, err := selectRun(o)
	if err != nil {
		return nil, err
	}
	paths, err := SelectPaths(o.Paths)
	if err != nil {
		return nil, err
	}
	if paths = pathsFor(exps, paths); len(paths) == 0 && len(exps) > 0 {
		return nil, fmt.Errorf("none of the selected experiments runs on the selected paths")
	}
	dir, err := prepareOut(o.Out)
	if err != nil {
		return nil, err
	}
	raw := newRaw(o, exps)
	if len(exps) > 0 {
		if err := runPaths(ctx, o, raw, exps, paths); err != nil {
			return nil, err
		}
	}
	// A failure here keeps what the experiments before measured.
	var sepErr error
	for _, sr := range separate {
		if ctx.Err() != nil {
			break
		}
		if err := sr.run(ctx, o, raw, dir); err != nil {
			raw.Notes = append(raw.Notes, sr.what+" failed: "+err.Error())
			sepErr = joinErr(sepErr, fmt.Errorf("%s: %w", sr.what, err))
		}
	}
	raw.Finished = time.Now().UTC()
	if err := WriteReport(dir, raw); err != nil {
		return nil, err
	}
	if sepErr != nil {
		return nil, fmt.Errorf("%w (the report of what ran is in %s)", sepErr, dir)
	}
	return &Result{Dir: dir, Raw: raw}, nil
}

// separateRun is a group of experiments that does not fit the path
// experiments' deployment (a cluster of its own, containers that move):
// it runs after them, selected by its name in --only and in the full run.
type separateRun struct {
	name, what string
	run        func(ctx context.Context, o Options, raw *Raw, dir string) error
}

// separateRuns in the order they run: the migrations' minute before
// Kubernetes' several.
var separateRuns = []separateRun{
	{MigrateName, "the migration experiment", runMigrate},
	{KubeName, "the Kubernetes experiments", func(ctx context.Context, o Options, raw *Raw, _ string) error { return runKube(ctx, o, raw) }},
}

// selectRun returns the separate runs (each named in --only, or all in a
// full run of everything) and the path experiments that run.
func selectRun(o Options) ([]separateRun, []Experiment, error) {
	var sep []separateRun
	names := slices.Clone(o.Only)
	for _, sr := range separateRuns {
		named := slices.Contains(names, sr.name)
		names = slices.DeleteFunc(names, func(n string) bool { return n == sr.name })
		if named || (len(o.Only) == 0 && !o.Quick) {
			sep = append(sep, sr)
		}
	}
	if len(o.Only) > 0 && len(names) == 0 {
		return sep, nil, nil
	}
	exps, err := SelectExperiments(names, o.Quick)
	return sep, exps, err
}

// runPaths measures the path experiments on a cluster of the CLI's
// (brought up and removed here unless o names one).
func runPaths(ctx context.Context, o Options, raw *Raw, exps []Experiment, paths []Path) (err error) {
	ffmem, err := findFFMem(o.Bin, exps)
	if err != nil {
		return err
	}
	c, err := openCluster(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = joinErr(err, c.close()) }()
	t, err := makeTools(ffmem, o.Bin, c.cli.Cluster)
	if err != nil {
		return err
	}
	defer func() { err = joinErr(err, t.remove()) }()
	raw.Setup.Cluster, raw.Setup.OwnCluster = c.cli.Cluster, c.own
	env := toolEnv{Script: string(connrateScript), Tools: t.dir, Full: !o.Quick, Missing: prepareAll(ctx, exps, t.dir)}
	return measure(ctx, o, c, raw, env, exps, paths)
}

// pathsFor keeps the paths at least one experiment runs on.
func pathsFor(exps []Experiment, paths []Path) []Path {
	var out []Path
	for _, p := range paths {
		if slices.ContainsFunc(exps, func(e Experiment) bool { return e.applies(p) }) {
			out = append(out, p)
		}
	}
	return out
}

// measure deploys the servers and clients, sets congestion control and runs
// the schedule, filling raw.
func measure(ctx context.Context, o Options, c *benchCluster, raw *Raw, env toolEnv, exps []Experiment, paths []Path) (err error) {
	fmt.Fprintf(o.Log, "bench: starting servers and clients in cluster %s\n", c.cli.Cluster)
	r := &runner{cli: c.cli, env: env, pin: defaultPinning(), seconds: max(1, int(o.Duration.Round(time.Second)/time.Second)),
		runCC: o.CC, machCC: raw.Machine.DefaultCC}
	pl := plan(runnable(exps, env.Missing), paths, env, !o.Quick)
	pl.Volumes = []string{env.Tools}
	dep, err := Deploy(ctx, c.cli, c.state, state.RandomName("b", 4), r.pin, pl)
	if err != nil {
		return err
	}
	r.dep = dep
	defer func() { err = joinErr(err, dep.Teardown()...) }()
	for _, s := range pl.Servers {
		raw.Setup.Servers = append(raw.Setup.Servers, displayServer(r.pin, s, env.Script))
	}
	if err := r.shapeIfNeeded(ctx, c, exps, paths); err != nil {
		return err
	}
	if r.shaper != nil {
		defer func() { err = joinErr(err, r.shaper.Clear(context.Background())) }()
	}
	r.cc = newCCSwitch(dep.NetNSPaths())
	defer func() { err = joinErr(err, r.cc.Restore(context.Background())) }()
	if err := setCC(ctx, raw, r.cc, o.CC); err != nil {
		return err
	}
	r.env.CC = uniformCC(raw.Setup.CCUsed)
	raw.Setup.Pinning = r.pin.String()
	for _, p := range paths {
		raw.Paths = append(raw.Paths, dep.Describe(p))
	}
	return runSchedule(ctx, o, r, raw, Schedule(exps, paths, o.Reps, !o.Quick, !o.Quick))
}

// runSchedule runs the jobs in order, logging each result.
func runSchedule(ctx context.Context, o Options, r *runner, raw *Raw, jobs []Job) error {
	start := time.Now()
	for i, j := range jobs {
		s := r.run(ctx, j)
		if ctx.Err() != nil {
			return fmt.Errorf("bench interrupted: %w", ctx.Err())
		}
		fmt.Fprintf(o.Log, "bench: [%d/%d %3.0fs] %s\n", i+1, len(jobs), time.Since(start).Seconds(), progressLine(s))
		raw.Samples = append(raw.Samples, s...)
	}
	return nil
}

// setCC sets the run's congestion control in every namespace and records
// what each one uses.
func setCC(ctx context.Context, raw *Raw, cc *ccSwitch, algo string) error {
	used, err := cc.set(ctx, algo)
	if err != nil {
		return err
	}
	if note := cc.AllowedChange(); note != "" {
		raw.Setup.CCAllowed = note
	}
	if uniformCC(used) == "" {
		raw.Notes = append(raw.Notes, "namespaces use different congestion control algorithms: see setup")
	}
	raw.Setup.CCUsed = used
	return nil
}

// shapeIfNeeded prepares the fabric shaper when a shaped experiment runs
// on some path.
func (r *runner) shapeIfNeeded(ctx context.Context, c *benchCluster, exps []Experiment, paths []Path) error {
	for _, e := range exps {
		for _, p := range paths {
			if e.Shaped && e.applies(p) {
				sh, err := newFabricShaper(ctx, c.state)
				r.shaper = sh
				return err
			}
		}
	}
	return nil
}

// plan lists the servers of the selected experiments (each once, by port)
// and how many pairs each path needs.
func plan(exps []Experiment, paths []Path, env toolEnv, full bool) Plan {
	pl := Plan{Paths: paths, Pairs: pairsPerPath(exps, paths, full)}
	seen, seenScaled := map[int]bool{0: true}, map[int]bool{}
	for _, e := range exps {
		s := e.Server(env)
		if !seen[s.Port] {
			seen[s.Port] = true
			pl.Servers = append(pl.Servers, s)
		}
		if e.Combine != nil && !seenScaled[s.Port] {
			seenScaled[s.Port] = true
			pl.Scaled = append(pl.Scaled, s)
		}
	}
	return pl
}

// prepareOut makes the run's result directory and puts connrate.py there,
// so the commands in the report refer to a file that is kept with them.
func prepareOut(out string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(out, time.Now().UTC().Format("20060102T150405Z")))
	if err != nil {
		return "", fmt.Errorf("result directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create result directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "connrate.py"), connrateScript, 0o755); err != nil {
		return "", fmt.Errorf("write connrate.py: %w", err)
	}
	return dir, nil
}

// joinErr adds cleanup errors to err without hiding it.
func joinErr(err error, more ...error) error {
	for _, m := range more {
		if m != nil {
			if err == nil {
				err = m
			} else {
				err = fmt.Errorf("%w; also: %v", err, m)
			}
		}
	}
	return err
}
