package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/freeflow-net/freeflow/internal/openmpi"
)

// tools is the run's tools directory: a copy of ffmem and the Open MPI
// launch agent. Every bench container mounts it at the same path, so one
// command line works on the host and in containers (which have a private
// /tmp, and may not see where bin/ is), and orteds find the agent where
// mpirun has it.
type tools struct{ dir string }

// findFFMem returns the ffmem next to the freeflow binary, or "" when no
// selected experiment needs it.
func findFFMem(bin string, exps []Experiment) (string, error) {
	if !slices.ContainsFunc(exps, func(e Experiment) bool { return e.UsesFFMem }) {
		return "", nil
	}
	path := filepath.Join(filepath.Dir(bin), "ffmem")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the bench's measuring program is missing (%w): build it with `make build`, which puts ffmem next to freeflow", err)
	}
	return path, nil
}

// makeTools fills a fresh tools directory.
func makeTools(ffmem, bin, cluster string) (*tools, error) {
	dir, err := os.MkdirTemp("", "ffbench-tools-")
	if err != nil {
		return nil, fmt.Errorf("make the bench's tools directory: %w", err)
	}
	t := &tools{dir: dir}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, joinErr(fmt.Errorf("open the bench's tools directory: %w", err), t.remove())
	}
	if ffmem != "" {
		b, err := os.ReadFile(ffmem)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "ffmem"), b, 0o755)
		}
		if err != nil {
			return nil, joinErr(fmt.Errorf("copy ffmem into the tools directory: %w", err), t.remove())
		}
	}
	if _, err := openmpi.WriteAgent(dir, bin, cluster); err != nil {
		return nil, joinErr(err, t.remove())
	}
	return t, nil
}

func (t *tools) remove() error {
	if err := os.RemoveAll(t.dir); err != nil {
		return fmt.Errorf("remove the bench's tools directory: %w", err)
	}
	return nil
}

// caps is what the freeflow binary the bench drives can do. Other parts of
// the project grow alongside the bench; it adapts to what is there and
// says so in the report, rather than failing or guessing.
type caps struct {
	conns bool // `freeflow conns`: the paths FreeFlow connections took are checked
	noShm bool // `freeflow run --no-shm`: a FreeFlow container can be kept off shared memory
}

func detectCaps(ctx context.Context, cli CLI) caps {
	help, _ := exec.CommandContext(ctx, cli.Bin, "run", "--help").CombinedOutput()
	return caps{conns: hasConns(ctx, cli), noShm: hasFlag(string(help), "no-shm")}
}

// hasFlag reports whether a Go flag usage text lists flag name.
func hasFlag(usage, name string) bool {
	return regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(name) + `(\s|$)`).MatchString(usage)
}

// notes are the run-level notes the missing capabilities call for.
func (c caps) notes() []string {
	var n []string
	if !c.conns {
		n = append(n, "this freeflow has no `conns` command: the paths FreeFlow connections took were NOT checked")
	}
	if !c.noShm {
		n = append(n, "this freeflow's `run` has no --no-shm flag, so it has no shared-memory channel yet: the freeflow path was checked against the unix channel, and freeflow-unix (the same channel, forced) was not measured")
	}
	return n
}

// adaptPaths returns the paths the run can measure as this freeflow
// stands, and why it cannot measure the others.
func adaptPaths(paths []Path, c caps) ([]Path, map[string]string) {
	var run []Path
	skipped := map[string]string{}
	for _, p := range paths {
		switch {
		case c.noShm:
		case noShmPath(p):
			skipped[p.Name] = "NOT MEASURED: `freeflow run` has no --no-shm flag yet, so a FreeFlow container cannot be kept off shared memory"
			continue
		case p.Expect == "shm":
			p.Expect = "unix"
			p.About += " (this freeflow has no shared-memory channel yet, so: a Unix socket)"
		}
		run = append(run, p)
	}
	return run, skipped
}

// adapted returns p as adaptPaths left it in run.
func adapted(run []Path, p Path) Path {
	for _, q := range run {
		if q.Name == p.Name {
			return q
		}
	}
	return p
}
