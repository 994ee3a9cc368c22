package cni

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// SystemPluginDir holds Debian's containernetworking-plugins (bridge, host-local).
const SystemPluginDir = "/usr/lib/cni"

// DefaultPluginPath is where plugins are looked up: next to the running
// binary (freeflow-cni is installed beside freeflow), then Debian's plugins.
func DefaultPluginPath() []string {
	self, err := os.Executable()
	if err != nil {
		return []string{SystemPluginDir}
	}
	return []string{filepath.Dir(self), SystemPluginDir}
}

// Network attaches containers of one host through the host's configuration
// list. Plugins run inside the host's network namespace, where the bridge lives.
type Network struct {
	Layout     state.Layout
	Host       string
	PluginPath []string
}

// Attachment names one container's interface on the network.
type Attachment struct {
	ContainerID string
	NetNSPath   string // the container's network namespace
	Name        string
	Tenant      string
	FreeFlow    bool
	NoShm       bool // no shared-memory channels (`freeflow run --no-shm`)
}

// ContainerIfName is the container's interface on the overlay.
const ContainerIfName = "eth0"

// Add runs ADD over the whole chain and returns the container's IP.
func (n Network) Add(ctx context.Context, a Attachment) (net.IP, error) {
	list, cfg, err := n.load()
	if err != nil {
		return nil, err
	}
	var res *current.Result
	err = netns.Do(state.NetNSPath(n.Layout.HostNetNS(n.Host)), func() error {
		r, err := cfg.AddNetworkList(ctx, list, n.runtimeConf(a))
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach %s to the network of %s (CNI ADD): %w", a.Name, n.Host, err)
	}
	for _, ipc := range res.IPs {
		if ipc.Address.IP.To4() != nil {
			return ipc.Address.IP, nil
		}
	}
	return nil, fmt.Errorf("attach %s to the network of %s: CNI ADD returned no IPv4 address", a.Name, n.Host)
}

// Del runs DEL over the whole chain; it succeeds for containers that are
// already detached.
func (n Network) Del(ctx context.Context, a Attachment) error {
	list, cfg, err := n.load()
	if err != nil {
		return err
	}
	err = netns.Do(state.NetNSPath(n.Layout.HostNetNS(n.Host)), func() error {
		return cfg.DelNetworkList(ctx, list, n.runtimeConf(a))
	})
	if err != nil {
		return fmt.Errorf("detach %s from the network of %s (CNI DEL): %w", a.Name, n.Host, err)
	}
	return nil
}

func (n Network) load() (*libcni.NetworkConfigList, *libcni.CNIConfig, error) {
	list, err := libcni.ConfListFromFile(ConfListFile(n.Layout, n.Host))
	if err != nil {
		return nil, nil, fmt.Errorf("load CNI configuration of %s: %w", n.Host, err)
	}
	path := n.PluginPath
	if len(path) == 0 {
		path = DefaultPluginPath()
	}
	return list, libcni.NewCNIConfigWithCacheDir(path, cacheDir(n.Layout, n.Host), nil), nil
}

func (n Network) runtimeConf(a Attachment) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: a.ContainerID,
		NetNS:       a.NetNSPath,
		IfName:      ContainerIfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"FF_NAME", a.Name},
			{"FF_TENANT", a.Tenant},
			{"FF_FREEFLOW", strconv.FormatBool(a.FreeFlow)},
			{"FF_SHM", strconv.FormatBool(!a.NoShm)},
		},
	}
}
