package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/cluster"
	"github.com/freeflow-net/freeflow/internal/directory"
)

func init() {
	register("cluster", command{
		summary:   "bring a local cluster up (or repair one that is up: dead etcd, dead agents) or down: cluster up --hosts N [--etcd URLS] [--no-shm] [--shm-budget SIZE] [--no-agents] | cluster down",
		run:       runCluster,
		needsRoot: true,
	})
}

func runCluster(g *Global, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: freeflow cluster up --hosts N [--etcd URL[,URL...]] [--no-shm] [--shm-budget SIZE] | freeflow cluster down", errUsage)
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
	noAgents := fs.Bool("no-agents", false, "start no freeflowd on the hosts (the agents run elsewhere, e.g. as FreeFlow's DaemonSet on Kubernetes)")
	var set directory.Settings
	fs.BoolVar(&set.NoShm, "no-shm", false, "same-host fast paths use kernel socket pairs, never shared memory")
	fs.Func("shm-budget", "shared memory each container may hold in channels, e.g. 2G or 512M (default 8G)", func(s string) error {
		var err error
		set.ShmBudget, err = parseSize(s)
		return err
	})
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
		Settings: set,
		NoAgents: *noAgents,
		Progress: func(f string, a ...any) { fmt.Fprintf(g.Out, "  "+f+"\n", a...) },
	}
	// Ctrl-C cancels the waits; Up then tears down what it made (a repair
	// leaves what it started: `up` again finishes it).
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

// parseSize reads a byte count with an optional binary suffix K, M or G.
func parseSize(s string) (uint64, error) {
	digits, mult := s, uint64(1)
	if i := strings.IndexAny(s, "KMG"); i >= 0 && i == len(s)-1 {
		digits, mult = s[:i], 1<<(10*(strings.IndexByte("KMG", s[i])+1))
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n == 0 || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("%q is not a positive size such as 8G, 512M or 1048576", s)
	}
	return n * mult, nil
}

// plural returns word, with an "s" unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
