// Package kube runs a real Kubernetes cluster on a FreeFlow CLI cluster, for
// tests: the control plane (kube-apiserver, kube-controller-manager,
// kube-scheduler, storing into the cluster's etcd) in the first host's
// network namespace, and on every host a node (containerd and a kubelet in
// the host's network namespace and a private mount namespace), its pods on
// the host's overlay subnet. Kubernetes v1.34.2's binaries come from
// scripts/build-kube.sh, containerd, runc and the CNI plugins from Debian;
// images are built locally (internal/ociimage) and imported, nothing is
// pulled. docs/KUBERNETES.md says what runs where and why.
package kube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/ociimage"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// Version is the Kubernetes release the harness runs.
const Version = "v1.34.2"

// BinDir is where scripts/build-kube.sh puts the Kubernetes binaries
// ($FF_KUBE_BIN overrides it).
func BinDir() string {
	if d := os.Getenv("FF_KUBE_BIN"); d != "" {
		return d
	}
	return "/var/cache/freeflow/kube-" + Version + "/bin"
}

// PauseImage is the pod sandbox image every node's containerd uses, built
// from ./pause and imported by Start.
const PauseImage = "localhost/freeflow/pause:1"

// startTimeout bounds each wait of Start (the API server's start, the
// nodes' registration and readiness); generous, as the machine is shared.
const startTimeout = 3 * time.Minute

// Options says what Start builds.
type Options struct {
	// Hosts is the number of FreeFlow hosts, one node on each (default 2).
	Hosts int
	// BinDir holds FreeFlow's binaries (testenv.BuildBinaries).
	BinDir string
	// NoAgents brings the FreeFlow cluster up without its freeflowd agents
	// (`cluster up --no-agents`), for agents run by a DaemonSet.
	NoAgents bool
	// NoCNI writes no CNI configuration: the nodes register but stay
	// NotReady until something installs one into CNIConfDir (FreeFlow's
	// DaemonSet). Otherwise each node gets a bridge + host-local list on
	// its host's subnet (cni.BridgeConfList) and Start waits for Ready.
	NoCNI bool
}

// Cluster is a running Kubernetes cluster.
type Cluster struct {
	FF *testenv.Cluster // the FreeFlow CLI cluster under it
	// Kubeconfig is the admin's, for kubectl and client-go in the test
	// process: its server is a loopback port forwarded into the first
	// host's namespace, open while the test runs.
	Kubeconfig string
	// NodeKubeconfig is the admin's, valid inside any host's network
	// namespace (server: the first host's fabric address).
	NodeKubeconfig string
	// APIServer is the API server's URL inside the hosts' namespaces (h1's
	// fabric address): what a pod on the host network is given as
	// KUBERNETES_SERVICE_HOST/PORT, since no kube-proxy routes the
	// kubernetes Service (see ServiceCIDR).
	APIServer string
	Nodes     []string     // node names: the host names
	Hosts     []state.Host // the hosts, in node order
	// ReadyAfter is how long Start took from the FreeFlow cluster being up
	// to every node Ready (or registered, with NoCNI).
	ReadyAfter time.Duration

	layout state.Layout
	dir    string
	nodes  []*node
	cp     *controlPlane
	proxy  *proxy
}

// Missing returns why a cluster cannot run here ("" if it can), naming
// what to install or build.
func Missing() string {
	if why := testenv.Missing("containerd", "containerd-shim-runc-v2", "runc", "ctr", "kubectl", "nsenter", "unshare", "crun", "etcd"); why != "" {
		return why
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		if _, err := os.Stat(filepath.Join(BinDir(), b)); err != nil {
			return fmt.Sprintf("needs Kubernetes %s's %s in %s: run scripts/build-kube.sh", Version, b, BinDir())
		}
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat(filepath.Join(DebianCNIDir, p)); err != nil {
			return fmt.Sprintf("needs the CNI plugin %s in %s (Debian package containernetworking-plugins)", p, DebianCNIDir)
		}
	}
	return ""
}

