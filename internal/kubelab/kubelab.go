// Package kubelab runs a real Kubernetes cluster on a FreeFlow CLI cluster,
// for tests (internal/testenv/kube) and the bench's Kubernetes
// experiments: the control plane (kube-apiserver, kube-controller-manager,
// kube-scheduler, storing into the cluster's etcd) in the first host's
// network namespace, and on every host a node (containerd and a kubelet in
// the host's network namespace and a private mount namespace), its pods on
// the host's overlay subnet. Kubernetes v1.34.2's binaries come from
// scripts/build-kube.sh, containerd, runc and the CNI plugins from Debian;
// images are built locally (internal/ociimage) and imported, nothing is
// pulled. docs/KUBERNETES.md says what runs where and why.
package kubelab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/ociimage"
	"github.com/freeflow-net/freeflow/internal/state"
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
// from ./pause and imported by Up.
const PauseImage = "localhost/freeflow/pause:1"

// startTimeout bounds each wait of Start (the API server's start, the
// nodes' registration and readiness); generous, as the machine is shared.
const startTimeout = 3 * time.Minute

// Options says what Up builds.
type Options struct {
	// Pause is a static pause program (./pause, built with CGO_ENABLED=0),
	// the program of every pod's sandbox image.
	Pause string
	// NoCNI writes no CNI configuration: the nodes register but stay
	// NotReady until something installs one into CNIConfDir (FreeFlow's
	// DaemonSet). Otherwise each node gets a bridge + host-local list on
	// its host's subnet (cni.BridgeConfList) and Start waits for Ready.
	NoCNI bool
}

// Cluster is a running Kubernetes cluster.
type Cluster struct {
	Name string // the FreeFlow CLI cluster under it
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
	// ReadyAfter is how long Up took from the FreeFlow cluster being up
	// to every node Ready (or registered, with NoCNI).
	ReadyAfter time.Duration
	// Registered is true with NoCNI: the nodes are registered, not Ready.
	Registered bool

	layout state.Layout
	dir    string
	nodes  []*node
	cp     *controlPlane
	proxy  *proxy
}

// Missing returns why a cluster cannot run here ("" if it can), naming
// what to install or build.
func Missing() string {
	for _, p := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "kubectl", "nsenter", "unshare", "crun", "etcd"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Sprintf("needs %s (scripts/install-deps.sh installs it)", p)
		}
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

// Up brings up Kubernetes on the FreeFlow cluster name, which is up
// (with --no-agents when a DaemonSet is to run the agents). On error the
// caller's `freeflow cluster down` removes what was made (it finds all of
// it, see internal/cluster); Close ends what Up started outside the
// cluster's namespaces.
func Up(ctx context.Context, name string, opts Options) (*Cluster, error) {
	if why := Missing(); why != "" {
		return nil, errors.New(why)
	}
	c, err := newCluster(name)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.bringUp(ctx, opts); err != nil {
		c.Close()
		return nil, err
	}
	c.ReadyAfter, c.Registered = time.Since(begin), opts.NoCNI
	return c, nil
}

// Close stops forwarding the loopback port to the API server.
func (c *Cluster) Close() { c.proxy.close() }

// newCluster lays out the harness's files under the FreeFlow cluster's
// directory and opens the loopback port to the API server.
func newCluster(name string) (*Cluster, error) {
	l := state.NewLayout(name)
	st, err := l.LoadCluster()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, Hosts: st.Hosts, layout: l, dir: filepath.Join(l.Dir(), "kube")}
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
	pause, err := c.pauseImage(opts.Pause)
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
		_, err := c.Kubectl(ctx, "get", "serviceaccount", "default", "-n", "default")
		return err == nil
	})
	if err != nil || opts.NoCNI {
		return err
	}
	return c.waitReady(ctx)
}

// pauseImage writes the image of the pause program into the harness's
// directory and returns the image file.
func (c *Cluster) pauseImage(program string) (string, error) {
	root := filepath.Join(c.dir, "pause-root")
	if err := copyFile(program, filepath.Join(root, "pause")); err != nil {
		return "", fmt.Errorf("the pause program: %w", err)
	}
	img := filepath.Join(c.dir, "pause.tar")
	return img, ociimage.WriteFile(img, root, ociimage.Config{Name: PauseImage, Entrypoint: []string{"/pause"}})
}

