package kube

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The directory of two agents, running as the agent's user with only the
// RBAC rules deploy/ grants, on a real kube-apiserver and etcd: records
// written by one agent reach the other through the pod watch, Nodes are
// the hosts, the cluster key is agreed under a race, the policy comes from
// the ConfigMap, the agent may not create pods, and an API server outage
// shows in Health while the cache keeps answering, then heals.
func TestRealAPIServer(t *testing.T) {
	api := testenv.StartKubeAPIServer(t)
	admin := api.Client(testenv.KubeAdminToken)
	api.Namespace(DefaultNamespace)
	api.Namespace("team-a")
	api.GrantAgent(DefaultNamespace, AgentRules)
	api.Node("n1", "10.99.0.2", "10.244.1.0/24")
	api.Node("n2", "10.99.0.3", "10.244.2.0/24")
	agent := api.Client(testenv.KubeAgentToken)
	logs := &testenv.LogBuffer{}
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

	testenv.AgreeOnKey(t, 4, func(i int) ([]byte, error) { return []*Directory{n1, n2}[i%2].ClusterKey(ctxT(t)) })

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
	api.Stop()
	eventually(t, 30*time.Second, "the outage in Health", func() bool { return !n2.Health().Connected })
	t.Logf("Health during the outage: %+v", n2.Health())
	if c, ok := n2.LookupIP("10.244.1.5"); !ok || c.ID != "sb2" {
		t.Errorf("LookupIP during the outage = %+v, %v; want the cached record", c, ok)
	}
	if _, err := n1.PutContainer(ctxT(t), record("sb3", "team-a/web", "n1", "10.244.1.5")); err == nil ||
		!strings.Contains(err.Error(), "check that the Kubernetes API server is reachable") {
		t.Errorf("PutContainer during the outage: %v; want an error saying what to check", err)
	}
	api.Start()
	if err := admin.CoreV1().Pods("team-a").Delete(ctxT(t), web.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "n2 connected again and forgets the deleted pod", func() bool {
		return n2.Health().Connected && lacksIP(n2, "10.244.1.5")()
	})
	if n := logs.Count("skipping"); n != 0 {
		t.Errorf("valid records were reported as bad:\n%s", logs)
	}
}