// Start brings up a FreeFlow cluster and Kubernetes on it, skipping the
// test if a part is missing from the machine. Everything is removed when
// the test ends (`freeflow cluster down` finds all of it, see
// internal/cluster), and on failure the end of each component's log is
// written to the test log first.
func Start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skip(why)
	}
	if opts.Hosts == 0 {
		opts.Hosts = 2
	}
	var extra []string
	if opts.NoAgents {
		extra = append(extra, "--no-agents")
	}
	ff, err := testenv.Up(opts.BinDir, "k8s", opts.Hosts, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ff.Down(); err != nil {
			t.Errorf("cluster down %s: %v", ff.Name, err)
		}
	})
	c, err := newCluster(ff)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.logTails(t)
		}
	})
	t.Cleanup(c.proxy.close)
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.bringUp(ctx, opts); err != nil {
		t.Fatal(err)
	}
	c.ReadyAfter = time.Since(begin)
	t.Logf("kube: %d nodes %s %.1fs after the FreeFlow cluster %s was up", len(c.Nodes), map[bool]string{true: "registered", false: "Ready"}[opts.NoCNI], c.ReadyAfter.Seconds(), ff.Name)
	return c
}

// newCluster lays out the harness's files under the FreeFlow cluster's
// directory and opens the loopback port to the API server.
func newCluster(ff *testenv.Cluster) (*Cluster, error) {
	l := state.NewLayout(ff.Name)
	st, err := l.LoadCluster()
	if err != nil {
		return nil, err
	}
	c := &Cluster{FF: ff, Hosts: st.Hosts, layout: l, dir: filepath.Join(l.Dir(), "kube")}
	first := st.Hosts[0]
	p, err := newPKI(filepath.Join(c.dir, "pki"))
	if err != nil {
		return nil, err
	}
	c.cp = &controlPlane{ns: netns.Path(l.HostNetNS(first.Name)), dir: c.dir, advertise: first.FabricIP, pki: p}
	for _, h := range st.Hosts {
		c.Nodes = append(c.Nodes, h.Name)
		c.nodes = append(c.nodes, &node{host: h, ns: netns.Path(l.HostNetNS(h.Name)), dir: filepath.Join(l.HostDir(h.Name), "kube")})
	}
	c.proxy, err = newProxy(c.cp.ns, fmt.Sprintf("127.0.0.1:%d", apiPort))
	if err != nil {
		return nil, err
	}
	c.APIServer = fmt.Sprintf("https://%s:%d", first.FabricIP, apiPort)
	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	c.NodeKubeconfig = filepath.Join(c.dir, "admin-node.kubeconfig")
	return c, nil
}

func (c *Cluster) bringUp(ctx context.Context, opts Options) error {
	p := c.cp.pki
	if err := c.cp.makePKI(); err != nil {
		return err
	}
	if err := p.kubeconfig(c.Kubeconfig, "https://"+c.proxy.addr(), "admin"); err != nil {
		return err
	}
	server := c.APIServer
	if err := p.kubeconfig(c.NodeKubeconfig, server, "admin"); err != nil {
		return err
	}
	pause, err := c.pauseImage()
	if err != nil {
		return err
	}
	if err := c.cp.start(); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := n.prepare(c.layout, p, server, !opts.NoCNI); err != nil {
			return err
		}
		if err := n.startContainerd(ctx); err != nil {
			return err
		}
		if err := ctr(n.socket(), "images", "import", pause); err != nil {
			return fmt.Errorf("import the pause image on %s: %w", n.host.Name, err)
		}
	}
	if err := c.waitAPI(ctx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := n.startKubelet(); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.setPodCIDR(ctx, n); err != nil {
			return err
		}
	}
	// Pods are refused until the controller manager made their namespace's
	// service account.
	err = waitFor(ctx, c.cp.procs[1], "the default service account", func() bool {
		_, err := c.kubectl(ctx, "get", "serviceaccount", "default", "-n", "default")
		return err == nil
	})
	if err != nil || opts.NoCNI {
		return err
	}
	return c.waitReady(ctx)
}

