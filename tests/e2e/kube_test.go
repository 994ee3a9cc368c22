package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/ociimage"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
	"github.com/freeflow-net/freeflow/internal/testenv/kube"
)

// echoImage is the test image: the static echo program alone.
const echoImage = "localhost/freeflow/echo:1"

// podTimeout bounds a pod's way to Running or Succeeded.
const podTimeout = 2 * time.Minute

// newKube brings up Kubernetes on a fresh FreeFlow cluster for one test.
func newKube(t *testing.T, opts kube.Options) *kube.Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	opts.BinDir = binDir
	return kube.Start(t, opts)
}

// echoPod is a pod of the echo image on node: a server (args serve PORT)
// or a client run once (args send HOST PORT N).
func echoPod(name, node string, args ...string) string {
	restart := "Always"
	if args[0] == "send" {
		restart = "Never"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  restartPolicy: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: echo
    image: %s
    imagePullPolicy: Never
    args: %s
`, name, node, restart, echoImage, jsonList(args))
}

// jsonList writes strs as a JSON (and so YAML) list of strings.
func jsonList(strs []string) string {
	b, _ := json.Marshal(strs)
	return string(b)
}

// TestKubeNodesReadyAndPodsRun: Kubernetes v1.34 on two FreeFlow hosts
// (internal/kubelab) has both nodes Ready with their hosts' overlay
// subnets as pod CIDRs; a pod per node from a locally imported image runs
// with an address on its node's subnet (scheduled there, not pinned);
// TCP between the pods across nodes, both ways, brings every byte back
// intact; deleting the pods runs CNI DEL (their addresses are released and
// their veths leave the host's bridge). Pod start latency (create → Running) is logged.
func TestKubeNodesReadyAndPodsRun(t *testing.T) {
	kc := newKube(t, kube.Options{Hosts: 2})
	for i, n := range kc.Nodes {
		cidr := kc.Kubectl(t, "get", "node", n, "-o", "jsonpath={.spec.podCIDR}")
		if cidr != kc.Hosts[i].Subnet {
			t.Fatalf("node %s has pod CIDR %q, want its host's subnet %s", n, cidr, kc.Hosts[i].Subnet)
		}
	}
	echo := staticEcho(t)
	kc.BuildImage(t, filepath.Dir(echo), ociimage.Config{Name: echoImage, Entrypoint: []string{"/echo"}})

	ips := map[string]string{}
	for i, n := range kc.Nodes {
		name := "server-" + n
		kc.Apply(t, echoPod(name, n, "serve", "7000"))
		latency := kc.WaitPodPhase(t, "default", name, "Running", podTimeout)
		t.Logf("pod %s on %s: create → Running in %.2fs", name, n, latency.Seconds())
		ip := kc.Kubectl(t, "get", "pod", name, "-o", "jsonpath={.status.podIP}")
		_, subnet, _ := net.ParseCIDR(kc.Hosts[i].Subnet)
		if parsed := net.ParseIP(ip); parsed == nil || !subnet.Contains(parsed) {
			t.Fatalf("pod %s on %s has address %q, want one in %s", name, n, ip, subnet)
		}
		if got := kc.Kubectl(t, "get", "pod", name, "-o", "jsonpath={.spec.nodeName}"); got != n {
			t.Fatalf("pod %s scheduled on %q, want %s", name, got, n)
		}
		ips[n] = ip
	}
	for i, n := range kc.Nodes {
		peer := kc.Nodes[(i+1)%len(kc.Nodes)]
		name := "client-" + n
		kc.Apply(t, echoPod(name, n, "send", ips[peer], "7000", fmt.Sprint(echoBytes)))
		kc.WaitPodPhase(t, "default", name, "Succeeded", podTimeout)
		echoOK(t, kc.Kubectl(t, "logs", name), echoBytes)
	}

	for _, n := range kc.Nodes {
		if held := kc.IPAMReservations(t, n); !slices.Contains(held, ips[n]) {
			t.Fatalf("node %s: host-local holds %v, not its server's %s", n, held, ips[n])
		}
	}
	kc.Kubectl(t, "delete", "pods", "--all", "--wait=true", "--timeout=60s")
	// The kubelet stops a pod's sandbox (CNI DEL) before the pod object
	// goes; polled all the same, as the order is the kubelet's to change.
	for _, n := range kc.Nodes {
		var left string
		released := func() bool {
			out, err := exec.Command("ip", "-n", filepath.Base(kc.HostNetNS(n)), "-o", "link", "show", "master", cni.BridgeName).CombinedOutput()
			left = fmt.Sprintf("addresses %v, bridge ports %q (%v)", kc.IPAMReservations(t, n), out, err)
			return len(kc.IPAMReservations(t, n)) == 0 && err == nil && strings.TrimSpace(string(out)) == ""
		}
		for deadline := time.Now().Add(30 * time.Second); !released(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s: 30 s after its pods were deleted, CNI DEL has not released %s", n, left)
			}
		}
	}
}

// TestKubeDownAfterNodeKilledRemovesPods: when a node's containerd,
// shims and kubelet die at once (SIGKILL, as when a test process is
// killed), its pods run on, orphaned in their own namespaces; `freeflow
// cluster down` still ends them and removes their cgroups, and the node
// left nothing in the machine's own Kubernetes directories or /run/netns,
// nor changed the machine-wide kernel settings the kubelet checks.
func TestKubeDownAfterNodeKilledRemovesPods(t *testing.T) {
	netnsBefore := netnsNames(t)
	sysctlsBefore := kubeletSysctls(t)
	dirsBefore := nodeDirEntries()
	kc := newKube(t, kube.Options{Hosts: 1})
	node := kc.Nodes[0]
	echo := staticEcho(t)
	kc.BuildImage(t, filepath.Dir(echo), ociimage.Config{Name: echoImage, Entrypoint: []string{"/echo"}})
	kc.Apply(t, echoPod("orphan", node, "serve", "7000"))
	kc.WaitPodPhase(t, "default", "orphan", "Running", podTimeout)
	pod := processesWithArgs("/echo", "serve", "7000")
	if len(pod) != 1 {
		t.Fatalf("processes of the pod: %v, want one", pod)
	}
	cgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pod[0]))
	if err != nil {
		t.Fatal(err)
	}

	hostNS, err := os.Stat(kc.HostNetNS(node))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range processesInNetNS(hostNS) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	testenv.WaitFor(t, "the node's processes to die", func() bool { return len(processesInNetNS(hostNS)) == 0 })
	if !alive(pod[0]) {
		t.Fatalf("the pod's process %d died with its node; the test needs it orphaned", pod[0])
	}

	if err := kc.FF.Down(); err != nil {
		t.Fatalf("cluster down: %v", err)
	}
	if alive(pod[0]) {
		t.Errorf("pod process %d survived cluster down", pod[0])
	}
	for _, line := range strings.Split(strings.TrimSpace(string(cgroup)), "\n") {
		// hierarchy-id:controllers:path; the pod's own cgroup, made by runc.
		parts := strings.SplitN(line, ":", 3)
		ctrl := strings.TrimPrefix(parts[1], "name=")
		if len(parts) != 3 || parts[2] == "/" || ctrl == "" || strings.Contains(ctrl, ",") {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, parts[2])); err == nil {
			t.Errorf("cgroup %s of the pod left in %s", parts[2], ctrl)
		}
	}
	if left := slices.DeleteFunc(netnsNames(t), func(n string) bool { return slices.Contains(netnsBefore, n) }); len(left) > 0 && !onlyOtherClusters(left, kc.FF.Name) {
		t.Errorf("network namespaces left in /run/netns: %v", left)
	}
	if got := kubeletSysctls(t); got != sysctlsBefore {
		t.Errorf("machine-wide kernel settings changed: %s, were %s", got, sysctlsBefore)
	}
	if got := nodeDirEntries(); got != dirsBefore {
		t.Errorf("the machine's own node directories changed (each node binds its own over them):\n%s\nwere\n%s", got, dirsBefore)
	}
}

