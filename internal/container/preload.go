package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/state"
)

// libraryPath returns the host's copy of the library: LibPath, or the file
// next to the running freeflow binary (`make build` puts both in bin/).
func (m *Manager) libraryPath() (string, error) {
	if m.LibPath != "" {
		return m.LibPath, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the freeflow binary, next to which %s lives: %w", ffspec.LibraryName, err)
	}
	return filepath.Join(filepath.Dir(exe), ffspec.LibraryName), nil
}

// checkLibrary refuses to start a FreeFlow container without the library.
func (m *Manager) checkLibrary() (string, error) {
	path, err := m.libraryPath()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the FreeFlow library %s is missing (%w); build it with `make build`, or run the container with --no-freeflow", path, err)
	}
	return path, nil
}

// withLibrary adds the library's mount and LD_PRELOAD to spec (the
// container's environment, so every process and each `freeflow exec` has it).
func withLibrary(spec *ociSpec, lib string) {
	spec.Mounts = append(spec.Mounts, ffspec.LibraryMount(lib))
	spec.Process.Env = ffspec.Preload(spec.Process.Env)
}

// execEnv is the environment of `freeflow exec` in container c: the
// container's own (from its bundle, so LD_PRELOAD and --env values carry
// over). crun exec replaces the environment as soon as one --env is given,
// so all of it is passed.
func (m *Manager) execEnv(c *state.Container) []string {
	var spec ociSpec
	b, err := os.ReadFile(filepath.Join(m.Layout.ContainerDir(c.Name), "config.json"))
	if err == nil && json.Unmarshal(b, &spec) == nil && len(spec.Process.Env) > 0 {
		return spec.Process.Env
	}
	env := append([]string{}, baseEnv...)
	if c.FreeFlow {
		env = ffspec.Preload(env)
	}
	return env
}