// pauseImage builds the pause program and its image into the harness's
// directory and returns the image file.
func (c *Cluster) pauseImage() (string, error) {
	root := filepath.Join(c.dir, "pause-root")
	if err := BuildStatic(filepath.Join(root, "pause"), "./internal/testenv/kube/pause"); err != nil {
		return "", err
	}
	img := filepath.Join(c.dir, "pause.tar")
	return img, ociimage.WriteFile(img, root, ociimage.Config{Name: PauseImage, Entrypoint: []string{"/pause"}})
}

// waitAPI waits until the API server is ready (its /readyz) and every
// control-plane process runs.
func (c *Cluster) waitAPI(ctx context.Context) error {
	api := c.cp.procs[0]
	return waitFor(ctx, api, "the API server to be ready", func() bool {
		_, err := c.kubectl(ctx, "get", "--raw", "/readyz")
		return err == nil && c.controlPlaneRuns() == nil
	})
}

func (c *Cluster) controlPlaneRuns() error {
	for _, p := range c.cp.procs {
		if p.exited() {
			return fmt.Errorf("%s exited (%v); see %s", p.what, p.err, p.log)
		}
	}
	return nil
}

// setPodCIDR waits for node n to register and gives it its host's subnet as
// pod CIDR (the controller manager allocates none: --allocate-node-cidrs is
// off), so whatever reads the Node (FreeFlow's agent) sees the subnet the
// overlay routes to that host.
func (c *Cluster) setPodCIDR(ctx context.Context, n *node) error {
	err := waitFor(ctx, n.kubelet, "node "+n.host.Name+" to register", func() bool {
		_, err := c.kubectl(ctx, "get", "node", n.host.Name)
		return err == nil
	})
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, n.host.Subnet, n.host.Subnet)
	_, err = c.kubectl(ctx, "patch", "node", n.host.Name, "--type", "merge", "-p", patch)
	return err
}

