package container

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/state"
)

// checkProvider refuses to give a container a verbs device without the
// provider (ffspec, "The virtual verbs device").
func (m *Manager) checkProvider() (string, error) {
	lib, err := m.libraryPath()
	if err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Dir(lib), ffspec.ProviderName)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the FreeFlow verbs provider %s is missing (%w); build it with `make build`, or run the container with --no-rdma", path, err)
	}
	return path, nil
}

// withVerbs gives container c its verbs device, its tree written into its
// directory.
func withVerbs(spec *ociSpec, l state.Layout, c *state.Container, provider string) error {
	dir := filepath.Join(l.ContainerDir(c.Name), "verbs")
	if err := ffspec.WriteVerbsTree(dir, c.IP, cni.ContainerIfName); err != nil {
		return err
	}
	mounts, env := ffspec.Verbs(dir, provider)
	spec.Mounts = append(spec.Mounts, mounts...)
	spec.Process.Env = append(spec.Process.Env, env...)
	return nil
}
