package kubelab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// nodeMountScript prepares the private mount namespace a node's containerd
// and kubelet share (made by `unshare -m`), then execs containerd ($1 is
// the node's directory). In that namespace:
//   - / is made shared again, inside the namespace only, as on a real node,
//     so pods may ask for mount propagation;
//   - the cgroup v2 hierarchy this machine mounts beside its v1 controllers
//     is unmounted: runc, containerd and the kubelet then see a plain
//     cgroup v1 host (with both, runc refuses "hybrid mode");
//   - the node's own directories are bound over the standard paths a
//     Kubernetes node uses (/etc/cni/net.d, /opt/cni/bin, /var/lib/kubelet,
//     /var/log/pods, /etc/containerd, /opt/freeflow), so hostPath volumes
//     and installers see the node's files, and nothing is shared with the
//     other nodes or the machine;
//   - /run/netns (the pods' network namespaces), /run/containerd (shim
//     sockets) and /var/lib/cni (libcni's cache) are fresh tmpfs mounts,
//     gone with the namespace however the processes end;
//   - the kernel settings the kubelet would otherwise change machine-wide
//     (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...) read
//     as the values it wants, from files bound over them, so it leaves the
//     machine's own alone.
const nodeMountScript = `set -e
d=$1
mount --make-rshared /
umount /sys/fs/cgroup/unified 2>/dev/null || true
mount --bind "$d/cni/net.d" /etc/cni/net.d
mount --bind "$d/cni/bin" /opt/cni/bin
mount --bind "$d/kubelet" /var/lib/kubelet
mount --bind "$d/pod-logs" /var/log/pods
mount --bind "$d/etc-containerd" /etc/containerd
mount --bind "$d/opt-freeflow" /opt/freeflow
for t in /run/netns /run/containerd /var/lib/cni; do mount -t tmpfs -o mode=0755 tmpfs "$t"; done
for f in "$d"/sysctl/*; do mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"; done
exec containerd --config /etc/containerd/config.toml`

// nodeDirs are the paths a node binds its own directories over; they must
// exist on the machine (scripts/install-deps.sh makes them, as a Kubernetes
// node's packages do; the harness makes any that are missing).
var nodeDirs = []string{"/etc/cni/net.d", "/opt/cni/bin", "/var/lib/kubelet", "/var/log/pods", "/run/containerd", "/var/lib/cni",
	"/etc/containerd", "/opt/freeflow"}

// kubeletSysctls are the kernel settings the kubelet checks at start and
// sets when they differ (pkg/kubelet/cm setupKernelTunables), with the
// values it wants.
var kubeletSysctls = map[string]string{
	"vm.overcommit_memory":      "1",
	"vm.panic_on_oom":           "0",
	"kernel.panic":              "10",
	"kernel.panic_on_oops":      "1",
	"kernel.keys.root_maxkeys":  "1000000",
	"kernel.keys.root_maxbytes": "25000000",
}

// cniPlugins are the Debian plugins every node's CNI bin directory holds:
// loopback (containerd sets up each pod's lo with it), bridge and host-local.
var cniPlugins = []string{"loopback", "bridge", "host-local"}

// bridgeNetwork names the harness's own CNI configuration (without FreeFlow).
const bridgeNetwork = "kube-bridge"

// bridgeConfList is its file: it sorts after an installer's list (FreeFlow's
// 10-freeflow.conflist), which takes over, as the CNI runtime uses the
// first; pods started before keep their addresses in the bridge network's
// store, so they go before another list hands out addresses.
const bridgeConfList = "99-kube-bridge.conflist"

// DebianCNIDir is where Debian's containernetworking-plugins installs.
const DebianCNIDir = "/usr/lib/cni"

// node is one Kubernetes node on a FreeFlow host.
type node struct {
	host       state.Host
	ns         string // the host's network namespace file
	dir        string
	containerd *proc
	kubelet    *proc
}

func (n *node) socket() string     { return filepath.Join(n.dir, "containerd.sock") }
func (n *node) cniConfDir() string { return filepath.Join(n.dir, "cni", "net.d") }
func (n *node) cniBinDir() string  { return filepath.Join(n.dir, "cni", "bin") }

// containerdConfigFile is the node's /etc/containerd/config.toml, as seen
// from outside the node.
func (n *node) containerdConfigFile() string {
	return filepath.Join(n.dir, "etc-containerd", "config.toml")
}