// waitReady waits until every node is Ready.
func (c *Cluster) waitReady(ctx context.Context) error {
	for _, n := range c.nodes {
		err := waitFor(ctx, n.kubelet, "node "+n.host.Name+" to be Ready", func() bool {
			out, err := c.kubectl(ctx, "get", "node", n.host.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return err == nil && strings.TrimSpace(out) == "True"
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// WaitReady waits until every node is Ready, failing the test after a
// few minutes.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// kubectl runs kubectl with the admin's loopback kubeconfig.
func (c *Cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	return c.kubectlIn(ctx, "", args...)
}

// kubectlIn runs kubectl with stdin.
func (c *Cluster) kubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Kubectl runs kubectl as the admin and returns its output, failing the
// test if it fails.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.kubectl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlErr runs kubectl as the admin and returns its output and error.
func (c *Cluster) KubectlErr(args ...string) (string, error) {
	return c.kubectl(context.Background(), args...)
}

// Apply creates (or updates) the objects of a YAML manifest.
func (c *Cluster) Apply(t testing.TB, manifest string) {
	t.Helper()
	if _, err := c.kubectlIn(context.Background(), manifest, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// WaitPodPhase waits up to timeout until pod namespace/name is in phase
// (Running, Succeeded) and returns how long it waited; on timeout it fails
// the test with the pod's description.
func (c *Cluster) WaitPodPhase(t testing.TB, namespace, name, phase string, timeout time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	_, err := c.kubectl(context.Background(), "wait", "-n", namespace, "pod/"+name,
		"--for=jsonpath={.status.phase}="+phase, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	if err != nil {
		desc, _ := c.kubectl(context.Background(), "describe", "-n", namespace, "pod/"+name)
		t.Fatalf("pod %s/%s not %s: %v\n%s", namespace, name, phase, err, desc)
	}
	return time.Since(begin)
}

// IPAMReservations lists the addresses host-local holds for pods of node
// under the harness's bridge configuration; CNI DEL releases a pod's.
func (c *Cluster) IPAMReservations(t testing.TB, node string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cni.IPAMDir(c.layout, node), bridgeNetwork))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// ImportImage imports an image file (an OCI layout tar, see
// internal/ociimage) into every node's containerd, where pods find it by
// name (imagePullPolicy: Never or IfNotPresent).
func (c *Cluster) ImportImage(t testing.TB, file string) {
	t.Helper()
	for _, n := range c.nodes {
		if err := ctr(n.socket(), "images", "import", file); err != nil {
			t.Fatalf("import %s on %s: %v", file, n.host.Name, err)
		}
	}
}

// BuildImage writes an image of rootfs with cfg (internal/ociimage) and
// imports it on every node.
func (c *Cluster) BuildImage(t testing.TB, rootfs string, cfg ociimage.Config) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(file, rootfs, cfg); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, file)
}

// SetDefaultRuntime makes handler the default runtime handler of every
// node (default_runtime_name in its containerd configuration) and restarts
// each node's containerd, as an administrator enabling a runtime handler
// does (docs/KUBERNETES-DEPLOY.md); running pods are not touched. It
// returns once every node is Ready again.
func (c *Cluster) SetDefaultRuntime(handler string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, n := range c.nodes {
		path := n.containerdConfigFile()
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !defaultRuntime.Match(b) {
			return fmt.Errorf("%s has no default_runtime_name line", path)
		}
		b = defaultRuntime.ReplaceAll(b, []byte(fmt.Sprintf("${1}default_runtime_name = %q", handler)))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		if err := n.restartContainerd(ctx); err != nil {
			return err
		}
	}
	return c.waitReady(ctx)
}

var defaultRuntime = regexp.MustCompile(`(?m)^([ \t]*)default_runtime_name = .*$`)

// ContainerdConfig is node's /etc/containerd/config.toml, as seen from the
// test.
func (c *Cluster) ContainerdConfig(node string) string { return c.node(node).containerdConfigFile() }

// CNIConfDir is node's /etc/cni/net.d, as seen from the test.
func (c *Cluster) CNIConfDir(node string) string { return c.node(node).cniConfDir() }

// CNIBinDir is node's /opt/cni/bin, as seen from the test.
func (c *Cluster) CNIBinDir(node string) string { return c.node(node).cniBinDir() }

// ContainerdSocket is node's containerd socket (for ctr and crictl).
func (c *Cluster) ContainerdSocket(node string) string { return c.node(node).socket() }

// HostNetNS is the network namespace file of node's host.
func (c *Cluster) HostNetNS(node string) string { return c.node(node).ns }

func (c *Cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.host.Name == name {
			return n
		}
	}
	panic("kube: no node " + name)
}

// BuildStatic builds the Go package pkg (a path relative to the module
// root, such as ./internal/testenv/kube/pause) as a static binary at out.
func BuildStatic(out, pkg string) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s (static): %w\n%s", pkg, err, b)
	}
	return nil
}

// logTails writes the end of every component's log to the test log.
func (c *Cluster) logTails(t *testing.T) {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, n := range c.nodes {
		more, _ := filepath.Glob(filepath.Join(n.dir, "log", "*.log"))
		logs = append(logs, more...)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		t.Logf("--- end of %s:\n%s", l, strings.Join(lines, "\n"))
	}
}

// logTailLines is how much of each log a failed test shows.
const logTailLines = 25

// proxy forwards a loopback port of the test's namespace to an address in
// a host's namespace: the test reaches the API server without any route
// from the machine into the cluster.
type proxy struct {
	ln     net.Listener
	ns     string
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newProxy(ns, target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on loopback for the API server: %w", err)
	}
	p := &proxy{ln: ln, ns: ns, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(conn)
	}
}

func (p *proxy) forward(conn net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := netns.Dial(ctx, p.ns, "tcp", p.target)
	cancel()
	if err != nil || !p.track(conn, up) {
		conn.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	<-done
	<-done
	p.untrack(conn, up)
}

// track records a forwarded pair; false once the proxy is closed.
func (p *proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[a], p.conns[b] = true, true
	return true
}

func (p *proxy) untrack(a, b net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a.Close()
	b.Close()
	delete(p.conns, a)
	delete(p.conns, b)
}

// close stops listening, ends every forwarded connection and waits for
// the forwarding goroutines.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
