package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/ociimage"
	"github.com/freeflow-net/freeflow/internal/policy"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
	"github.com/freeflow-net/freeflow/internal/testenv/kube"
)

// redisImage holds Debian's redis programs, a shell and the few tools the
// check script uses, with their glibc: an image the runtime wrapper
// preloads the library into.
const redisImage = "localhost/freeflow/redis:1"

// TestKubeDeployFreeFlow: FreeFlow installed on a two-node Kubernetes
// cluster the way a user installs it: the image imported, `deploy/`
// applied (only what a cluster without kube-proxy needs changed: the API
// server's address), the runtime handler made the default and containerd
// restarted. The DaemonSet rolls out on both nodes and turns them Ready;
// then a redis Deployment on one node and client Jobs, none of whose
// specs mention FreeFlow: a client on the same node gets shm and one on
// the other node host-tcp, every byte of a 3 MB value back intact;
// `freeflow conns` names both ends namespace/name; a client in another
// namespace (another tenant) stays on the overlay, and so does one
// annotated freeflow.io/fast-path: "off" (it has no library); deleting the pods
// unregisters them from both agents.
func TestKubeDeployFreeFlow(t *testing.T) {
	kc := newKube(t, kube.Options{Hosts: 2, NoAgents: true, NoCNI: true})
	kc.ImportImage(t, freeflowImage(t))
	t.Cleanup(func() {
		if t.Failed() {
			agentLogs(t, kc)
		}
	})
	begin := time.Now()
	kc.Apply(t, deployManifests(t, kc))
	if _, err := kc.KubectlErr("-n", "freeflow-system", "rollout", "status", "ds/freeflow", "--timeout=180s"); err != nil {
		t.Fatal(err)
	}
	kc.WaitReady(t)
	t.Logf("kubectl apply -f deploy/ → FreeFlow's DaemonSet rolled out and both nodes Ready in %.1fs", time.Since(begin).Seconds())
	for _, n := range kc.Nodes {
		if b, err := os.ReadFile(kc.ContainerdConfig(n)); err != nil || !strings.Contains(string(b), "runtimes.freeflow]") {
			t.Fatalf("node %s: the installer added no runtime handler to containerd's configuration (%v):\n%s", n, err, b)
		}
	}
	if err := kc.SetDefaultRuntime("freeflow"); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := kube.HostProgramsRootfs(root, "sh", "redis-server", "redis-cli", "redis-benchmark", "head", "base64", "cat", "cmp"); err != nil {
		t.Fatal(err)
	}
	kc.BuildImage(t, root, ociimage.Config{Name: redisImage, Entrypoint: []string{"/bin/sh", "-c"}})
	for _, ns := range []string{"shop", "other"} {
		kc.Kubectl(t, "create", "namespace", ns)
	}
	server, node := kc.Nodes[0], kc.Nodes[0]
	kc.Apply(t, redisDeployment("shop", server))
	kc.Kubectl(t, "-n", "shop", "rollout", "status", "deploy/redis", "--timeout=120s")
	redisPod := strings.TrimSpace(kc.Kubectl(t, "-n", "shop", "get", "pods", "-l", "app=redis", "-o", "jsonpath={.items[0].metadata.name}"))
	ip := strings.TrimSpace(kc.Kubectl(t, "-n", "shop", "get", "pod", redisPod, "-o", "jsonpath={.status.podIP}"))

	for i, c := range []struct {
		ns, node, path, reason string
		optOut                 bool
	}{
		{"shop", node, "shm", "", false},
		{"shop", kc.Nodes[1], "host-tcp", "", false},
		{"other", node, "overlay", policy.ReasonTenantDiffers, false},
		// The server's agent sees a client without the library.
		{"shop", node, "overlay", "peer-no-library", true},
	} {
		name := fmt.Sprintf("check-%d", i)
		t.Run(fmt.Sprintf("%s-%s-%s", c.ns, c.node, c.path), func(t *testing.T) {
			paths := watchPaths(t, kc.FF, c.node)
			kc.Apply(t, redisCheckJob(c.ns, name, c.node, ip, c.optOut))
			kc.Kubectl(t, "-n", c.ns, "wait", "job/"+name, "--for=condition=complete", "--timeout=120s")
			logs := kc.Kubectl(t, "-n", c.ns, "logs", "job/"+name)
			if !strings.HasSuffix(strings.TrimSpace(logs), "OK") {
				t.Fatalf("check job %s/%s: %s", c.ns, name, logs)
			}
			paths.expect(t, c.path, c.reason)
		})
	}

	// A client that holds its connection, for conns to show both ends.
	kc.Apply(t, redisHolder("shop", "holder", kc.Nodes[1], ip))
	kc.WaitPodPhase(t, "shop", "holder", "Running", podTimeout)
	want := agentapi.ConnInfo{LocalContainer: "shop/holder", RemoteContainer: "shop/" + redisPod, Path: "host-tcp"}
	testenv.WaitWithin(t, time.Minute, "conns on "+kc.Nodes[1]+" to list the holder's connection", func() bool {
		return slices.ContainsFunc(connsOf(t, kc.FF, want.LocalContainer), func(ci agentapi.ConnInfo) bool {
			return ci.LocalContainer == want.LocalContainer && ci.RemoteContainer == want.RemoteContainer && ci.Path == want.Path
		})
	})

	// The same list from the agent's pod, as a user without the CLI's
	// cluster asks it.
	agentPod := strings.TrimSpace(kc.Kubectl(t, "-n", "freeflow-system", "get", "pods", "-l", "app.kubernetes.io/name=freeflow",
		"--field-selector", "spec.nodeName="+kc.Nodes[1], "-o", "jsonpath={.items[0].metadata.name}"))
	var listed []agentapi.ConnInfo
	out := kc.Kubectl(t, "-n", "freeflow-system", "exec", agentPod, "-c", "agent", "--", "/freeflow/freeflowd", "conns", "--cluster", kc.FF.Name, "-o", "json")
	must(t, json.Unmarshal([]byte(out), &listed), "parse freeflowd conns -o json: %s", out)
	if !slices.ContainsFunc(listed, func(ci agentapi.ConnInfo) bool {
		return ci.LocalContainer == want.LocalContainer && ci.RemoteContainer == want.RemoteContainer && ci.Path == want.Path
	}) {
		t.Errorf("freeflowd conns in %s does not list %+v:\n%s", agentPod, want, out)
	}

	kc.Kubectl(t, "delete", "namespace", "shop", "other", "--wait=true", "--timeout=120s")
	for _, n := range kc.Nodes {
		testenv.WaitWithin(t, time.Minute, "node "+n+"'s agent to have no pod left", func() bool {
			return localContainers(t, kc.FF, n) == 0
		})
	}
}

