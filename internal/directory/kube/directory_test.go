package kube

import (
	"context"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// These tests run the directory against client-go's fake clientset (an
// in-memory API with watches); kubeapi_test.go runs the same directory
// against a real kube-apiserver.

// newDir starts a directory for node on client until the test ends, and
// waits for its watches: the fake clientset's watch starts from now, not
// from the list's resourceVersion, so a change made between the two would
// be missed (a real API server replays it).
func newDir(t *testing.T, client kubernetes.Interface, node string, logs *testenv.LogBuffer, mod ...func(*Config)) *Directory {
	t.Helper()
	d := startDir(t, client, node, logs, mod...)
	waitConnected(t, d)
	return d
}

// startDir starts a directory for node on client until the test ends.
func startDir(t *testing.T, client kubernetes.Interface, node string, logs *testenv.LogBuffer, mod ...func(*Config)) *Directory {
	t.Helper()
	cfg := Config{Client: client.CoreV1(), Node: node, Logf: t.Logf}
	if logs != nil {
		cfg.Logf = logs.Logf
	}
	for _, m := range mod {
		m(&cfg)
	}
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// eventually waits for cond, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// makePod creates a pod scheduled on node whose status, as its kubelet
// would report, has ip ("" = not yet reported).
func makePod(t *testing.T, client kubernetes.Interface, ns, name, node, ip string, labels map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}
	p, err := client.CoreV1().Pods(ns).Create(ctxT(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip != "" {
		p = setPodIP(t, client, p, ip)
	}
	return p
}

func setPodIP(t *testing.T, client kubernetes.Interface, p *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	p, err := client.CoreV1().Pods(p.Namespace).UpdateStatus(ctxT(t), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// record is what the CNI plugin registers for the pod ns/name.
func record(id, podName, node, ip string) directory.Container {
	return directory.Container{ID: id, Name: podName, Host: node, IP: ip, Tenant: "default",
		NetNS: "/var/run/netns/cni-" + id, FreeFlow: true, Created: time.Unix(1700000000, 0).UTC()}
}

func put(t *testing.T, d *Directory, c directory.Container) directory.Container {
	t.Helper()
	stored, err := d.PutContainer(ctxT(t), c)
	if err != nil {
		t.Fatalf("PutContainer %s: %v", c.Name, err)
	}
	return stored
}

func hasIP(d *Directory, ip string) func() bool {
	return func() bool { _, ok := d.LookupIP(ip); return ok }
}

func lacksIP(d *Directory, ip string) func() bool {
	return func() bool { _, ok := d.LookupIP(ip); return !ok }
}

func annotation(t *testing.T, client kubernetes.Interface, ns, name string) (string, bool) {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := p.Annotations[RecordAnnotation]
	return v, ok
}

func waitConnected(t *testing.T, d *Directory) {
	t.Helper()
	eventually(t, 10*time.Second, "directory connected", func() bool { return d.Health().Connected })
}
