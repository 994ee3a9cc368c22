package bench

import (
	"fmt"
	"os"
	"path/filepath"
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
