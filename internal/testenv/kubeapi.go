package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// KubeBin is where scripts/build-kube.sh puts the Kubernetes binaries it
// builds from the Go module proxy; FF_KUBE_BIN overrides it.
func KubeBin() string {
	if d := os.Getenv("FF_KUBE_BIN"); d != "" {
		return d
	}
	return "/var/cache/freeflow/kube-v1.34.2/bin"
}

// Bearer tokens of the KubeAPIServer's two users.
const (
	KubeAdminToken = "admin-token-for-tests" // user admin, group system:masters
	KubeAgentToken = "agent-token-for-tests" // user KubeAgentUser, no rights until bound
	KubeAgentUser  = "freeflow-agent"
)

// KubeAPIServer is a real kube-apiserver on loopback, on a real etcd of
// its own, authenticating two bearer tokens (an administrator's and a user
// for the FreeFlow agent, with RBAC on). Everything is removed when the
// test ends.
type KubeAPIServer struct {
	t    *testing.T
	bin  string
	args []string
	URL  string
	dir  string
	cmd  *exec.Cmd
	log  *os.File
}

// StartKubeAPIServer starts a KubeAPIServer and waits until it is ready;
// it skips the test if kube-apiserver or etcd is not installed.
func StartKubeAPIServer(t *testing.T) *KubeAPIServer {
	t.Helper()
	bin := filepath.Join(KubeBin(), "kube-apiserver")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("needs a real kube-apiserver at %s (scripts/build-kube.sh builds it): %v", bin, err)
	}
	etcd := StartEtcd(t, 1)
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile, tokens := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub"), filepath.Join(dir, "tokens.csv")
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	writeFile(t, pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	writeFile(t, tokens, []byte(KubeAdminToken+",admin,admin,system:masters\n"+KubeAgentToken+","+KubeAgentUser+","+KubeAgentUser+"\n"))
	port := freePorts(t, 1)[0]
	a := &KubeAPIServer{t: t, bin: bin, dir: dir, URL: fmt.Sprintf("https://127.0.0.1:%d", port), args: []string{
		"--etcd-servers=" + strings.Join(etcd.Endpoints(), ","),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
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
	t.Cleanup(func() { a.Stop(); a.log.Close() })
	a.Start()
	return a
}

// Start starts the server (again, after Stop, on the same port and data)
// and waits until /readyz answers.
func (a *KubeAPIServer) Start() {
	a.t.Helper()
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(a.Config(KubeAdminToken))
	if err != nil {
		a.t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := hc.Get(a.URL + "/readyz")
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

// Stop kills the server.
func (a *KubeAPIServer) Stop() {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Kill()
	a.cmd.Wait()
	a.cmd = nil
}

// Config is a client configuration for the user of token.
func (a *KubeAPIServer) Config(token string) *rest.Config {
	return &rest.Config{Host: a.URL, BearerToken: token, QPS: 100, Burst: 200,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // the server's self-signed test certificate
}

// Client is a client for the user of token.
func (a *KubeAPIServer) Client(token string) kubernetes.Interface {
	a.t.Helper()
	c, err := kubernetes.NewForConfig(a.Config(token))
	if err != nil {
		a.t.Fatal(err)
	}
	return c
}

// Kubeconfig writes a kubeconfig for the user of token and returns its path.
func (a *KubeAPIServer) Kubeconfig(token string) string {
	a.t.Helper()
	path := filepath.Join(a.dir, "kubeconfig-"+token)
	writeFile(a.t, path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: test, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, a.URL, token)))
	return path
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// GrantAgent binds the agent's rules to KubeAgentUser: rules returns the
// cluster-wide ones (a ClusterRole) and those of namespace ns (a Role).
func (a *KubeAPIServer) GrantAgent(ns string, rules func() (cluster, namespaced []rbacv1.PolicyRule)) {
	a.t.Helper()
	admin, ctx := a.Client(KubeAdminToken), context.Background()
	cluster, namespaced := rules()
	meta := metav1.ObjectMeta{Name: "freeflow-agent"}
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: KubeAgentUser}}
	ref := func(kind string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: meta.Name}
	}
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: cluster}, metav1.CreateOptions{})
	if err == nil {
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref("ClusterRole"), Subjects: subj}, metav1.CreateOptions{})
	}
	if err == nil {
		_, err = admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: namespaced}, metav1.CreateOptions{})
	}
	if err == nil {
		_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref("Role"), Subjects: subj}, metav1.CreateOptions{})
	}
	if err != nil {
		a.t.Fatalf("grant the agent's rules: %v", err)
	}
}

// Namespace creates namespace name.
func (a *KubeAPIServer) Namespace(name string) {
	a.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := a.Client(KubeAdminToken).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// Node creates a Node as a kubelet and the controller manager would leave
// it: InternalIP ip, pod CIDR cidr.
func (a *KubeAPIServer) Node(name, ip, cidr string) {
	a.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	if _, err := a.Client(KubeAdminToken).CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}
