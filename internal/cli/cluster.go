package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/cluster"
)

func init() {
	register("cluster", command{
		summary:   "bring a local cluster up or down: cluster up --hosts N [--etcd URLS] | cluster down",
		run:       runCluster,
		needsRoot: true,
	})
}

func runCluster(g *Global, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: freeflow cluster up --hosts N [--etcd URL[,URL...]] | freeflow cluster down", errUsage)
	}
	switch args[0] {
	case "up":
		return clusterUp(g, args[1:])
	case "down":
		return clusterDown(g, args[1:])
	default:
		return fmt.Errorf("%w: unknown subcommand %q; use `cluster up` or `cluster down`", errUsage, args[0])
	}
}

func clusterUp(g *Global, args []string) error {
	fs := newFlags(g, "cluster up")
	hosts := fs.Int("hosts", 2, "number of simulated hosts")
	etcd := fs.String("etcd", "", "use this external etcd (comma-separated client URLs, dialed from the namespace freeflow runs in) instead of starting one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the freeflow binary (freeflowd must be next to it): %w", err)
	}
	opts := cluster.Options{
		Hosts:    *hosts,
		Etcd:     commaList(*etcd),
		BinDir:   filepath.Dir(exe),
		Progress: func(f string, a ...any) { fmt.Fprintf(g.Out, "  "+f+"\n", a...) },
	}
	// Ctrl-C cancels the waits; Up then tears down what it made.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := cluster.Up(ctx, g.Layout(), opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Out, "cluster %s up: %d %s in %.1fs\n", c.Name, len(c.Hosts), plural(len(c.Hosts), "host"), time.Since(start).Seconds())
	return nil
}

func clusterDown(g *Global, args []string) error {
	fs := newFlags(g, "cluster down")
	if err := fs.Parse(args); err != nil {
		return err
	}
	err := cluster.Down(g.Layout())
	if errors.Is(err, cluster.ErrNotFound) {
		// Down is idempotent: nothing to remove is success.
		fmt.Fprintf(g.Out, "cluster %s does not exist; nothing to remove\n", g.Cluster)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Out, "cluster %s down\n", g.Cluster)
	return nil
}

// plural returns word, with an "s" unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
