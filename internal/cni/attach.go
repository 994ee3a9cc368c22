package cni

import (
	"context"
	"errors"
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

// Add runs ADD over the whole chain and returns the container's IP. If the
// chain fails partway (the freeflow plugin cannot reach the agent, say),
// what the plugins before it made is undone (CNI DEL: bridge removes the
// veth, host-local releases the address), so a failed Add leaves nothing.
func (n Network) Add(ctx context.Context, a Attachment) (net.IP, error) {
	list, cfg, err := n.load()
	if err != nil {
		return nil, err
	}
	rt := n.runtimeConf(a)
	var res *current.Result
	err = netns.Do(state.NetNSPath(n.Layout.HostNetNS(n.Host)), func() error {
		r, err := cfg.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err == nil {
		for _, ipc := range res.IPs {
			if ipc.Address.IP.To4() != nil {
				return ipc.Address.IP, nil
			}
		}
		err = errors.New("CNI ADD returned no IPv4 address")
	}
	err = fmt.Errorf("attach %s to the network of %s (CNI ADD): %w", a.Name, n.Host, err)
	// The plugin whose ADD failed cleaned up after itself (CNI requires it)
	// and the later ones never ran: only an error of the first plugin's DEL
	// means something is left.
	if released, derr := n.del(ctx, list, cfg, rt); !released {
		err = fmt.Errorf("%w; undoing it failed too, remove the container with `freeflow rm -f %s`: %v", err, a.Name, derr)
	}
	return nil, err
}

// Del runs DEL over the whole chain from its last plugin down and stops at
// the first that fails (the freeflow plugin when the agent cannot take the
// container out of the directory): the plugins before it keep what they
// hold, so the attachment stays whole and Del can be repeated once the
// cause is fixed. It succeeds for containers that are already detached.
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

// Discard runs DEL for an attachment that is being abandoned (its
// container failed to start): a plugin whose DEL fails does not keep the
// plugins before it from releasing what they hold.
func (n Network) Discard(ctx context.Context, a Attachment) error {
	list, cfg, err := n.load()
	if err != nil {
		return err
	}
	if _, err := n.del(ctx, list, cfg, n.runtimeConf(a)); err != nil {
		return fmt.Errorf("detach %s from the network of %s (CNI DEL): %w", a.Name, n.Host, err)
	}
	return nil
}

// del runs DEL from the chain's last plugin down. libcni stops at the first
// plugin that fails; then the chain without it is deleted again (DEL is
// idempotent), so the freeflow plugin failing to reach its agent still lets
// bridge and host-local free the veth and the address. released says
// whether the first plugin's DEL succeeded; err joins every failure.
func (n Network) del(ctx context.Context, list *libcni.NetworkConfigList, cfg *libcni.CNIConfig, rt *libcni.RuntimeConf) (released bool, err error) {
	var errs []error
	for end := len(list.Plugins); end > 0 && !released; end-- {
		sub := *list
		sub.Plugins = list.Plugins[:end]
		err := netns.Do(state.NetNSPath(n.Layout.HostNetNS(n.Host)), func() error {
			return cfg.DelNetworkList(ctx, &sub, rt)
		})
		if err != nil {
			errs = append(errs, err)
		}
		released = err == nil
	}
	return released, errors.Join(errs...)
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