// nodeDirEntries lists what the machine's own Kubernetes node directories
// hold (they exist for the nodes to bind theirs over; other programs may
// use them too, so a test compares before and after).
func nodeDirEntries() string {
	var b strings.Builder
	for _, d := range []string{"/etc/cni/net.d", "/opt/cni/bin", "/var/lib/kubelet", "/var/log/pods", "/var/lib/cni", "/run/containerd",
		"/etc/containerd", "/opt/freeflow"} {
		filepath.WalkDir(d, func(p string, _ os.DirEntry, err error) error {
			fmt.Fprintf(&b, "%s %v\n", p, err)
			return nil
		})
	}
	return b.String()
}

// kubeletSysctls reads the machine-wide settings a kubelet sets at start
// unless told they are already right (see internal/kubelab).
func kubeletSysctls(t *testing.T) string {
	var vals []string
	for _, f := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		b, err := os.ReadFile("/proc/sys/" + f)
		if err != nil {
			t.Fatal(err)
		}
		vals = append(vals, f+"="+strings.TrimSpace(string(b)))
	}
	return strings.Join(vals, " ")
}

func netnsNames(t *testing.T) []string {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// onlyOtherClusters reports whether every name is a namespace of a FreeFlow
// cluster other than cluster (parallel tests make and remove theirs).
func onlyOtherClusters(names []string, cluster string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, cluster+"-") || strings.HasPrefix(n, "cni-") {
			return false
		}
	}
	return true
}

