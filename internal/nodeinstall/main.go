package nodeinstall

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/freeflow-net/freeflow/internal/state"
)

// Main is `freeflowd install [flags]`.
func Main(args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Install(ctx, o)
}

func parseFlags(args []string) (Options, error) {
	o := Options{Out: os.Stdout}
	var routes string
	fs := flag.NewFlagSet("freeflowd install", flag.ContinueOnError)
	fs.StringVar(&o.From, "from", "", "`dir`ectory holding the files to install (default: the one freeflowd is in)")
	fs.StringVar(&o.CNIBinDir, "cni-bin-dir", "/opt/cni/bin", "the node's CNI plugin `dir`ectory")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "the node's CNI configuration `dir`ectory")
	fs.StringVar(&o.Dir, "dir", "/opt/freeflow", "`dir`ectory for the library, the verbs provider and the runtime wrapper")
	fs.StringVar(&o.ContainerdConfig, "containerd-config", "/etc/containerd/config.toml", "containerd's configuration `file`, which gets the runtime handler \"freeflow\"")
	fs.StringVar(&o.Cluster, "cluster", state.DefaultCluster, "cluster `name` (as freeflowd's --cluster)")
	fs.StringVar(&o.Node, "node", os.Getenv("NODE_NAME"), "this node's `name` (default $NODE_NAME)")
	fs.StringVar(&o.PodCIDR, "pod-cidr", "", "the node's pod `CIDR` (default: the node's spec.podCIDR, from the API server)")
	fs.StringVar(&routes, "routes", "0.0.0.0/0", "comma-separated `CIDRs` pods reach through their bridge")
	fs.StringVar(&o.Runtime, "runtime", "", "the real OCI runtime's `path` on the node (default: runc from PATH)")
	fs.BoolVar(&o.SystemdCgroup, "systemd-cgroup", false, "runc uses the systemd cgroup driver (as the node's kubelet: cgroupDriver)")
	fs.StringVar(&o.AgentSockDir, "sock-dir", "", "the agent's library-socket `dir`ectory (default: freeflowd's)")
	fs.StringVar(&o.AdminSocket, "admin-socket", "", "the agent's admin socket `path` (default: freeflowd's)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q; freeflowd install takes only flags", fs.Arg(0))
	}
	if err := state.ValidClusterName(o.Cluster); err != nil {
		return o, err
	}
	o.Routes = strings.Split(routes, ",")
	for _, r := range o.Routes {
		if _, err := netip.ParsePrefix(r); err != nil {
			return o, fmt.Errorf("--routes: %q is not a CIDR such as 0.0.0.0/0", r)
		}
	}
	l := state.NewLayout(o.Cluster)
	if o.AgentSockDir == "" {
		o.AgentSockDir = l.AgentSockDir(o.Node)
	}
	if o.AdminSocket == "" {
		o.AdminSocket = l.AdminSocket(o.Node)
	}
	if o.From == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("find freeflowd, next to which the files to install are: %w (pass --from)", err)
		}
		o.From = filepath.Dir(exe)
	}
	return o, nil
}
