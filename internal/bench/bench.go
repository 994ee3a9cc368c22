// Package bench is `freeflow bench`: it measures the container network
// paths of a cluster side by side and writes raw.json and report.md.
//
// Design: the machine is shared and noisy, so absolute numbers mean little
// and ratios between paths measured in the same run mean much. Every path
// is a table entry (path.go) saying where the server and the client run;
// every experiment (experiment.go) is a real tool with a server started
// once per server site and a client run per case, path and repetition.
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
		o.Duration = 1 * time.Second
		if !o.Quick {
			o.Duration = 3 * time.Second
		}
	}
	if o.Reps == 0 {
		// sockperf sleeps 2 s after connecting, so a 1 s latency run costs
		// over 3 s: two rounds is what fits the quick run in 2 minutes.
		o.Reps = 2
		if !o.Quick {
			o.Reps = 5
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

// Run measures every selected experiment on every selected path.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	o.defaults()
	exps, err := SelectExperiments(o.Only)
	if err != nil {
		return nil, err
	}
	paths, err := SelectPaths(o.Paths)
	if err != nil {
		return nil, err
	}
	dir, err := prepareOut(o.Out)
	if err != nil {
		return nil, err
	}
	c, err := openCluster(ctx, o)
	if err != nil {
		return nil, err
	}
	defer func() { err = joinErr(err, c.close()) }()

	raw := newRaw(o, c, exps)
	if err := measure(ctx, o, c, raw, toolEnv{Script: string(connrateScript)}, exps, paths); err != nil {
		return nil, err
	}
	if err := writeResults(dir, raw); err != nil {
		return nil, err
	}
	return &Result{Dir: dir, Raw: raw}, nil
}

// measure deploys the servers and clients, sets congestion control and runs
// the schedule, filling raw.
func measure(ctx context.Context, o Options, c *benchCluster, raw *Raw, env toolEnv, exps []Experiment, paths []Path) (err error) {
	fmt.Fprintf(o.Log, "bench: starting servers and clients in cluster %s\n", c.cli.Cluster)
	pin := defaultPinning()
	servers := serverCommands(exps, env)
	dep, err := Deploy(ctx, c.cli, c.state, state.RandomName("b", 4), pin, servers, paths)
	if err != nil {
		return err
	}
	for _, s := range servers {
		raw.Setup.Servers = append(raw.Setup.Servers, displayCommand(pin.server(s), env.Script))
	}
	defer func() { err = joinErr(err, dep.Teardown()...) }()
	used, cc, err := SetCC(ctx, dep.NetNSPaths(), o.CC)
	defer func() { err = joinErr(err, cc.Restore(context.Background())) }()
	if err != nil {
		return err
	}
	if note := cc.AllowedChange(); note != "" {
		raw.Setup.CCAllowed = note
	}
	env.CC = uniformCC(used)
	if env.CC == "" {
		raw.Notes = append(raw.Notes, "namespaces use different congestion control algorithms: see setup")
	}
	raw.Setup.CCUsed, raw.Setup.Pinning = used, pin.String()
	for _, p := range paths {
		raw.Paths = append(raw.Paths, dep.Describe(p))
	}
	jobs := Schedule(exps, paths, o.Reps, !o.Quick, true)
	seconds := max(1, int(o.Duration.Round(time.Second)/time.Second))
	for i, j := range jobs {
		s := runJob(ctx, dep, env, j, seconds)
		if ctx.Err() != nil {
			return fmt.Errorf("bench interrupted: %w", ctx.Err())
		}
		fmt.Fprintf(o.Log, "bench: [%d/%d] %s\n", i+1, len(jobs), progressLine(s))
		raw.Samples = append(raw.Samples, s)
	}
	raw.Finished = time.Now().UTC()
	return nil
}

// serverCommands are the servers of the selected experiments.
func serverCommands(exps []Experiment, env toolEnv) [][]string {
	var out [][]string
	for _, e := range exps {
		out = append(out, e.Server(env))
	}
	return out
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

// writeResults saves raw.json and report.md rendered from it.
func writeResults(dir string, raw *Raw) error {
	if err := SaveRaw(filepath.Join(dir, "raw.json"), raw); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(RenderMarkdown(raw)), 0o644)
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
