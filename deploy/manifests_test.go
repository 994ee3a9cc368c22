package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/freeflow-net/freeflow/internal/directory/kube"
	"github.com/freeflow-net/freeflow/internal/runtimewrap"
)

// objects are the manifests' documents, decoded by kind.
type objects struct {
	all        []any
	daemonSet  *appsv1.DaemonSet
	clusterRol *rbacv1.ClusterRole
	role       *rbacv1.ClusterRole // the Role in freeflow-system, decoded as its twin
	runtime    *nodev1.RuntimeClass
}

// load decodes every document of every manifest strictly: an unknown or
// misspelt field, or a kind this test does not know, fails.
func load(t *testing.T) objects {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	var o objects
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, err := decode([]byte(doc))
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			o.add(obj)
		}
	}
	return o
}

func decode(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "rbac.authorization.k8s.io/v1 ClusterRole", "rbac.authorization.k8s.io/v1 Role":
		obj = &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding", "rbac.authorization.k8s.io/v1 RoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "node.k8s.io/v1 RuntimeClass":
		obj = &nodev1.RuntimeClass{}
	default:
		return nil, fmt.Errorf("unexpected kind %q of %q", tm.Kind, tm.APIVersion)
	}
	return obj, yaml.UnmarshalStrict(doc, obj)
}

func (o *objects) add(obj any) {
	o.all = append(o.all, obj)
	switch v := obj.(type) {
	case *appsv1.DaemonSet:
		o.daemonSet = v
	case *rbacv1.ClusterRole:
		if v.Kind == "ClusterRole" {
			o.clusterRol = v
		} else {
			o.role = v
		}
	case *nodev1.RuntimeClass:
		o.runtime = v
	}
}

// TestManifestsDecode: every document is a Kubernetes object with no
// unknown field, and the DaemonSet is what a node needs: the host's
// network and pids, no privileged mode, exactly the capabilities the agent
// uses, the installer first, the image `make image` builds, every node.
func TestManifestsDecode(t *testing.T) {
	o := load(t)
	ds := o.daemonSet
	if ds == nil || o.runtime == nil || o.clusterRol == nil {
		t.Fatalf("missing DaemonSet, RuntimeClass or ClusterRole among %d objects", len(o.all))
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || !pod.HostPID {
		t.Error("the agent needs hostNetwork and hostPID")
	}
	if len(pod.InitContainers) != 1 || !slices.Equal(pod.InitContainers[0].Command, []string{"/freeflow/freeflowd", "install"}) {
		t.Errorf("init containers %+v, want one running freeflowd install", pod.InitContainers)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the agent alone", len(pod.Containers))
	}
	agent := pod.Containers[0]
	sc := agent.SecurityContext
	if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"}) {
		t.Errorf("agent security context %+v: want unprivileged, ALL dropped, NET_ADMIN SYS_ADMIN SYS_PTRACE added", sc)
	}
	image := makeImage(t)
	for _, c := range append(slices.Clone(pod.InitContainers), agent) {
		if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s: image %s (%s), want %s IfNotPresent (make image)", c.Name, c.Image, c.ImagePullPolicy, image)
		}
		if !nodeNameFromAPI(c.Env) {
			t.Errorf("container %s: NODE_NAME is not spec.nodeName", c.Name)
		}
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v: want one tolerating every taint", pod.Tolerations)
	}
	if v := ds.Spec.Template.Annotations[runtimewrap.OptOutAnnotation]; v != "off" {
		t.Errorf("agent pod annotation %s = %q, want off", runtimewrap.OptOutAnnotation, v)
	}
	if o.runtime.Handler != "freeflow" {
		t.Errorf("RuntimeClass handler %q, want freeflow (the handler the installer adds to containerd's configuration)", o.runtime.Handler)
	}
}

func nodeNameFromAPI(env []corev1.EnvVar) bool {
	for _, e := range env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			return true
		}
	}
	return false
}

// makeImage is the image the Makefile's `make image` tags.
func makeImage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no IMAGE ?= ...")
	}
	return string(bytes.TrimSpace(m[1]))
}

// TestManifestsGrantTheAgentsRules: the ClusterRole and the Role grant
// exactly what the Kubernetes directory says the agent needs
// (kube.AgentRules, which its tests on a real kube-apiserver run with), no
// more, so a rule added to one is added to the other.
func TestManifestsGrantTheAgentsRules(t *testing.T) {
	o := load(t)
	cluster, namespaced := kube.AgentRules()
	if o.clusterRol == nil || o.role == nil {
		t.Fatal("missing the ClusterRole or the Role")
	}
	if !reflect.DeepEqual(o.clusterRol.Rules, cluster) {
		t.Errorf("ClusterRole rules %+v, want the agent's %+v", o.clusterRol.Rules, cluster)
	}
	if !reflect.DeepEqual(o.role.Rules, namespaced) {
		t.Errorf("Role rules %+v, want the agent's %+v", o.role.Rules, namespaced)
	}
}
