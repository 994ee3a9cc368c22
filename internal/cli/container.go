package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/freeflow-net/freeflow/internal/container"
)

func init() {
	register("run", command{
		summary:   "start a container: run --host H --name N [--tenant T] [-d] [--rm] [--no-freeflow] [--no-shm] [--no-rdma] [--env K=V]... [-v SRC:DST[:ro]]... -- CMD ARGS...",
		run:       runContainer,
		needsRoot: true,
	})
	register("exec", command{summary: "run a command in a running container: exec NAME -- CMD ARGS...", run: execContainer, needsRoot: true})
	register("rm", command{summary: "remove containers: rm [-f] NAME...", run: removeContainers, needsRoot: true})
	register("ps", command{summary: "list containers: ps [-o json]", run: listContainers, needsRoot: true})
	register("logs", command{summary: "print a detached container's output: logs NAME", run: containerLogs, needsRoot: true})
}

func (g *Global) containers() *container.Manager {
	return &container.Manager{Layout: g.Layout(), Stdin: os.Stdin, Stdout: g.Out, Stderr: g.Err}
}

// envList collects repeated --env K=V flags.
type envList []string

func (e *envList) String() string { return strings.Join(*e, ",") }

func (e *envList) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q is not K=V", v)
	}
	*e = append(*e, v)
	return nil
}

func runContainer(g *Global, args []string) error {
	fs := newFlags(g, "run")
	o := container.RunOptions{}
	fs.StringVar(&o.Host, "host", "", "host to run on (h1, h2, ...)")
	fs.StringVar(&o.Name, "name", "", "container name, unique in the cluster; resolves to its IP in every container")
	fs.StringVar(&o.Tenant, "tenant", "default", "tenant the container belongs to")
	fs.BoolVar(&o.Detach, "d", false, "run in the background; output goes to `freeflow logs NAME`")
	fs.BoolVar(&o.Remove, "rm", false, "remove the container when it exits")
	noFF := fs.Bool("no-freeflow", false, "run without the FreeFlow library (overlay only)")
	fs.BoolVar(&o.NoShm, "no-shm", false, "same-host fast paths of this container use a kernel socket pair, never shared memory")
	fs.BoolVar(&o.NoRDMA, "no-rdma", false, "no virtual RDMA (verbs) device in the container")
	var env envList
	fs.Var(&env, "env", "set an environment variable K=V (repeatable)")
	fs.Func("v", "bind-mount a host path: SRC:DST[:ro] (repeatable; DST must exist or be under /tmp or /run)", func(s string) error {
		v, err := container.ParseVolume(s)
		o.Volumes = append(o.Volumes, v)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.FreeFlow, o.Env, o.Args = !*noFF, env, fs.Args()
	switch {
	case o.Host == "" || o.Name == "" || len(o.Args) == 0:
		return fmt.Errorf("%w: freeflow run --host H --name N [options] -- CMD ARGS...", errUsage)
	case o.Detach && o.Remove:
		return fmt.Errorf("%w: --rm applies to foreground containers; remove a detached one with `freeflow rm -f`", errUsage)
	}
	code, err := g.containers().Run(context.Background(), o)
	if err != nil {
		return err
	}
	if o.Detach {
		fmt.Fprintln(g.Out, o.Name)
	}
	return exitOf(code)
}

func execContainer(g *Global, args []string) error {
	fs := newFlags(g, "exec")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return fmt.Errorf("%w: freeflow exec NAME -- CMD ARGS...", errUsage)
	}
	rest := fs.Args()[1:]
	if rest[0] == "--" {
		rest = rest[1:]
	}
	code, err := g.containers().Exec(fs.Arg(0), rest)
	if err != nil {
		return err
	}
	return exitOf(code)
}

// exitOf makes a non-zero container exit code the CLI's exit code.
func exitOf(code int) error {
	if code != 0 {
		return exitStatus(code)
	}
	return nil
}

func removeContainers(g *Global, args []string) error {
	fs := newFlags(g, "rm")
	force := fs.Bool("f", false, "stop running containers first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: freeflow rm [-f] NAME...", errUsage)
	}
	m := g.containers()
	var failed []string
	for _, name := range fs.Args() {
		if err := m.Remove(context.Background(), name, *force); err != nil {
			fmt.Fprintf(g.Err, "freeflow rm: %v\n", err)
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not remove %s", strings.Join(failed, ", "))
	}
	return nil
}

func listContainers(g *Global, args []string) error {
	fs := newFlags(g, "ps")
	format := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("%w: -o table or -o json", errUsage)
	}
	if _, err := g.Layout().LoadCluster(); err != nil {
		return err
	}
	list, err := g.containers().List()
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	return printContainers(g.Out, list)
}

func printContainers(w io.Writer, list []container.Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST\tIP\tTENANT\tPID\tSTATUS")
	for _, c := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", c.Name, c.Host, c.IP, c.Tenant, c.PID, c.Status)
	}
	return tw.Flush()
}

func containerLogs(g *Global, args []string) error {
	fs := newFlags(g, "logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: freeflow logs NAME", errUsage)
	}
	m := g.containers()
	if _, err := m.Layout.LoadContainer(fs.Arg(0)); err != nil {
		return err
	}
	f, err := os.Open(m.LogFile(fs.Arg(0)))
	if err != nil {
		return fmt.Errorf("container %s has no log (only detached containers log): %w", fs.Arg(0), err)
	}
	defer f.Close()
	_, err = io.Copy(g.Out, f)
	return err
}
