package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"

	"github.com/freeflow-net/freeflow/internal/container"
)

// CLI drives a cluster through the freeflow binary itself, the way a user
// would, so the bench measures exactly what `freeflow run` builds.
type CLI struct {
	Bin     string // path of the freeflow binary
	Cluster string
}

func (c CLI) command(args ...string) *exec.Cmd {
	return exec.Command(c.Bin, append([]string{"--cluster", c.Cluster}, args...)...)
}

func (c CLI) run(ctx context.Context, args ...string) ([]byte, error) {
	return runCmd(ctx, c.command(args...))
}

// Up brings the cluster up with hosts hosts.
func (c CLI) Up(ctx context.Context, hosts int) error {
	_, err := c.run(ctx, "cluster", "up", "--hosts", fmt.Sprint(hosts))
	return err
}

// Down removes the cluster and everything in it.
func (c CLI) Down(ctx context.Context) error {
	_, err := c.run(ctx, "cluster", "down")
	return err
}

// runOpts are how the bench runs a container.
type runOpts struct {
	FreeFlow bool     // with the FreeFlow library; without it, overlay only
	NoShm    bool     // FreeFlow, but same-host connections stay on the kernel channel
	Volumes  []string // host directories mounted read-only at the same path
}

// RunDetached starts a detached container.
func (c CLI) RunDetached(ctx context.Context, host, name, tenant string, o runOpts, argv []string) error {
	args := []string{"run", "--host", host, "--name", name, "--tenant", tenant, "-d"}
	if !o.FreeFlow {
		args = append(args, "--no-freeflow")
	}
	if o.NoShm {
		args = append(args, "--no-shm")
	}
	for _, v := range o.Volumes {
		args = append(args, "-v", v+":"+v+":ro")
	}
	args = append(append(args, "--"), argv...)
	_, err := c.run(ctx, args...)
	return err
}

// Remove force-removes a container.
func (c CLI) Remove(ctx context.Context, name string) error {
	_, err := c.run(ctx, "rm", "-f", name)
	return err
}

// Exec returns the command that runs argv inside container name.
func (c CLI) Exec(name string, argv []string) *exec.Cmd {
	return c.command(append([]string{"exec", name, "--"}, argv...)...)
}

// PS lists the cluster's containers.
func (c CLI) PS(ctx context.Context) ([]container.Info, error) {
	out, err := c.run(ctx, "ps", "-o", "json")
	if err != nil {
		return nil, err
	}
	var ps []container.Info
	if err := json.Unmarshal(out, &ps); err != nil {
		return nil, fmt.Errorf("parse `freeflow ps -o json` output: %w", err)
	}
	return ps, nil
}