// prepare makes the node's directories and configuration files.
func (n *node) prepare(l state.Layout, p *pki, server string, withCNI bool) error {
	for _, d := range nodeDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s (a Kubernetes node's directory): %w", d, err)
		}
	}
	for _, d := range []string{"cni/net.d", "cni/bin", "kubelet", "pod-logs", "sysctl", "containerd", "log", "etc-containerd", "opt-freeflow"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return fmt.Errorf("create node directory: %w", err)
		}
	}
	for name, v := range kubeletSysctls {
		if err := os.WriteFile(filepath.Join(n.dir, "sysctl", name), []byte(v+"\n"), 0o444); err != nil {
			return err
		}
	}
	// Copies, not links: a node's plugins are its own files, which an
	// installer's container (FreeFlow's) sees through its hostPath mount.
	for _, pl := range cniPlugins {
		if err := copyFile(filepath.Join(DebianCNIDir, pl), filepath.Join(n.cniBinDir(), pl)); err != nil {
			return fmt.Errorf("copy CNI plugin %s: %w", pl, err)
		}
	}
	if withCNI {
		list, err := cni.BridgeConfList(l, n.host, bridgeNetwork)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.cniConfDir(), bridgeConfList), list, 0o644); err != nil {
			return fmt.Errorf("write CNI configuration: %w", err)
		}
	}
	user := "system:node:" + n.host.Name
	if err := p.issue("kubelet-"+n.host.Name, user, []string{"system:nodes"}); err != nil {
		return err
	}
	if err := p.kubeconfig(filepath.Join(n.dir, "kubelet.kubeconfig"), server, "kubelet-"+n.host.Name); err != nil {
		return err
	}
	if err := os.WriteFile(n.containerdConfigFile(), []byte(n.containerdConfig(l)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "kubelet.yaml"), []byte(n.kubeletConfig(p)), 0o644)
}

// containerdConfig is containerd 1.6's configuration (version 2): its own
// root, state and socket; runc's state under the cluster's RuncRoot (where
// `cluster down` finds the pods); the local pause image; no OOM score below
// containerd's own (no CAP_SYS_RESOURCE here).
func (n *node) containerdConfig(l state.Layout) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[5]q
        SystemdCgroup = false

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.socket(),
		PauseImage, filepath.Join(l.RuncRoot(), n.host.Name), filepath.Join(n.dir, "containerd", "opt"))
}

// kubeletConfig: cgroup v1 with the cgroupfs driver and no per-QoS cgroups
// (the kubelet cannot manage the machine's cgroup tree here; each pod's
// container then gets containerd's default cgroup, /k8s.io/<id>), no node
// allocatable enforcement (it needs those cgroups), eviction and image
// garbage collection thresholds out of the way of a shared test machine,
// client certificates checked against the cluster CA and requests
// authorized by the API server.
func (n *node) kubeletConfig(p *pki) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
fileCheckFrequency: 2s
`, n.socket(), p.cert("ca"))
}

// startContainerd starts containerd in the host's network namespace and a
// new mount namespace (nodeMountScript) and waits until it answers.
func (n *node) startContainerd(ctx context.Context) error {
	cmd := netns.Command(n.ns, "unshare", "-m", "--propagation", "private", "sh", "-c", nodeMountScript, "sh", n.dir)
	p, err := start(cmd, filepath.Join(n.dir, "log", "containerd.log"), "containerd on "+n.host.Name)
	if err != nil {
		return err
	}
	n.containerd = p
	return n.waitContainerd(ctx)
}

// restartContainerd stops the node's containerd and starts it again in the
// node's mount namespace (which the kubelet holds), as `systemctl restart
// containerd` on a node: the shims and the pods run on, and containerd
// reads its configuration afresh.
func (n *node) restartContainerd(ctx context.Context) error {
	old := n.containerd
	old.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-old.done:
	case <-ctx.Done():
		return fmt.Errorf("containerd on %s did not stop on SIGTERM; see %s", n.host.Name, old.log)
	}
	cmd := exec.Command("nsenter", "--net="+n.ns, fmt.Sprintf("--mount=/proc/%d/ns/mnt", n.kubelet.cmd.Process.Pid), "--",
		"containerd", "--config", "/etc/containerd/config.toml")
	p, err := start(cmd, old.log, "containerd on "+n.host.Name)
	if err != nil {
		return err
	}
	n.containerd = p
	return n.waitContainerd(ctx)
}

// waitContainerd waits until the node's containerd answers.
func (n *node) waitContainerd(ctx context.Context) error {
	p := n.containerd
	return waitFor(ctx, p, "containerd on "+n.host.Name+" to answer on "+n.socket(), func() bool {
		c, err := net.Dial("unix", n.socket())
		if err == nil {
			c.Close()
		}
		return err == nil && ctr(n.socket(), "version") == nil
	})
}

// startKubelet starts the kubelet in containerd's namespaces (network and
// mount), as the node called by the host's name at its fabric address.
func (n *node) startKubelet() error {
	cmd := exec.Command("nsenter", "--net="+n.ns, fmt.Sprintf("--mount=/proc/%d/ns/mnt", n.containerd.cmd.Process.Pid), "--",
		filepath.Join(BinDir(), "kubelet"),
		"--config", filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig", filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--hostname-override", n.host.Name,
		"--node-ip", n.host.FabricIP,
		"--v", "2")
	p, err := start(cmd, filepath.Join(n.dir, "log", "kubelet.log"), "kubelet on "+n.host.Name)
	n.kubelet = p
	return err
}

// ctr runs containerd's ctr against socket in the k8s.io namespace (the
// CRI's).
func ctr(socket string, args ...string) error {
	out, err := exec.Command("ctr", append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitFor polls ok every 100 ms until it holds, ctx ends or p exits.
func waitFor(ctx context.Context, p *proc, what string, ok func() bool) error {
	for {
		if ok() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s; see %s", what, p.log)
		case <-p.done:
			return fmt.Errorf("%s exited (%v) while waiting for %s; see %s", p.what, p.err, what, p.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
