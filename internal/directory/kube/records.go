package kube

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podRecord returns the container record pod carries. ok is false, with no
// error, for a pod that is not (or not yet, or no longer) a FreeFlow
// container: no annotation, a finished pod, or a kubelet that has not yet
// reported the pod's IP. An annotation that cannot be a record of this pod
// is an error, and the pod is no container either.
//
// Only the fields the agent of the pod's node knows are taken from the
// annotation (id, IP, network namespace, library, shm); everything the API
// says with authority comes from the pod itself, so a pod's author who
// writes the annotation cannot claim another tenant, name, node or IP:
// the name is namespace/name, the tenant the label freeflow.io/tenant or
// the namespace, the host must be spec.nodeName and the IP one of the
// status's pod IPs, which only the kubelet writes. Until the kubelet has
// reported them, the record counts only if the agent of the pod's node
// signed it for this pod with the cluster key (recordSigned): a pod's
// first connections, made a few milliseconds after its sandbox is up,
// must not wait a second for the kubelet's status report.
func podRecord(p *corev1.Pod, key []byte) (c directory.Container, ok bool, err error) {
	raw, has := p.Annotations[RecordAnnotation]
	if !has || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return c, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return c, false, fmt.Errorf("annotation %s is not a JSON container record: %w", RecordAnnotation, err)
	}
	c.Name, c.Tenant = p.Namespace+"/"+p.Name, tenantOf(p)
	ip, perr := netip.ParseAddr(c.IP)
	switch {
	case c.ID == "":
		return c, false, fmt.Errorf("annotation %s has no container id", RecordAnnotation)
	case perr != nil:
		return c, false, fmt.Errorf("annotation %s: ip %q is not an IP address", RecordAnnotation, c.IP)
	case c.Host != p.Spec.NodeName:
		return c, false, fmt.Errorf("annotation %s names host %q, but the pod is on node %q", RecordAnnotation, c.Host, p.Spec.NodeName)
	case len(p.Status.PodIPs) == 0 && p.Status.PodIP == "":
		if !recordSigned(p, raw, key) || time.Since(c.Created) > signedGrace {
			return c, false, nil // the kubelet has not reported the IP yet
		}
	case !podHasIP(p, ip.Unmap()):
		return c, false, fmt.Errorf("annotation %s names IP %s, but the pod's status has %s", RecordAnnotation, c.IP, podIPs(p))
	}
	c.IP = ip.Unmap().String()
	return c, true, nil
}

// signedGrace is how long after its creation a signed record counts
// without the kubelet's report of the pod's IP (which comes within
// seconds): the record's creation time is in the MAC, so an old record
// and MAC its pod's author kept and writes back while the pod has no IP
// (a sandbox made again) do not count.
const signedGrace = time.Minute

// recordMAC is the MAC of record, the text of pod's record annotation,
// under the cluster key: it binds the record to the pod object it was
// written for (the UID the API server gave it), so it cannot be copied to
// another pod, nor to a new pod of the same name.
func recordMAC(key []byte, uid types.UID, pod, record string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "freeflow.io/record v1\x00%s\x00%s\x00", uid, pod)
	m.Write([]byte(record))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// recordSigned reports whether record, p's record annotation, carries the
// MAC an agent wrote for it (never so while the key is unknown).
func recordSigned(p *corev1.Pod, record string, key []byte) bool {
	got := p.Annotations[RecordMACAnnotation]
	return key != nil && got != "" && hmac.Equal([]byte(got), []byte(recordMAC(key, p.UID, p.Namespace+"/"+p.Name, record)))
}

// tenantOf is the pod's tenant: its freeflow.io/tenant label, else its
// namespace.
func tenantOf(p *corev1.Pod) string {
	if t := p.Labels[TenantLabel]; t != "" {
		return t
	}
	return p.Namespace
}

func podIPs(p *corev1.Pod) []string {
	ips := []string{p.Status.PodIP}
	for _, x := range p.Status.PodIPs {
		ips = append(ips, x.IP)
	}
	return slices.Compact(slices.DeleteFunc(ips, func(s string) bool { return s == "" }))
}

func podHasIP(p *corev1.Pod, ip netip.Addr) bool {
	return slices.ContainsFunc(podIPs(p), func(s string) bool {
		a, err := netip.ParseAddr(s)
		return err == nil && a.Unmap() == ip
	})
}

// recordID returns the container id in a pod's record annotation, "" if
// there is none or it cannot be read.
func recordID(p *corev1.Pod) string {
	var c struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(p.Annotations[RecordAnnotation]), &c) != nil {
		return ""
	}
	return c.ID
}

// splitPodName splits a container name of the form namespace/name.
func splitPodName(name string) (ns, pod string, err error) {
	ns, pod, ok := strings.Cut(name, "/")
	if !ok || ns == "" || pod == "" || strings.Contains(pod, "/") {
		return "", "", fmt.Errorf("directory: container name %q is not namespace/name; on Kubernetes every container is a pod, "+
			"which the CNI plugin names from K8S_POD_NAMESPACE and K8S_POD_NAME", name)
	}
	return ns, pod, nil
}

// nodeHost returns the Host record of a Node: ok is false while the node
// has no InternalIP (no fabric address to reach its agent at). The subnet
// is spec.podCIDR, empty while none is assigned.
func nodeHost(n *corev1.Node) (directory.Host, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return directory.Host{Name: n.Name, FabricIP: a.Address, Subnet: n.Spec.PodCIDR}, true
		}
	}
	return directory.Host{}, false
}

// slimPod keeps only what podRecord reads, so that an agent caching every
// pod of a large cluster holds a few hundred bytes per pod, not the spec.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
	if t, ok := p.Labels[TenantLabel]; ok {
		slim.Labels = map[string]string{TenantLabel: t}
	}
	if r, ok := p.Annotations[RecordAnnotation]; ok {
		slim.Annotations = map[string]string{RecordAnnotation: r}
		if m, ok := p.Annotations[RecordMACAnnotation]; ok {
			slim.Annotations[RecordMACAnnotation] = m
		}
	}
	return slim, nil
}

// sawPod applies an added or changed pod to the cache.
func (d *Directory) sawPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	d.health.saw(p.ResourceVersion)
	defer d.cache.seen.Add(1)
	key := p.Namespace + "/" + p.Name
	c, ok, err := podRecord(p, d.clusterKey())
	if err != nil {
		if d.cache.noteBad(key, p.ResourceVersion) {
			d.cfg.Logf("directory: skipping pod %s (resourceVersion %s): %v; the agent of node %q rewrites it when the pod's sandbox is set up again, "+
				"or remove the annotation", key, p.ResourceVersion, err, p.Spec.NodeName)
		}
	}
	if ok {
		d.cache.putPod(key, c)
	} else {
		d.cache.removePod(key)
	}
}

func (d *Directory) lostPod(obj any) {
	if p, ok := unwrap[*corev1.Pod](obj); ok {
		d.cache.deletedPod(p.Namespace + "/" + p.Name)
	}
}

func (d *Directory) sawNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	d.health.saw(n.ResourceVersion)
	if h, ok := nodeHost(n); ok {
		d.cache.putHost(h)
	} else {
		d.cache.removeHost(n.Name)
	}
}

func (d *Directory) lostNode(obj any) {
	if n, ok := unwrap[*corev1.Node](obj); ok {
		d.cache.removeHost(n.Name)
	}
}

// unwrap returns the object of a delete event, which is a tombstone when
// the informer missed the deletion itself and learnt of it by re-listing.
func unwrap[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	v, ok := obj.(T)
	return v, ok
}
