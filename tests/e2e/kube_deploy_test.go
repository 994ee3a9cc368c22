package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/kubelab"
	"github.com/freeflow-net/freeflow/internal/policy"
	"github.com/freeflow-net/freeflow/internal/testenv"
	"github.com/freeflow-net/freeflow/internal/testenv/kube"
)

// TestKubeDeployFreeFlow: FreeFlow installed on a two-node Kubernetes
// cluster the way a user installs it: the image imported, `deploy/`
// applied (only what a cluster without kube-proxy needs changed: the API
// server's address), the runtime handler made the default and containerd
// restarted. The DaemonSet rolls out on both nodes and turns them Ready,
// its agents routing each other's pod CIDRs (host-gw);
// then a redis Deployment on one node and client Jobs, none of whose
// specs mention FreeFlow: a client on the same node gets shm and one on
// the other node host-tcp, every byte of a 3 MB value back intact;
// `freeflow conns` names both ends namespace/name; a client in another
// namespace (another tenant) stays on the overlay, and so does one
// annotated freeflow.io/fast-path: "off" (it has no library); deleting the pods
// unregisters them from both agents.
func TestKubeDeployFreeFlow(t *testing.T) {
	kc := newKube(t, kube.Options{Hosts: 2, NoAgents: true, NoCNI: true})
	took, err := kc.InstallFreeFlow(context.Background(), freeflowImage(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(kc.FreeFlowLogs(context.Background()))
		}
	})
	t.Logf("kubectl apply -f deploy/ → FreeFlow's DaemonSet rolled out and both nodes Ready in %.1fs", took.Seconds())
	for _, n := range kc.Nodes {
		if b, err := os.ReadFile(kc.ContainerdConfig(n)); err != nil || !strings.Contains(string(b), "runtimes.freeflow]") {
			t.Fatalf("node %s: the installer added no runtime handler to containerd's configuration (%v):\n%s", n, err, b)
		}
	}
	// The agents route each other's pod CIDRs (host-gw), in place of the
	// CLI overlay's routes: the pods' connections across nodes below are
	// set up over them.
	for i, n := range kc.Nodes {
		peer := kc.Hosts[(i+1)%len(kc.Hosts)]
		want := fmt.Sprintf("%s via %s dev", peer.Subnet, peer.FabricIP)
		var got string
		testenv.WaitWithin(t, 30*time.Second, "node "+n+"'s agent to route "+peer.Subnet, func() bool {
			out, _ := exec.Command("ip", "-n", filepath.Base(kc.HostNetNS(n)), "-4", "route", "show", peer.Subnet).CombinedOutput()
			got = string(out)
			return strings.Contains(got, want) && strings.Contains(got, "proto 70") && strings.Count(got, "\n") == 1
		})
	}
	if err := kc.SetDefaultRuntime("freeflow"); err != nil {
		t.Fatal(err)
	}
	if err := kc.BuildRedisImage(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"shop", "other"} {
		kc.Kubectl(t, "create", "namespace", ns)
	}
	server, node := kc.Nodes[0], kc.Nodes[0]
	kc.Apply(t, kubelab.RedisServer("shop", "redis", server, false))
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
			kc.Apply(t, kubelab.ShellJob(c.ns, name, c.node, c.optOut, redisCheckScript, ip))
			kc.Kubectl(t, "-n", c.ns, "wait", "job/"+name, "--for=condition=complete", "--timeout=120s")
			logs := kc.Kubectl(t, "-n", c.ns, "logs", "job/"+name)
			if !strings.HasSuffix(strings.TrimSpace(logs), "OK") {
				t.Fatalf("check job %s/%s: %s", c.ns, name, logs)
			}
			paths.expect(t, c.path, c.reason)
		})
	}

	// A client that holds its connection, for conns to show both ends.
	kc.Apply(t, kubelab.ShellPod("shop", "holder", kc.Nodes[1], false, "exec redis-cli -h "+ip+" -r -1 -i 1 ping > /dev/null"))
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
			return agentStatus(t, kc.FF, n).LocalContainers == 0
		})
	}
}

// freeflowImage builds FreeFlow's image (`make image`) and returns its file.
func freeflowImage(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	if err := testenv.Make("image", bin); err != nil {
		t.Fatal(err)
	}
	return kubelab.ImageFile(bin)
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
