package deploy

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// kubeAPIServer is where scripts/build-kube.sh puts the kube-apiserver it
// builds from the Go module proxy.
const kubeAPIServer = "/var/cache/freeflow/kube-v1.34.2/bin/kube-apiserver"

// apiServer is a real kube-apiserver on loopback, on a real etcd, with
// RBAC; the test talks to it as an admin with a static token.
type apiServer struct {
	url, token string
}

func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	if _, err := os.Stat(kubeAPIServer); err != nil {
		t.Skipf("no kube-apiserver at %s (scripts/build-kube.sh builds it): %v", kubeAPIServer, err)
	}
	if missing := testenv.Missing("kubectl"); missing != "" {
		t.Skip(missing)
	}
	etcd := testenv.StartEtcd(t, 1)
	dir := t.TempDir()
	a := &apiServer{token: testenv.RandomName("tok", 16)}
	os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(a.token+",admin,admin,system:masters\n"), 0o600)
	writeServiceAccountKey(t, dir)
	port := freePort(t)
	a.url = fmt.Sprintf("https://127.0.0.1:%d", port)
	cmd := exec.Command(kubeAPIServer,
		"--etcd-servers", strings.Join(etcd.Endpoints(), ","),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(port),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--authorization-mode", "RBAC",
		"--allow-privileged=true", "--profiling=false")
	startLogged(t, cmd, filepath.Join(dir, "kube-apiserver.log"))
	testenv.WaitWithin(t, 120*time.Second, "kube-apiserver to be ready", func() bool {
		_, err := a.kubectl("get", "--raw", "/readyz")
		return err == nil
	})
	return a
}

// kubectl runs kubectl as the admin and returns its standard output; the
// error carries its standard error.
func (a *apiServer) kubectl(args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--server", a.url, "--token", a.token, "--insecure-skip-tls-verify"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), err
}

func (a *apiServer) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := a.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// writeServiceAccountKey writes the key pair the API server signs and
// checks service account tokens with.
func writeServiceAccountKey(t *testing.T, dir string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startLogged starts cmd with its output in the file logPath, and ends it
// when the test ends, showing the end of its log if the test failed.
func startLogged(t *testing.T, cmd *exec.Cmd, logPath string) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (end):\n%s", filepath.Base(cmd.Path), b)
		}
	})
}

// TestManifestsApplyOnAPIServer: a real kube-apiserver accepts every
// manifest (server-side dry run: admission, defaults, validation, RBAC
// escalation checks), then, applied, RBAC lets the agent's service account
// watch pods and nodes, patch pods, and keep its key and policy in
// freeflow-system, and nothing else: it cannot create or delete pods, nor
// read Secrets elsewhere.
func TestManifestsApplyOnAPIServer(t *testing.T) {
	a := startAPIServer(t)
	// The namespace first: a dry run makes nothing, so the namespaced
	// objects would otherwise name a namespace that does not exist.
	a.mustKubectl(t, "apply", "-f", "00-namespace.yaml")
	a.mustKubectl(t, "apply", "--dry-run=server", "-f", ".")
	a.mustKubectl(t, "apply", "-f", ".")
	const sa = "system:serviceaccount:freeflow-system:freeflow"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "pods", "--all-namespaces"}, "yes"},
		{[]string{"list", "pods", "--all-namespaces"}, "yes"},
		{[]string{"patch", "pods", "-n", "default"}, "yes"},
		{[]string{"watch", "nodes"}, "yes"},
		{[]string{"create", "secrets", "-n", "freeflow-system"}, "yes"},
		{[]string{"watch", "configmaps/freeflow-config", "-n", "freeflow-system"}, "yes"},
		{[]string{"get", "secrets/freeflow-cluster-key", "-n", "freeflow-system"}, "yes"},
		{[]string{"get", "secrets/other", "-n", "freeflow-system"}, "no"},
		{[]string{"watch", "configmaps/other", "-n", "freeflow-system"}, "no"},
		{[]string{"create", "pods", "-n", "default"}, "no"},
		{[]string{"create", "pods", "-n", "freeflow-system"}, "no"},
		{[]string{"delete", "pods", "-n", "default"}, "no"},
		{[]string{"patch", "nodes"}, "no"},
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"create", "configmaps", "-n", "freeflow-system"}, "no"},
	} {
		out, _ := a.kubectl(append([]string{"auth", "can-i", "--as=" + sa}, c.args...)...)
		if out != c.want {
			t.Errorf("can the agent %s? %q, want %s", strings.Join(c.args, " "), out, c.want)
		}
	}
}
