package kube

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kubeBin is where scripts/build-kube.sh puts the Kubernetes binaries it
// builds from the Go module proxy; FF_KUBE_BIN overrides it.
func kubeBin() string {
	if d := os.Getenv("FF_KUBE_BIN"); d != "" {
		return d
	}
	return "/var/cache/freeflow/kube-v1.34.2/bin"
}

// apiServer is a real kube-apiserver on loopback, on a real etcd, with two
// bearer tokens: an administrator's and the FreeFlow agent's, whose user
// has only the rules of AgentRules (bound in the test, as deploy/ binds
// them to the agent's service account).
type apiServer struct {
	t    *testing.T
	bin  string
	args []string
	url  string
	cmd  *exec.Cmd
	log  *os.File
}

const (
	adminToken = "admin-token-for-tests"
	agentToken = "agent-token-for-tests"
	agentUser  = "freeflow-agent"
)

func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	bin := filepath.Join(kubeBin(), "kube-apiserver")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("needs a real kube-apiserver at %s (scripts/build-kube.sh builds it): %v", bin, err)
	}
	etcd := testenv.StartEtcd(t, 1)
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubFile := filepath.Join(dir, "sa.pub")
	writeFile(t, pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	tokens := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokens, []byte(adminToken+",admin,admin,system:masters\n"+agentToken+","+agentUser+","+agentUser+"\n"))
	port := freePort(t)
	a := &apiServer{t: t, bin: bin, url: "https://127.0.0.1:" + port, args: []string{
		"--etcd-servers=" + strings.Join(etcd.Endpoints(), ","),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + port,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + pubFile,
		"--service-account-signing-key-file=" + keyFile, "--service-cluster-ip-range=10.96.0.0/16",
		"--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		// No controller manager makes the default service accounts here.
		"--disable-admission-plugins=ServiceAccount",
	}}
	if a.log, err = os.Create(filepath.Join(dir, "kube-apiserver.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.stop(); a.log.Close() })
	a.start()
	return a
}

func (a *apiServer) start() {
	a.t.Helper()
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	c := a.config(adminToken)
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		a.t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := hc.Get(a.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("kube-apiserver not ready after 90 s (%v); its log: %s", err, a.log.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (a *apiServer) stop() {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Kill()
	a.cmd.Wait()
	a.cmd = nil
}

func (a *apiServer) config(token string) *rest.Config {
	return &rest.Config{Host: a.url, BearerToken: token, QPS: 100, Burst: 200,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // the server's self-signed test certificate
}

func (a *apiServer) client(token string) kubernetes.Interface {
	a.t.Helper()
	c, err := kubernetes.NewForConfig(a.config(token))
	if err != nil {
		a.t.Fatal(err)
	}
	return c
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// grantAgent binds AgentRules to the agent's user.
func grantAgent(t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	ctx := ctxT(t)
	cluster, namespaced := AgentRules()
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: agentUser}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "freeflow-agent"}, Rules: cluster}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "freeflow-agent"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "freeflow-agent"}, Subjects: subj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "freeflow-agent"}, Rules: namespaced}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "freeflow-agent"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "freeflow-agent"}, Subjects: subj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func makeNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctxT(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func makeNode(t *testing.T, c kubernetes.Interface, name, ip, cidr string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	if _, err := c.CoreV1().Nodes().Create(ctxT(t), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The directory of two agents, running as the agent's user with only the
// RBAC rules deploy/ grants, on a real kube-apiserver and etcd: records
// written by one agent reach the other through the pod watch, Nodes are
// the hosts, the cluster key is agreed under a race, the policy comes from
// the ConfigMap, the agent may not create pods, and an API server outage
// shows in Health while the cache keeps answering, then heals.
func TestRealAPIServer(t *testing.T) {
	api := startAPIServer(t)
	admin := api.client(adminToken)
	makeNamespace(t, admin, DefaultNamespace)
	makeNamespace(t, admin, "team-a")
	grantAgent(t, admin, DefaultNamespace)
	makeNode(t, admin, "n1", "10.99.0.2", "10.244.1.0/24")
	makeNode(t, admin, "n2", "10.99.0.3", "10.244.2.0/24")
	agent := api.client(agentToken)
	logs := &logBuffer{}
	n1 := newDir(t, agent, "n1", nil)
	n2 := newDir(t, agent, "n2", logs)

	eventually(t, 10*time.Second, "both nodes are hosts", func() bool { return len(n2.Hosts()) == 2 })
	want := directory.Host{Name: "n1", FabricIP: "10.99.0.2", Subnet: "10.244.1.0/24"}
	if h, err := n1.Node(ctxT(t), true); err != nil || h != want {
		t.Errorf("Node = %+v, %v; want %+v", h, err, want)
	}
	if err := n1.PutHost(ctxT(t), want); err != nil {
		t.Errorf("PutHost: %v", err)
	}

	web := makePod(t, admin, "team-a", "web", "n1", "10.244.1.5", map[string]string{TenantLabel: "blue"})
	if got := put(t, n1, record("sb1", "team-a/web", "n1", "10.244.1.5")); got.Tenant != "blue" {
		t.Errorf("PutContainer returned tenant %q, want blue", got.Tenant)
	}
	eventually(t, 10*time.Second, "n2 sees team-a/web", hasIP(n2, "10.244.1.5"))
	if c, _ := n2.LookupIP("10.244.1.5"); c.Name != "team-a/web" || c.Host != "n1" || c.Tenant != "blue" || c.ID != "sb1" {
		t.Errorf("n2 LookupIP = %+v", c)
	}
	if err := n1.DeleteContainer(ctxT(t), "sb1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "n2 forgets it after DeleteContainer", lacksIP(n2, "10.244.1.5"))

	keys := make([][]byte, 4)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := []*Directory{n1, n2}[i%2].ClusterKey(ctxT(t))
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if len(k) != directory.ClusterKeySize || !bytes.Equal(k, keys[0]) {
			t.Fatalf("key %d = %x, key 0 = %x: concurrent first users disagree", i, k, keys[0])
		}
	}

	if _, err := admin.CoreV1().ConfigMaps(DefaultNamespace).Create(ctxT(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName}, Data: map[string]string{PolicyKey: `{"no_fast_path":["team-a/db"]}`},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the policy read through the agent's ConfigMap watch", func() bool {
		p, _ := n2.Policy(ctxT(t))
		return bytes.Contains(p, []byte("team-a/db"))
	})

	_, err := agent.CoreV1().Pods("team-a").Create(ctxT(t), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the agent created a pod: %v; its rules must not allow it", err)
	}

	put(t, n1, record("sb2", "team-a/web", "n1", "10.244.1.5"))
	eventually(t, 10*time.Second, "n2 sees team-a/web again", hasIP(n2, "10.244.1.5"))
	api.stop()
	eventually(t, 30*time.Second, "the outage in Health", func() bool { return !n2.Health().Connected })
	t.Logf("Health during the outage: %+v", n2.Health())
	if c, ok := n2.LookupIP("10.244.1.5"); !ok || c.ID != "sb2" {
		t.Errorf("LookupIP during the outage = %+v, %v; want the cached record", c, ok)
	}
	if _, err := n1.PutContainer(ctxT(t), record("sb3", "team-a/web", "n1", "10.244.1.5")); err == nil ||
		!strings.Contains(err.Error(), "check that the Kubernetes API server is reachable") {
		t.Errorf("PutContainer during the outage: %v; want an error saying what to check", err)
	}
	api.start()
	if err := admin.CoreV1().Pods("team-a").Delete(ctxT(t), web.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "n2 connected again and forgets the deleted pod", func() bool {
		return n2.Health().Connected && lacksIP(n2, "10.244.1.5")()
	})
	if n := logs.count("skipping"); n != 0 {
		t.Errorf("valid records were reported as bad:\n%s", logs)
	}
}