// agentLogs writes the end of every FreeFlow pod's logs to the test log.
func agentLogs(t *testing.T, kc *kube.Cluster) {
	pods, _ := kc.KubectlErr("-n", "freeflow-system", "get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
	for _, p := range strings.Fields(pods) {
		for _, c := range []string{"install", "agent"} {
			logs, err := kc.KubectlErr("-n", "freeflow-system", "logs", p, "-c", c, "--tail=30")
			t.Logf("--- %s's %s container (%v):\n%s", p, c, err, logs)
		}
	}
}

// localContainers is how many containers (pods) host's agent has
// registered.
func localContainers(t *testing.T, c *testenv.Cluster, host string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := agentapi.DialAdmin(state.NewLayout(c.Name).AdminSocket(host))
	if err != nil {
		t.Fatalf("dial %s's agent: %v", host, err)
	}
	defer a.Close()
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatalf("status of %s's agent: %v", host, err)
	}
	return st.LocalContainers
}

// freeflowImage builds FreeFlow's image (`make image`) and returns its file.
func freeflowImage(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-s", "-C", root, "image", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return filepath.Join(bin, "freeflow-image.tar")
}

// deployManifests returns deploy/'s manifests, in order, with what the
// test cluster needs that a real one does not: the API server's address
// for the DaemonSet's pods (there is no kube-proxy to route the
// kubernetes Service) and the test's cluster name (the name in the paths
// of the agent's sockets, which tests running side by side must not
// share).
func deployManifests(t *testing.T, kc *kube.Cluster) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/: %v", err)
	}
	sort.Strings(files)
	var docs []string
	for _, f := range files {
		if filepath.Base(f) == "30-daemonset.yaml" {
			docs = append(docs, daemonSetForTest(t, kc, f))
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	return strings.Join(docs, "\n---\n")
}

// daemonSetForTest rewrites the DaemonSet with kubectl's own local edits.
func daemonSetForTest(t *testing.T, kc *kube.Cluster, file string) string {
	t.Helper()
	host, port, _ := strings.Cut(strings.TrimPrefix(kc.APIServer, "https://"), ":")
	cluster := "--cluster=" + kc.FF.Name
	patch := fmt.Sprintf(`[{"op":"add","path":"/spec/template/spec/initContainers/0/command/-","value":%q},`+
		`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":%q}]`, cluster, cluster)
	patched := kc.Kubectl(t, "patch", "--local", "-f", file, "--type=json", "-p", patch, "-o", "yaml")
	f := filepath.Join(t.TempDir(), "ds.yaml")
	if err := os.WriteFile(f, []byte(patched), 0o644); err != nil {
		t.Fatal(err)
	}
	return kc.Kubectl(t, "set", "env", "--local", "-f", f, "-o", "yaml", "--all", "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)
}

// redisDeployment is a redis server on node, its spec free of FreeFlow.
func redisDeployment(ns, node string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: redis, namespace: %s}
spec:
  replicas: 1
  selector: {matchLabels: {app: redis}}
  template:
    metadata: {labels: {app: redis}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %s}
      terminationGracePeriodSeconds: 1
      containers:
      - name: redis
        image: %s
        imagePullPolicy: Never
        args: ["exec redis-server --port 6379 --protected-mode no --save '' --appendonly no"]
`, ns, node, redisImage)
}

// redisCheckScript stores three 3 MB values and reads them back, byte
// for byte, then runs redis-benchmark's GET; "OK" last if all held.
const redisCheckScript = `set -e
head -c 3000000 /dev/urandom | base64 -w0 > /tmp/v
{ cat /tmp/v; echo; } > /tmp/want
for i in 1 2 3; do redis-cli -h $0 -x set k$i < /tmp/v > /dev/null; done
for i in 1 2 3; do redis-cli -h $0 --raw get k$i > /tmp/got; cmp /tmp/want /tmp/got; done
redis-benchmark -h $0 -t get -n 2000 -q
echo OK`

// redisCheckJob runs redisCheckScript against ip from node.
func redisCheckJob(ns, name, node, ip string, optOut bool) string {
	annotations := "{}"
	if optOut {
		annotations = `{freeflow.io/fast-path: "off"}`
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: %s, namespace: %s}
spec:
  backoffLimit: 0
  template:
    metadata: {annotations: %s}
    spec:
      nodeSelector: {kubernetes.io/hostname: %s}
      restartPolicy: Never
      containers:
      - name: check
        image: %s
        imagePullPolicy: Never
        args: [%q, %q]
`, name, ns, annotations, node, redisImage, redisCheckScript, ip)
}

// redisHolder is a pod on node that keeps one connection to ip open.
func redisHolder(ns, name, node, ip string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: hold
    image: %s
    imagePullPolicy: Never
    args: ["exec redis-cli -h %s -r -1 -i 1 ping > /dev/null"]
`, name, ns, node, redisImage, ip)
}
