package kube

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/policy"
	"github.com/freeflow-net/freeflow/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
)

// A pod registered by the agent of its node is seen by another node's
// agent through its pod watch, with the pod's name and namespace as name
// and tenant; unregistering, or deleting the pod, removes it everywhere.
func TestPodRecordSeenByOtherAgent(t *testing.T) {
	client := fake.NewClientset()
	n1, n2 := newDir(t, client, "n1", nil), newDir(t, client, "n2", nil)
	makePod(t, client, "team-a", "web", "n1", "10.244.1.5", nil)
	stored := put(t, n1, record("sb1", "team-a/web", "n1", "10.244.1.5"))
	if stored.Tenant != "team-a" || stored.Name != "team-a/web" {
		t.Errorf("PutContainer returned %+v; want tenant team-a (the namespace)", stored)
	}
	eventually(t, 5*time.Second, "n2 sees team-a/web", hasIP(n2, "10.244.1.5"))
	c, _ := n2.LookupIP("10.244.1.5")
	want := record("sb1", "team-a/web", "n1", "10.244.1.5")
	want.Tenant = "team-a"
	if !c.Created.Equal(want.Created) || func() bool { c.Created = want.Created; return c != want }() {
		t.Errorf("n2 LookupIP = %+v, want %+v", c, want)
	}
	if cs := n2.Containers(); len(cs) != 1 || cs[0].ID != "sb1" {
		t.Errorf("n2 Containers = %+v", cs)
	}

	if err := n1.DeleteContainer(ctxT(t), "sb1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "n2 forgets team-a/web after DeleteContainer", lacksIP(n2, "10.244.1.5"))
	if v, ok := annotation(t, client, "team-a", "web"); ok {
		t.Errorf("annotation still on the pod after DeleteContainer: %s", v)
	}
	if err := n1.DeleteContainer(ctxT(t), "sb1"); err != nil {
		t.Errorf("DeleteContainer of a removed record: %v; want none (as CNI DEL)", err)
	}

	put(t, n1, record("sb2", "team-a/web", "n1", "10.244.1.5"))
	eventually(t, 5*time.Second, "n2 sees the pod again", hasIP(n2, "10.244.1.5"))
	if err := client.CoreV1().Pods("team-a").Delete(ctxT(t), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "n2 forgets a deleted pod", lacksIP(n2, "10.244.1.5"))
	if err := n1.DeleteContainer(ctxT(t), "sb2"); err != nil {
		t.Errorf("DeleteContainer after the pod is gone: %v; want none", err)
	}
	if _, err := n1.PutContainer(ctxT(t), record("sb3", "team-a/gone", "n1", "10.244.1.9")); err == nil ||
		!strings.Contains(err.Error(), "team-a/gone") {
		t.Errorf("PutContainer on a missing pod: %v; want an error naming it", err)
	}
	if _, err := n1.PutContainer(ctxT(t), record("sb4", "sb4", "n1", "10.244.1.9")); err == nil ||
		!strings.Contains(err.Error(), "namespace/name") {
		t.Errorf("PutContainer of a name that is no pod: %v; want namespace/name asked for", err)
	}
}

// The tenant is the pod's freeflow.io/tenant label if set, else its
// namespace; what the annotation claims for name and tenant is ignored.
func TestTenantFromLabelOrNamespace(t *testing.T) {
	client := fake.NewClientset()
	n1, n2 := newDir(t, client, "n1", nil), newDir(t, client, "n2", nil)
	makePod(t, client, "shop", "db", "n1", "10.244.1.2", map[string]string{TenantLabel: "blue"})
	makePod(t, client, "shop", "web", "n1", "10.244.1.3", nil)
	claim := record("sb1", "shop/db", "n1", "10.244.1.2")
	claim.Tenant = "red"
	if got := put(t, n1, claim); got.Tenant != "blue" {
		t.Errorf("PutContainer returned tenant %q, want blue (the label)", got.Tenant)
	}
	put(t, n1, record("sb2", "shop/web", "n1", "10.244.1.3"))
	eventually(t, 5*time.Second, "n2 sees both pods", func() bool { return len(n2.Containers()) == 2 })
	for ip, tenant := range map[string]string{"10.244.1.2": "blue", "10.244.1.3": "shop"} {
		if c, _ := n2.LookupIP(ip); c.Tenant != tenant {
			t.Errorf("%s: tenant %q, want %q", ip, c.Tenant, tenant)
		}
	}
}

// A pod's author can write the annotation too, so only what the API says
// with authority counts: a record naming another node or an IP its status
// does not have is skipped, with a log line naming the pod; a record is
// not counted until the kubelet reported the pod's IP; finished pods are
// no containers. Nothing else is disturbed.
func TestForgedOrEarlyRecordsSkipped(t *testing.T) {
	client := fake.NewClientset()
	logs := &testenv.LogBuffer{}
	n1, n2 := newDir(t, client, "n1", nil), newDir(t, client, "n2", logs)
	good := makePod(t, client, "a", "good", "n1", "10.244.1.2", nil)
	makePod(t, client, "a", "early", "n1", "", nil)
	makePod(t, client, "a", "liar-ip", "n1", "10.244.1.4", nil)
	makePod(t, client, "a", "liar-host", "n1", "10.244.1.5", nil)
	put(t, n1, record("sb1", "a/good", "n1", "10.244.1.2"))
	put(t, n1, record("sb2", "a/early", "n1", "10.244.1.3"))
	put(t, n1, record("sb3", "a/liar-ip", "n1", "10.244.1.2"))   // good's IP
	put(t, n1, record("sb4", "a/liar-host", "n2", "10.244.1.5")) // another node
	eventually(t, 5*time.Second, "both forgeries reported", func() bool {
		return logs.Count("a/liar-ip", "10.244.1.4") == 1 && logs.Count("a/liar-host", `node "n1"`) == 1
	})
	if c, ok := n2.LookupIP("10.244.1.2"); !ok || c.Name != "a/good" {
		t.Errorf("LookupIP of good's IP = %+v, %v; a forged record took it", c, ok)
	}
	if _, ok := n2.LookupIP("10.244.1.3"); ok {
		t.Error("a record counted before the kubelet reported the pod's IP")
	}
	early, err := client.CoreV1().Pods("a").Get(ctxT(t), "early", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPodIP(t, client, early, "10.244.1.3")
	eventually(t, 5*time.Second, "early counted once its IP is reported", hasIP(n2, "10.244.1.3"))

	good.Status.Phase = corev1.PodSucceeded
	good.Status.PodIP, good.Status.PodIPs = "10.244.1.2", []corev1.PodIP{{IP: "10.244.1.2"}}
	if _, err := client.CoreV1().Pods("a").UpdateStatus(ctxT(t), good, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a finished pod is no container", lacksIP(n2, "10.244.1.2"))
}

// A malformed annotation is logged once, naming the pod and what is
// wrong, and skipped; the other pods are unaffected, and resyncs do not
// log it again.
func TestMalformedAnnotationSkipped(t *testing.T) {
	client := fake.NewClientset()
	logs := &testenv.LogBuffer{}
	n1 := newDir(t, client, "n1", nil)
	n2 := newDir(t, client, "n2", logs, func(c *Config) { c.Resync = time.Second }) // client-go's least

	for name, value := range map[string]string{"junk": "{not json", "noid": `{"ip":"10.244.1.8","host":"n1"}`, "badip": `{"id":"x","ip":"web","host":"n1"}`} {
		p := makePod(t, client, "a", name, "n1", "10.244.1.8", nil)
		p.Annotations = map[string]string{RecordAnnotation: value}
		if _, err := client.CoreV1().Pods("a").Update(ctxT(t), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	makePod(t, client, "a", "fine", "n1", "10.244.1.9", nil)
	put(t, n1, record("sb1", "a/fine", "n1", "10.244.1.9"))
	eventually(t, 5*time.Second, "the valid pod is seen", hasIP(n2, "10.244.1.9"))
	eventually(t, 5*time.Second, "each malformed record reported", func() bool {
		return logs.Count("a/junk", "not a JSON container record") == 1 && logs.Count("a/noid", "no container id") == 1 &&
			logs.Count("a/badip", `"web" is not an IP address`) == 1
	})
	seen := n2.cache.podEvents()
	eventually(t, 5*time.Second, "two resyncs of every pod", func() bool { return n2.cache.podEvents() >= seen+2*4 })
	if n := logs.Count("a/junk"); n != 1 {
		t.Errorf("a/junk reported %d times over resyncs; want once:\n%s", n, logs)
	}
	if _, ok := n2.LookupIP("10.244.1.8"); ok || len(n2.Containers()) != 1 {
		t.Errorf("a malformed record is in the cache: %+v", n2.Containers())
	}
}

// Nodes are the hosts: InternalIP the fabric address, spec.podCIDR the
// subnet; a node without an InternalIP is none yet. PutHost checks the
// agent's own node instead of writing it.
func TestNodesAreHosts(t *testing.T) {
	client := fake.NewClientset()
	d := newDir(t, client, "n1", nil)
	mkNode := func(name, ip, cidr string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
		if ip != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
		}
		if _, err := client.CoreV1().Nodes().Create(ctxT(t), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkNode("n1", "10.99.0.2", "10.244.1.0/24")
	mkNode("n2", "10.99.0.3", "10.244.2.0/24")
	mkNode("n3", "", "10.244.3.0/24")
	want := []directory.Host{{Name: "n1", FabricIP: "10.99.0.2", Subnet: "10.244.1.0/24"}, {Name: "n2", FabricIP: "10.99.0.3", Subnet: "10.244.2.0/24"}}
	eventually(t, 5*time.Second, "both nodes with an InternalIP are hosts", func() bool {
		hs := d.Hosts()
		return len(hs) == 2 && hs[0] == want[0] && hs[1] == want[1]
	})
	if h, err := d.Node(ctxT(t), true); err != nil || h != want[0] {
		t.Errorf("Node = %+v, %v; want %+v", h, err, want[0])
	}
	if err := d.PutHost(ctxT(t), want[0]); err != nil {
		t.Errorf("PutHost of the node as it is: %v", err)
	}
	for h, says := range map[directory.Host]string{
		{Name: "n1", FabricIP: "10.99.0.9", Subnet: "10.244.1.0/24"}: "drop --fabric-ip",
		{Name: "n1", FabricIP: "10.99.0.2", Subnet: "10.244.9.0/24"}: "drop --subnet",
		{Name: "n2", FabricIP: "10.99.0.3", Subnet: "10.244.2.0/24"}: "not this agent's node",
	} {
		if err := d.PutHost(ctxT(t), h); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("PutHost %+v: %v; want an error saying %q", h, err, says)
		}
	}
	if err := client.CoreV1().Nodes().Delete(ctxT(t), "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a deleted node is no host", func() bool { return len(d.Hosts()) == 1 })
}

// Agents asking for the cluster key at once, all having found no Secret,
// all try to create it: one create wins, the others read the winner's
// key, and every agent gets the same key.
func TestClusterKeyCreatedOnceUnderRace(t *testing.T) {
	const agents = 6
	fc := fake.NewClientset()
	client := &racyClient{Clientset: fc, firstGets: agents}
	client.arrived.Add(agents)
	var creates atomic.Int32
	fc.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates.Add(1)
		return false, nil, nil
	})
	dirs := []*Directory{newDir(t, client, "n1", nil), newDir(t, client, "n2", nil)}
	key := testenv.AgreeOnKey(t, agents, func(i int) ([]byte, error) { return dirs[i%2].ClusterKey(ctxT(t)) })
	if n := creates.Load(); n != agents {
		t.Errorf("%d creates; want every agent (%d) to have raced to create", n, agents)
	}
	s, err := fc.CoreV1().Secrets(DefaultNamespace).Get(ctxT(t), ClusterKeySecret, metav1.GetOptions{})
	if err != nil || !bytes.Equal(s.Data[ClusterKeyField], key) {
		t.Fatalf("secret %s: %v, %v", ClusterKeySecret, s, err)
	}

	s.Data[ClusterKeyField] = []byte("short")
	if _, err := fc.CoreV1().Secrets(DefaultNamespace).Update(ctxT(t), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dirs[0].ClusterKey(ctxT(t)); err == nil || !strings.Contains(err.Error(), "delete it and restart") {
		t.Errorf("ClusterKey of a damaged secret: %v; want an error saying what to do", err)
	}
}

// Policy and settings come from the ConfigMap freeflow-config: absent
// means the defaults; its keys are read as they change; an unknown key is
// logged; an invalid policy is the agent's to refuse with a clear error,
// while the valid settings beside it still apply.
func TestPolicyAndSettingsFromConfigMap(t *testing.T) {
	client := fake.NewClientset()
	logs := &testenv.LogBuffer{}
	d := newDir(t, client, "n1", logs)
	eventually(t, 5*time.Second, "the ConfigMap listed", func() bool { _, err := d.Policy(ctxT(t)); return err == nil })
	if p, err := d.Policy(ctxT(t)); p != nil || err != nil {
		t.Errorf("Policy without a ConfigMap = %q, %v; want none (the default)", p, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: ConfigMapName}, Data: map[string]string{
		PolicyKey:    `{"trusted_tenant_pairs":[["a","b"]]}`,
		SettingsKey:  `{"no_shm":true}`,
		"polcy.json": "{}",
	}}
	cm, err := client.CoreV1().ConfigMaps(DefaultNamespace).Create(ctxT(t), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the policy read", func() bool { p, _ := d.Policy(ctxT(t)); return p != nil })
	p, _ := d.Policy(ctxT(t))
	if pol, err := policy.Parse(p); err != nil || len(pol.TrustedTenantPairs) != 1 {
		t.Errorf("policy %q parses to %+v, %v", p, pol, err)
	}
	s, _ := d.Settings(ctxT(t))
	if set, err := directory.ParseSettings(s); err != nil || !set.NoShm {
		t.Errorf("settings %q parse to %+v, %v", s, set, err)
	}
	eventually(t, 5*time.Second, "the unknown key logged", func() bool { return logs.Count(`"polcy.json"`, PolicyKey) > 0 })

	cm.Data[PolicyKey] = `{"trusted_tenant_pairs":[["a"]]}`
	if _, err := client.CoreV1().ConfigMaps(DefaultNamespace).Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the new policy read", func() bool { p, _ := d.Policy(ctxT(t)); return bytes.Contains(p, []byte(`["a"]`)) })
	p, _ = d.Policy(ctxT(t))
	if _, err := policy.Parse(p); err == nil || !strings.Contains(err.Error(), "not a pair") {
		t.Errorf("an invalid policy parsed: %v", err)
	}
	if s, _ := d.Settings(ctxT(t)); !bytes.Equal(s, []byte(`{"no_shm":true}`)) {
		t.Errorf("settings beside an invalid policy = %q", s)
	}
}

// DeleteContainer finds a record the cache has not seen (the kubelet has
// not reported the IP yet) through the API, and leaves a newer sandbox's
// record of the same pod alone.
func TestDeleteContainerUncachedAndNewer(t *testing.T) {
	client := fake.NewClientset()
	d := newDir(t, client, "n1", nil)
	makePod(t, client, "a", "p", "n1", "", nil)
	put(t, d, record("sb1", "a/p", "n1", "10.244.1.2"))
	if err := d.DeleteContainer(ctxT(t), "sb1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := annotation(t, client, "a", "p"); ok {
		t.Fatalf("uncached record not removed: %s", v)
	}
	put(t, d, record("sb2", "a/p", "n1", "10.244.1.2"))
	put(t, d, record("sb3", "a/p", "n1", "10.244.1.3")) // the pod's sandbox was recreated
	if err := d.DeleteContainer(ctxT(t), "sb2"); err != nil {
		t.Fatal(err)
	}
	if v, _ := annotation(t, client, "a", "p"); !strings.Contains(v, `"sb3"`) {
		t.Errorf("DeleteContainer of the old sandbox removed the new one's record: %q", v)
	}
}

// While a watch is down the directory says so, with the reason, and keeps
// answering from its cache; when the watch is back, it is connected again.
func TestHealthWhileWatchDown(t *testing.T) {
	client := fake.NewClientset()
	makePod(t, client, "a", "p", "n1", "10.244.1.2", nil)
	p, _ := client.CoreV1().Pods("a").Get(ctxT(t), "p", metav1.GetOptions{})
	p.Annotations = map[string]string{RecordAnnotation: `{"id":"sb1","host":"n1","ip":"10.244.1.2"}`}
	if _, err := client.CoreV1().Pods("a").Update(ctxT(t), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	var mu sync.Mutex
	var watchers []*watch.FakeWatcher
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused (test)")
		}
		w := watch.NewFake()
		mu.Lock()
		watchers = append(watchers, w)
		mu.Unlock()
		return true, w, nil
	})
	down.Store(true)
	d := startDir(t, client, "n1", nil)
	if h := d.Health(); h.Connected || h.LastError == "" {
		t.Errorf("Health before any watch = %+v; want not connected, with a reason", h)
	}
	eventually(t, 5*time.Second, "the failed pod watch reported", func() bool {
		return strings.Contains(d.Health().LastError, "connection refused (test)")
	})
	down.Store(false)
	waitConnected(t, d)
	eventually(t, 5*time.Second, "the pod listed", hasIP(d, "10.244.1.2"))

	down.Store(true)
	mu.Lock()
	for _, w := range watchers {
		w.Stop()
	}
	mu.Unlock()
	eventually(t, 5*time.Second, "the broken watch noticed", func() bool { return !d.Health().Connected })
	if h := d.Health(); !strings.Contains(h.LastError, "pods") {
		t.Errorf("Health = %+v; want the reason to name the pods watch", h)
	}
	if c, ok := d.LookupIP("10.244.1.2"); !ok || c.Name != "a/p" {
		t.Errorf("LookupIP while the watch is down = %+v, %v; want the cached record", c, ok)
	}
	down.Store(false)
	waitConnected(t, d)
}

// racyClient holds back the answers to the first firstGets reads of a
// Secret until all of them have been answered, so that every agent finds
// no key and races to create one. (The fake's reactors run under one
// lock, so the wait is here, outside it.)
type racyClient struct {
	*fake.Clientset
	firstGets int32
	gets      atomic.Int32
	arrived   sync.WaitGroup
}

func (c *racyClient) CoreV1() typedcorev1.CoreV1Interface {
	return racyCore{c.Clientset.CoreV1(), c}
}

type racyCore struct {
	typedcorev1.CoreV1Interface
	c *racyClient
}

func (r racyCore) Secrets(ns string) typedcorev1.SecretInterface {
	return racySecrets{r.CoreV1Interface.Secrets(ns), r.c}
}

type racySecrets struct {
	typedcorev1.SecretInterface
	c *racyClient
}

func (r racySecrets) Get(ctx context.Context, name string, o metav1.GetOptions) (*corev1.Secret, error) {
	s, err := r.SecretInterface.Get(ctx, name, o)
	if r.c.gets.Add(1) <= r.c.firstGets {
		r.c.arrived.Done()
		r.c.arrived.Wait()
	}
	return s, err
}

// TestSignedRecordCountsBeforeKubeletReportsIP: a record the agent of
// the pod's node wrote, signed with the cluster key, counts for every
// agent holding the key before the kubelet reports the pod's IP (a pod
// connects milliseconds after its sandbox is up, the kubelet reports a
// second later); copied to another pod, to a new pod of the same name,
// with a MAC of the author's own, or older than a minute (kept and written
// back), it does not, nor for an agent that has not read the key.
func TestSignedRecordCountsBeforeKubeletReportsIP(t *testing.T) {
	client := fake.NewClientset()
	n1, n2, keyless := newDir(t, client, "n1", nil), newDir(t, client, "n2", nil), newDir(t, client, "n3", nil)
	for _, d := range []*Directory{n1, n2} {
		if _, err := d.ClusterKey(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	withUID := func(name, uid string) *corev1.Pod {
		p, err := client.CoreV1().Pods("a").Create(ctxT(t), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: types.UID(uid)},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := func(c directory.Container) directory.Container { c.Created = time.Now().UTC(); return c }
	withUID("fresh", "uid-1")
	put(t, n1, now(record("sb1", "a/fresh", "n1", "10.244.1.2")))
	eventually(t, 5*time.Second, "a signed record to count before the pod's IP is reported", hasIP(n2, "10.244.1.2"))
	signed, err := client.CoreV1().Pods("a").Get(ctxT(t), "fresh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	copycat := withUID("copycat", "uid-2")
	copycat.Annotations = map[string]string{RecordAnnotation: strings.Replace(signed.Annotations[RecordAnnotation], "a/fresh", "a/copycat", 1),
		RecordMACAnnotation: signed.Annotations[RecordMACAnnotation]}
	copycat.Annotations[RecordAnnotation] = strings.Replace(copycat.Annotations[RecordAnnotation], "10.244.1.2", "10.244.1.3", 1)
	if _, err := client.CoreV1().Pods("a").Update(ctxT(t), copycat, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	own := withUID("own-mac", "uid-3")
	ownRecord := `{"id":"sb3","name":"a/own-mac","host":"n1","ip":"10.244.1.4","tenant":"a","freeflow":true}`
	own.Annotations = map[string]string{RecordAnnotation: ownRecord,
		RecordMACAnnotation: recordMAC(make([]byte, directory.ClusterKeySize), own.UID, "a/own-mac", ownRecord)}
	if _, err := client.CoreV1().Pods("a").Update(ctxT(t), own, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("a").Delete(ctxT(t), "fresh", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the deleted pod's record to go", lacksIP(n2, "10.244.1.2"))
	again := withUID("fresh", "uid-4")
	again.Annotations = signed.Annotations
	if _, err := client.CoreV1().Pods("a").Update(ctxT(t), again, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod put after the forgeries, to know n2 has seen them.
	// Signed by the agent, but made longer ago than the kubelet takes to
	// report an IP: a record kept and written back later.
	withUID("stale", "uid-6")
	put(t, n1, record("sb6", "a/stale", "n1", "10.244.1.6"))
	withUID("later", "uid-5")
	put(t, n1, now(record("sb5", "a/later", "n1", "10.244.1.5")))
	eventually(t, 5*time.Second, "the later signed record", hasIP(n2, "10.244.1.5"))
	for ip, what := range map[string]string{"10.244.1.3": "copied to another pod", "10.244.1.4": "signed with another key",
		"10.244.1.2": "copied to a new pod of the same name", "10.244.1.6": "made longer ago than the grace"} {
		if c, ok := n2.LookupIP(ip); ok {
			t.Errorf("a record %s counts: %+v", what, c)
		}
	}
	seen := n2.cache.podEvents()
	eventually(t, 5*time.Second, "the keyless agent to see as many pod events", func() bool { return keyless.cache.podEvents() >= seen })
	if _, ok := keyless.LookupIP("10.244.1.5"); ok {
		t.Error("an agent without the cluster key counted a record before the pod's IP was reported")
	}
}
