package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/freeflow-net/freeflow/internal/bench"
)

func init() {
	register("bench", command{
		summary: "measure the network paths side by side: bench [--quick] [--only EXPS] [--paths PATHS] [--out DIR] [--cc ALGO]",
		run:     runBench,
		// Not needsRoot: re-rendering a report (--report) needs no root;
		// measuring checks for root itself.
	})
}

// hiddenBenchFlags are for tests and debugging, not in the usage text.
var hiddenBenchFlags = map[string]bool{"duration": true, "reps": true}

func runBench(g *Global, args []string) error {
	fs := newFlags(g, "bench")
	var o bench.Options
	fs.BoolVar(&o.Quick, "quick", false, "the short run (< 2 min) `make demo` ends with")
	only := fs.String("only", "", "comma-separated experiments: "+benchNames(bench.Experiments, func(e bench.Experiment) string { return e.Info.Name })+
		", "+bench.MigrateName+" (freeflow migrate of a 64, 256 and 1024 MiB redis-server between hosts while peers on both hold a connection: their slowest reply, CRIU's dump and restore; needs CRIU 4)"+
		", "+bench.KubeName+" (FreeFlow on a two-node Kubernetes: install time, pod start, redis between pods; needs `make kubelab`)"+
		" (default all; --quick: "+benchNames(quickExperiments(), func(e bench.Experiment) string { return e.Info.Name })+")")
	paths := fs.String("paths", "", "comma-separated paths: "+benchNames(bench.Paths, func(p bench.Path) string { return p.Name })+" (default all)")
	fs.StringVar(&o.Out, "out", "results", "results go to DIR/<UTC time>/{raw.json,report.md,*.png}")
	fs.StringVar(&o.CC, "cc", "cubic", "TCP congestion control set in the cluster's namespaces, or \"default\" to leave them as they are (throughput-default-cc always runs under the machine's default)")
	report := fs.String("report", "", "re-render report.md and the plots next to this raw.json and print the table; measures nothing")
	fs.DurationVar(&o.Duration, "duration", 0, "seconds per client run (whole seconds)")
	fs.IntVar(&o.Reps, "reps", 0, "interleaved repetitions")
	fs.Usage = func() { benchUsage(fs) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	if *report != "" {
		return rerender(g, *report)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("must run as root (it brings up a cluster of network namespaces and containers); try sudo")
	}
	return measureBench(g, o, commaList(*only), commaList(*paths))
}

func measureBench(g *Global, o bench.Options, only, paths []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the freeflow binary the bench drives: %w", err)
	}
	o.Bin, o.Only, o.Paths, o.Log = exe, only, paths, g.Err
	// --cluster NAME measures that cluster; without it the bench makes its
	// own, so it never disturbs the containers of the default cluster.
	if g.ClusterSet {
		o.Cluster = g.Cluster
	}
	// Ctrl-C cancels the run; Run still removes everything it made.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Out, "\n%s\nreport: %s\n", bench.RenderTable(res.Raw), filepath.Join(res.Dir, "report.md"))
	return nil
}

// rerender rebuilds report.md and the plots from raw.json, e.g. after the
// report format changed, and prints the table.
func rerender(g *Global, rawPath string) error {
	raw, err := bench.LoadRaw(rawPath)
	if err != nil {
		return err
	}
	dir := filepath.Dir(rawPath)
	if err := bench.RenderReport(dir, raw); err != nil {
		return err
	}
	fmt.Fprintf(g.Out, "%s\nreport: %s\n", bench.RenderTable(raw), filepath.Join(dir, "report.md"))
	return nil
}

func quickExperiments() []bench.Experiment {
	exps, _ := bench.SelectExperiments(nil, true)
	return exps
}

// benchNames joins the names of a bench table for the usage text.
func benchNames[T any](table []T, name func(T) string) string {
	var out []string
	for _, e := range table {
		out = append(out, name(e))
	}
	return strings.Join(out, ",")
}

func benchUsage(fs *flag.FlagSet) {
	fmt.Fprintf(fs.Output(), "usage: freeflow [--cluster NAME] bench [options]\n\n"+
		"Brings up its own 2-host cluster (unless --cluster names one), measures every path\n"+
		"side by side and removes the cluster again.\n\noptions:\n")
	fs.VisitAll(func(f *flag.Flag) {
		if hiddenBenchFlags[f.Name] {
			return
		}
		fmt.Fprintf(fs.Output(), "  --%s\n    \t%s", f.Name, f.Usage)
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(fs.Output(), " (default %q)", f.DefValue)
		}
		fmt.Fprintln(fs.Output())
	})
}