// processesWithArgs returns the live processes whose command line is argv.
func processesWithArgs(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == want && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesInNetNS returns the processes in the network namespace whose
// nsfs file is ns.
func processesInNetNS(ns os.FileInfo) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if st, err := os.Stat("/proc/" + e.Name() + "/ns/net"); err == nil && os.SameFile(st, ns) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// TestKubeNodeReadyWhenCNIInstalled: a node brought up without a CNI
// configuration (as before FreeFlow's DaemonSet installs its own) and
// without the CLI's agents registers NotReady, and turns Ready once a
// configuration list appears in its /etc/cni/net.d, as an installer writes
// it; the pod it then runs gets an address on the node's subnet.
func TestKubeNodeReadyWhenCNIInstalled(t *testing.T) {
	kc := newKube(t, kube.Options{Hosts: 1, NoAgents: true, NoCNI: true})
	node := kc.Nodes[0]
	ready := func() string {
		return kc.Kubectl(t, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	}
	if got := ready(); got == "True" {
		t.Fatalf("node %s is Ready without any CNI configuration", node)
	}
	l := state.NewLayout(kc.FF.Name)
	list, err := cni.BridgeConfList(l, kc.Hosts[0], "installed")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kc.CNIConfDir(node), "10-installed.conflist"), list, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.WaitWithin(t, time.Minute, "node "+node+" to turn Ready after its CNI configuration was installed", func() bool { return ready() == "True" })
	echo := staticEcho(t)
	kc.BuildImage(t, filepath.Dir(echo), ociimage.Config{Name: echoImage, Entrypoint: []string{"/echo"}})
	kc.Apply(t, echoPod("after-install", node, "serve", "7000"))
	kc.WaitPodPhase(t, "default", "after-install", "Running", podTimeout)
	ip := net.ParseIP(kc.Kubectl(t, "get", "pod", "after-install", "-o", "jsonpath={.status.podIP}"))
	if _, subnet, _ := net.ParseCIDR(kc.Hosts[0].Subnet); ip == nil || !subnet.Contains(ip) {
		t.Fatalf("pod address %v, want one in %s", ip, subnet)
	}
}
