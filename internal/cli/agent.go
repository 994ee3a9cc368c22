package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/cluster"
)

func init() {
	register("agent", command{
		summary:   "stop, start or restart a host's agent: agent stop|start|restart --host H [--kill]",
		run:       runAgent,
		needsRoot: true,
	})
}

func runAgent(g *Global, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: freeflow agent stop|start|restart --host H [--kill]", errUsage)
	}
	verb := args[0]
	if verb != "stop" && verb != "start" && verb != "restart" {
		return fmt.Errorf("%w: unknown subcommand %q; use stop, start or restart", errUsage, verb)
	}
	fs := newFlags(g, "agent "+verb)
	host := fs.String("host", "", "the host whose agent to act on (required)")
	kill := fs.Bool("kill", false, "stop with SIGKILL, as a crash would, instead of SIGTERM")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *host == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: freeflow agent %s --host H", errUsage, verb)
	}
	l := g.Layout()
	unlock, err := l.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	c, err := l.LoadCluster()
	if err != nil {
		return err
	}
	if verb != "start" {
		if err := cluster.StopAgent(l, c, *host, *kill); err != nil {
			return err
		}
	}
	if verb == "stop" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the freeflow binary (freeflowd must be next to it): %w", err)
	}
	return cluster.StartAgent(context.Background(), l, c, filepath.Dir(exe), *host)
}
