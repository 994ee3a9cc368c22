// Package nodeinstall is `freeflowd install`, which the FreeFlow
// DaemonSet's init container runs on every Kubernetes node, as Flannel's
// and Cilium's do: it copies the CNI plugin into the node's CNI bin
// directory, the library, the verbs provider and the runtime wrapper into
// FreeFlow's directory (/opt/freeflow), writes the wrapper's
// configuration, the runtime handler "freeflow" (the wrapper in runc's
// place) into containerd's config.toml, and the network configuration list (bridge +
// host-local on the node's pod CIDR, then freeflow-cni), last: a CNI
// runtime takes a node whose list is there for ready to run pods.
//
// Every file is written whole (a new file renamed over the old one: a
// running container keeps mapping the library it started with) and only
// when it differs, so running it again changes nothing. A directory that
// is missing is refused: on a node it is a host path the DaemonSet did not
// mount, and making it would hide the mistake.
package nodeinstall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/atomicfile"
	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/runtimewrap"
)

// Files the installer copies from its own directory (the image's, or bin/
// after `make build`).
const (
	pluginBin  = cni.PluginType
	wrapperBin = "freeflow-runtime"
	// ConfListName sorts before most lists, as a CNI runtime uses the first.
	ConfListName = "10-" + cni.NetworkName + ".conflist"
)

// Options say where things go on the node, and what the node is.
type Options struct {
	From             string // the directory holding the files to install
	CNIBinDir        string
	CNIConfDir       string
	Dir              string // FreeFlow's directory: library, provider, wrapper
	ContainerdConfig string // containerd's config.toml, which gets the runtime handler
	Cluster, Node    string
	PodCIDR          string   // the node's; "" asks the API server (in-cluster)
	Routes           []string // what pods reach through their bridge
	Runtime          string   // the real OCI runtime; "" = runc from PATH
	SystemdCgroup    bool     // runc's cgroup driver, as the node's other runtime handlers have it
	AgentSockDir     string   // the agent's library-socket directory
	AdminSocket      string   // the agent's admin socket
	Out              io.Writer
}

// Install puts FreeFlow on the node.
func Install(ctx context.Context, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.PodCIDR == "" {
		cidr, err := nodePodCIDR(ctx, inCluster(), o.Node)
		if err != nil {
			return err
		}
		o.PodCIDR = cidr
	}
	subnet, err := netip.ParsePrefix(o.PodCIDR)
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return fmt.Errorf("pod CIDR %q of node %s: want an IPv4 prefix of at most /30, such as 10.244.1.0/24", o.PodCIDR, o.Node)
	}
	for _, step := range []func(netip.Prefix) error{o.copyFiles, o.writeWrapperConfig, o.writeHandler, o.writeConfList} {
		if err := step(subnet.Masked()); err != nil {
			return err
		}
	}
	return nil
}

// check refuses missing directories and files before anything is written.
func (o Options) check() error {
	if o.Node == "" {
		return fmt.Errorf("the node's name is missing: pass --node or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	}
	for _, d := range []struct{ what, path string }{
		{"CNI bin directory", o.CNIBinDir}, {"CNI configuration directory", o.CNIConfDir},
		{"FreeFlow directory", o.Dir}, {"containerd configuration directory", filepath.Dir(o.ContainerdConfig)},
	} {
		if st, err := os.Stat(d.path); err != nil || !st.IsDir() {
			return fmt.Errorf("the %s %s is missing on this node: mount it into the installer (a hostPath volume) or create it on the node", d.what, d.path)
		}
	}
	for _, f := range []string{pluginBin, wrapperBin, ffspec.LibraryName, ffspec.ProviderName} {
		if _, err := os.Stat(filepath.Join(o.From, f)); err != nil {
			return fmt.Errorf("%s is not in %s, which the installer copies from: %w", f, o.From, err)
		}
	}
	for _, p := range []string{"bridge", "host-local"} {
		if _, err := os.Stat(filepath.Join(o.CNIBinDir, p)); err != nil {
			return fmt.Errorf("the CNI plugin %s is not in %s; FreeFlow chains after it: install the standard CNI plugins (containernetworking-plugins) there", p, o.CNIBinDir)
		}
	}
	return nil
}

func (o Options) copyFiles(netip.Prefix) error {
	for _, f := range []struct {
		name, dir string
		mode      os.FileMode
	}{
		{pluginBin, o.CNIBinDir, 0o755}, {wrapperBin, o.Dir, 0o755},
		{ffspec.LibraryName, o.Dir, 0o644}, {ffspec.ProviderName, o.Dir, 0o644},
	} {
		b, err := os.ReadFile(filepath.Join(o.From, f.name))
		if err != nil {
			return fmt.Errorf("read %s: %w", f.name, err)
		}
		if err := o.update(filepath.Join(f.dir, f.name), b, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) writeWrapperConfig(netip.Prefix) error {
	b, err := jsonIndent(runtimewrap.Config{Runtime: o.Runtime, Library: filepath.Join(o.Dir, ffspec.LibraryName),
		Provider: filepath.Join(o.Dir, ffspec.ProviderName), AgentSockDir: o.AgentSockDir})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.AgentSockDir, 0o755); err != nil {
		return fmt.Errorf("make the agent's socket directory: %w", err)
	}
	return o.update(filepath.Join(o.Dir, runtimewrap.ConfigName), b, 0o644)
}

// writeHandler adds the runtime handler to containerd's configuration. A
// node whose containerd runs without a configuration file, or with one of
// another version, still gets the CNI plugin and the agent: the installer
// says what to do for the handler, and goes on.
func (o Options) writeHandler(netip.Prefix) error {
	path := o.ContainerdConfig
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(o.Out, "freeflowd install: no %s: the runtime handler \"freeflow\" is not installed; "+
			"write containerd's configuration there (containerd config default > %s) and run the installer again\n", path, path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read containerd's configuration: %w", err)
	}
	b, err := withHandler(old, filepath.Join(o.Dir, wrapperBin), o.SystemdCgroup)
	if errors.Is(err, errNotVersion2) {
		fmt.Fprintf(o.Out, "freeflowd install: %s is not containerd configuration version 2 (containerd 1.6 and 1.7): "+
			"the runtime handler \"freeflow\" is not installed; add it by hand (docs/KUBERNETES-DEPLOY.md)\n", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("add the runtime handler to %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return o.update(path, b, st.Mode().Perm())
}

func (o Options) writeConfList(subnet netip.Prefix) error {
	list, err := cni.NodeConfList(cni.Node{Name: o.Node, Cluster: o.Cluster, Subnet: subnet.String(),
		Gateway: subnet.Addr().Next().String(), Routes: o.Routes, AdminSocket: o.AdminSocket})
	if err != nil {
		return fmt.Errorf("build the CNI configuration: %w", err)
	}
	return o.update(filepath.Join(o.CNIConfDir, ConfListName), list, 0o644)
}

// update writes path unless it holds b already, and says which.
func (o Options) update(path string, b []byte, mode os.FileMode) error {
	wrote, err := atomicfile.Update(path, b, mode)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	verb := "unchanged"
	if wrote {
		verb = "wrote"
	}
	fmt.Fprintf(o.Out, "freeflowd install: %s %s\n", verb, path)
	return nil
}

func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