// waitAPI waits until the API server is ready (its /readyz) and every
// control-plane process runs.
func (c *Cluster) waitAPI(ctx context.Context) error {
	api := c.cp.procs[0]
	return waitFor(ctx, api, "the API server to be ready", func() bool {
		_, err := c.Kubectl(ctx, "get", "--raw", "/readyz")
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
		_, err := c.Kubectl(ctx, "get", "node", n.host.Name)
		return err == nil
	})
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, n.host.Subnet, n.host.Subnet)
	_, err = c.Kubectl(ctx, "patch", "node", n.host.Name, "--type", "merge", "-p", patch)
	return err
}

// waitReady waits until every node is Ready.
func (c *Cluster) waitReady(ctx context.Context) error {
	for _, n := range c.nodes {
		err := waitFor(ctx, n.kubelet, "node "+n.host.Name+" to be Ready", func() bool {
			out, err := c.Kubectl(ctx, "get", "node", n.host.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return err == nil && strings.TrimSpace(out) == "True"
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// WaitReady waits a few minutes at most until every node is Ready.
func (c *Cluster) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return c.waitReady(ctx)
}

// Kubectl runs kubectl as the admin (the loopback kubeconfig) and returns
// its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	return c.KubectlIn(ctx, "", args...)
}

// KubectlIn runs kubectl as the admin with stdin.
func (c *Cluster) KubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Apply creates (or updates) the objects of a YAML manifest.
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	_, err := c.KubectlIn(ctx, manifest, "apply", "-f", "-")
	return err
}

// WaitPodPhase waits up to timeout until pod namespace/name is in phase
// (Running, Succeeded) and returns how long it waited; on timeout the
// error holds the pod's description.
func (c *Cluster) WaitPodPhase(ctx context.Context, namespace, name, phase string, timeout time.Duration) (time.Duration, error) {
	begin := time.Now()
	_, err := c.Kubectl(ctx, "wait", "-n", namespace, "pod/"+name,
		"--for=jsonpath={.status.phase}="+phase, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	if err != nil {
		desc, _ := c.Kubectl(ctx, "describe", "-n", namespace, "pod/"+name)
		return 0, fmt.Errorf("pod %s/%s not %s: %w\n%s", namespace, name, phase, err, desc)
	}
	return time.Since(begin), nil
}

// IPAMReservations lists the addresses host-local holds for pods of node
// under the harness's bridge configuration; CNI DEL releases a pod's.
func (c *Cluster) IPAMReservations(node string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(cni.IPAMDir(c.layout, node), bridgeNetwork))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips, nil
}

// ImportImage imports an image file (an OCI layout tar, see
// internal/ociimage) into every node's containerd, where pods find it by
// name (imagePullPolicy: Never or IfNotPresent).
func (c *Cluster) ImportImage(file string) error {
	for _, n := range c.nodes {
		if err := ctr(n.socket(), "images", "import", file); err != nil {
			return fmt.Errorf("import %s on %s: %w", file, n.host.Name, err)
		}
	}
	return nil
}

// BuildImage writes an image of rootfs with cfg (internal/ociimage) into
// the harness's directory and imports it on every node.
func (c *Cluster) BuildImage(rootfs string, cfg ociimage.Config) error {
	f, err := os.CreateTemp(c.dir, "image-*.tar")
	if err != nil {
		return err
	}
	f.Close()
	defer os.Remove(f.Name())
	if err := ociimage.WriteFile(f.Name(), rootfs, cfg); err != nil {
		return err
	}
	return c.ImportImage(f.Name())
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
	panic("kubelab: no node " + name)
}

// LogTails writes the end of every component's log to w.
func (c *Cluster) LogTails(w io.Writer) {
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
		fmt.Fprintf(w, "--- end of %s:\n%s\n", l, strings.Join(lines, "\n"))
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
