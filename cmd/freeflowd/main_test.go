package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/directory/kube"
	"github.com/freeflow-net/freeflow/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFlagErrors(t *testing.T) {
	good := []string{"--cluster", "t1", "--host", "h1", "--fabric-ip", "10.99.0.2", "--subnet", "10.244.1.0/24", "--etcd", "http://127.0.0.1:2379"}
	if o, err := parseFlags(good); err != nil || o.agent.AdminSocket != "/run/freeflow/t1/hosts/h1/admin.sock" || !o.agent.FabricGuard {
		t.Fatalf("good flags: %+v, %v", o, err)
	}
	for bad, says := range map[string]string{
		"--host=":               "--host is required",
		"--fabric-ip=10.99":     "--fabric-ip",
		"--subnet=10.244.1.0":   "--subnet",
		"--etcd=":               "--etcd is required",
		"--etcd=127.0.0.1:2379": "not an etcd client URL",
		"--cluster=Bad_Name":    "invalid cluster name",
		"--datastore=consul":    "want etcd or kubernetes",
	} {
		_, err := parseFlags(append(append([]string{}, good...), bad))
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: error %v, want one saying %q", bad, err, says)
		}
	}
}

// With --datastore kubernetes the host is the node (NODE_NAME by default),
// no etcd is needed, and the fabric IP and subnet may come from the Node.
func TestFlagsKubernetes(t *testing.T) {
	t.Setenv("NODE_NAME", "worker-1")
	o, err := parseFlags([]string{"--datastore", "kubernetes"})
	if err != nil || o.agent.Host != "worker-1" || o.kube.node != "worker-1" || o.kube.namespace != kube.DefaultNamespace || o.agent.Subnet != "" {
		t.Fatalf("kubernetes flags: %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"--datastore", "kubernetes", "--pod-routes", "host-gw"}); err != nil || o.podRoutes != podRoutesHostGW {
		t.Fatalf("--pod-routes host-gw: %+v, %v", o, err)
	}
	t.Setenv("NODE_NAME", "")
	for bad, says := range map[string][]string{
		"--node is required":   {"--datastore", "kubernetes"},
		"differs from --node":  {"--datastore", "kubernetes", "--node", "a", "--host", "b"},
		"--subnet":             {"--datastore", "kubernetes", "--node", "a", "--subnet", "10.244.1.0"},
		"--namespace is empty": {"--datastore", "kubernetes", "--node", "a", "--namespace", ""},
		"not an IP address":    {"--datastore", "kubernetes", "--node", "a", "--fabric-ip", "x"},
		"want none or host-gw": {"--datastore", "kubernetes", "--node", "a", "--pod-routes", "vxlan"},
		"is for --datastore kubernetes": {"--host", "h1", "--fabric-ip", "10.99.0.2", "--subnet", "10.244.1.0/24", "--etcd", "http://127.0.0.1:2379",
			"--pod-routes", "host-gw"},
	} {
		if _, err := parseFlags(says); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%v: error %v, want one saying %q", says, err, bad)
		}
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startEtcd runs Debian's etcd on loopback ports until the test ends.
func startEtcd(t *testing.T) string {
	client, peer := "http://127.0.0.1:"+freePort(t), "http://127.0.0.1:"+freePort(t)
	cmd := exec.Command("etcd", "--name", "t", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return client
}

// The real daemon with a real etcd: it registers a container in a real
// network namespace, reports a connected directory, and removes its
// sockets on SIGTERM.
func TestDaemonWithEtcd(t *testing.T) {
	needRoot(t, "etcd")
	tmp, bin, ns := t.TempDir(), buildDaemon(t), makeNetns(t)
	admin := filepath.Join(tmp, "admin.sock")
	// The daemon runs in the root namespace here, where it must install no
	// nftables rules.
	d := exec.Command(bin, "--cluster", "t"+ns[3:8], "--host", "h1", "--fabric-ip", "10.99.0.2", "--subnet", "10.244.1.0/24",
		"--etcd", startEtcd(t), "--sock-dir", filepath.Join(tmp, "sock"), "--admin-socket", admin, "--log", filepath.Join(tmp, "log"),
		"--fabric-guard=false")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	c := dialAdmin(t, admin)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctr := directory.Container{ID: "c1", Name: "web", Host: "h1", IP: "10.244.1.2", NetNS: "/run/netns/" + ns}
	if err := c.Register(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	waitListed(t, c, "c1")
	st := waitConnected(t, c)
	if st.LocalContainers != 1 || st.ContainersPerHost["h1"] != 1 || st.Host != "h1" {
		t.Errorf("STATUS = %+v", st)
	}
	stopDaemon(t, d, admin, filepath.Join(tmp, "sock", "agent.sock"))
}

// stopDaemon sends SIGTERM and checks that the daemon exits cleanly and
// removes its sockets.
func stopDaemon(t *testing.T, d *exec.Cmd, sockets ...string) {
	t.Helper()
	d.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(); err != nil {
		t.Errorf("freeflowd exit after SIGTERM: %v", err)
	}
	for _, p := range sockets {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after SIGTERM (%v)", p, err)
		}
	}
}

// needRoot skips a test that creates a network namespace where it cannot.
func needRoot(t *testing.T, programs ...string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	for _, bin := range append(programs, "ip") {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
}

// buildDaemon builds freeflowd into a temporary directory.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "freeflowd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	return bin
}

// makeNetns creates a network namespace, removed when the test ends.
func makeNetns(t *testing.T) string {
	t.Helper()
	ns := "fft" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	return ns
}

// The real daemon on a real kube-apiserver, as the agent's user with only
// the agent's RBAC rules, given no fabric IP or subnet: it takes them from
// its Node, registers a pod (the record lands on the pod as its
// annotation, with the pod's namespace as tenant), reports a connected
// directory, unregisters it, and removes its sockets on SIGTERM.
func TestDaemonWithKubernetes(t *testing.T) {
	needRoot(t)
	api := testenv.StartKubeAPIServer(t)
	api.Namespace(kube.DefaultNamespace)
	api.Namespace("shop")
	api.GrantAgent(kube.DefaultNamespace, kube.AgentRules)
	api.Node("n1", "10.99.0.2", "10.244.1.0/24")
	pods := api.Client(testenv.KubeAdminToken).CoreV1().Pods("shop")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.2", PodIPs: []corev1.PodIP{{IP: "10.244.1.2"}}}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	tmp, bin, ns := t.TempDir(), buildDaemon(t), makeNetns(t)
	admin, lib := filepath.Join(tmp, "admin.sock"), filepath.Join(tmp, "sock")
	d := exec.Command(bin, "--datastore", "kubernetes", "--kubeconfig", api.Kubeconfig(testenv.KubeAgentToken), "--node", "n1",
		"--cluster", "t"+ns[3:8], "--sock-dir", lib, "--admin-socket", admin, "--log", filepath.Join(tmp, "log"), "--fabric-guard=false")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	c := dialAdmin(t, admin)
	defer c.Close()
	if err := c.Register(ctx, directory.Container{ID: "sb1", Name: "shop/web", Host: "n1", IP: "10.244.1.2", NetNS: "/run/netns/" + ns, FreeFlow: true}); err != nil {
		t.Fatal(err)
	}
	waitListed(t, c, "sb1")
	st := waitConnected(t, c)
	if st.Host != "n1" || st.ContainersPerHost["n1"] != 1 {
		t.Errorf("STATUS = %+v", st)
	}
	if cs, _ := c.List(ctx); len(cs) != 1 || cs[0].Tenant != "shop" {
		t.Errorf("LIST = %+v; want shop/web of tenant shop", cs)
	}
	if p, err := pods.Get(ctx, "web", metav1.GetOptions{}); err != nil || !strings.Contains(p.Annotations[kube.RecordAnnotation], `"sb1"`) {
		t.Errorf("pod annotations = %v, %v; want the record", p.Annotations, err)
	}
	if err := c.Unregister(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if p, err := pods.Get(ctx, "web", metav1.GetOptions{}); err != nil || p.Annotations[kube.RecordAnnotation] != "" {
		t.Errorf("pod annotations after UNREGISTER = %v, %v; want no record", p.Annotations, err)
	}
	stopDaemon(t, d, admin, filepath.Join(lib, "agent.sock"))
}

func dialAdmin(t *testing.T, path string) *agentapi.AdminClient {
	for i := 0; ; i++ {
		c, err := agentapi.DialAdmin(path)
		if err == nil {
			return c
		}
		if i == 100 {
			t.Fatalf("freeflowd did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitConnected waits for STATUS to report a live directory.
func waitConnected(t *testing.T, c *agentapi.AdminClient) agentapi.Status {
	var st agentapi.Status
	var err error
	for i := 0; i < 100; i++ {
		if st, err = c.Status(context.Background()); err == nil && st.Directory.Connected {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("STATUS never reported a connected directory: %+v, %v", st, err)
	return st
}

// waitListed waits for the watch to bring id into the agent's cache.
func waitListed(t *testing.T, c *agentapi.AdminClient, id string) {
	for i := 0; i < 100; i++ {
		cs, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range cs {
			if x.ID == id {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s never appeared in LIST", id)
}
