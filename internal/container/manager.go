// Package container runs FreeFlow's containers with crun: each gets its own
// pid, ipc, uts, mount and network namespaces, the host's file system
// read-only, and an interface on its host's bridge attached through CNI.
//
// A container's files live in Layout.ContainerDir(name): container.json (the
// record), config.json + rootfs/ (the OCI bundle), pid and log. Its network
// namespace is Layout.ContainerNetNS(name) and its crun id is
// "<cluster>-<name>", which is also its id in the directory and the name of
// its cgroups, so clusters never collide.
package container

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/state"
)

// Manager runs the containers of one cluster.
type Manager struct {
	Layout     state.Layout
	PluginPath []string // CNI plugin directories; cni.DefaultPluginPath() when empty
	LibPath    string   // libfreeflow.so on the host; next to the freeflow binary when empty
	// Stdio of foreground containers and exec; nil means /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

func (m *Manager) runtime() runtime { return runtime{root: m.Layout.CrunRoot()} }

func (m *Manager) pluginPath() []string {
	if len(m.PluginPath) > 0 {
		return m.PluginPath
	}
	return cni.DefaultPluginPath()
}

func (m *Manager) network(host string) cni.Network {
	return cni.Network{Layout: m.Layout, Host: host, PluginPath: m.pluginPath()}
}

func (m *Manager) attachment(c *state.Container) cni.Attachment {
	return cni.Attachment{ContainerID: c.ID, NetNSPath: state.NetNSPath(m.Layout.ContainerNetNS(c.Name)),
		Name: c.Name, Tenant: c.Tenant, FreeFlow: c.FreeFlow, NoShm: c.NoShm}
}

// LogFile is where a detached container's output goes.
func (m *Manager) LogFile(name string) string {
	return filepath.Join(m.Layout.ContainerDir(name), "log")
}

func (m *Manager) pidFile(name string) string {
	return filepath.Join(m.Layout.ContainerDir(name), "pid")
}

// lock takes the cluster lock, refusing clusters that do not exist (Lock
// would otherwise create the cluster's directory).
func (m *Manager) lock() (func(), error) {
	if _, err := os.Stat(m.Layout.StateFile()); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cluster %q: %w (run `freeflow cluster up` first)", m.Layout.Cluster, state.ErrNoCluster)
	}
	return m.Layout.Lock()
}

// removeDir removes a container's directory. rootfs is removed with rmdir
// first: it is a mount point of the whole host file system inside crun's
// mount namespaces, and a recursive removal must never be able to descend
// into it should it ever be mounted here.
func removeDir(dir string) error {
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Remove(rootfs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s (is it still mounted?): %w", rootfs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
