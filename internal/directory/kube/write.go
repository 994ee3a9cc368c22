package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/freeflow-net/freeflow/internal/directory"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

// Writes go straight to the API server, bounded by Config.RequestTimeout;
// the cache learns of them through the watch like every other agent's.

// removeAttempts bounds DeleteContainer's retries when the annotation
// changes between its read and its removal.
const removeAttempts = 3

// PutContainer writes c as the record annotation of the pod c.Name
// (namespace/name), with its MAC under the cluster key, and returns the
// record as every agent will read it: the tenant is the pod's (label
// freeflow.io/tenant, else its namespace). The record counts at once for
// every agent that holds the key, and for all once the kubelet has put
// c.IP in the pod's status.
func (d *Directory) PutContainer(ctx context.Context, c directory.Container) (directory.Container, error) {
	ns, name, err := splitPodName(c.Name)
	if err != nil {
		return c, err
	}
	doc, err := json.Marshal(c)
	if err != nil {
		return c, fmt.Errorf("directory: encode the record of pod %s: %w", c.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	pods := d.cfg.Client.Pods(ns)
	annotations := map[string]any{RecordAnnotation: string(doc), RecordMACAnnotation: nil}
	if key := d.clusterKey(); key != nil {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return c, d.apiError("read pod "+c.Name, "get pods", err)
		}
		annotations[RecordMACAnnotation] = recordMAC(key, p.UID, c.Name, string(doc))
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return c, fmt.Errorf("directory: encode the patch of pod %s: %w", c.Name, err)
	}
	pod, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return c, d.apiError("annotate pod "+c.Name, "patch pods", err)
	}
	c.Tenant = tenantOf(pod)
	return c, nil
}

// DeleteContainer removes the record of container id from its pod; a
// record that is gone already, or whose pod is, is no error. The removal
// is conditional on the annotation still holding this container: a newer
// sandbox of the same pod registered meanwhile keeps its record.
func (d *Directory) DeleteContainer(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	pod, ok := d.cache.podOf(id)
	if !ok {
		var err error
		if pod, ok, err = d.findPod(ctx, id); err != nil || !ok {
			return err
		}
	}
	ns, name, _ := strings.Cut(pod, "/")
	pods := d.cfg.Client.Pods(ns)
	for range removeAttempts {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return d.apiError("read pod "+pod, "get pods", err)
		}
		if recordID(p) != id {
			return nil
		}
		_, err = pods.Patch(ctx, name, types.JSONPatchType, removeRecordPatch(p), metav1.PatchOptions{})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsInvalid(err) && !apierrors.IsConflict(err): // the test op failed: read again
			return d.apiError("remove the record of container "+id+" from pod "+pod, "patch pods", err)
		}
	}
	return fmt.Errorf("directory: the record of pod %s kept changing while container %s was being removed; try again", pod, id)
}

// removeRecordPatch is a JSON patch that removes p's record annotation,
// and its MAC, if the record still reads as in p.
func removeRecordPatch(p *corev1.Pod) []byte {
	path := func(a string) string { return "/metadata/annotations/" + strings.ReplaceAll(a, "/", "~1") }
	ops := []map[string]string{
		{"op": "test", "path": path(RecordAnnotation), "value": p.Annotations[RecordAnnotation]},
		{"op": "remove", "path": path(RecordAnnotation)},
	}
	if _, ok := p.Annotations[RecordMACAnnotation]; ok {
		ops = append(ops, map[string]string{"op": "remove", "path": path(RecordMACAnnotation)})
	}
	patch, _ := json.Marshal(ops)
	return patch
}

// clusterKey is the cluster key once ClusterKey has read it (the agent
// does at start), else nil.
func (d *Directory) clusterKey() []byte {
	if k := d.key.Load(); k != nil {
		return *k
	}
	return nil
}

// findPod looks for the pod of this node whose record has container id in
// the API, for a record the cache has not seen yet (registered a moment
// ago, or before the first list completed).
func (d *Directory) findPod(ctx context.Context, id string) (string, bool, error) {
	list, err := d.cfg.Client.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", d.cfg.Node).String(),
	})
	if err != nil {
		return "", false, d.apiError("list the pods of node "+d.cfg.Node, "list pods", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == d.cfg.Node && recordID(p) == id {
			return p.Namespace + "/" + p.Name, true, nil
		}
	}
	return "", false, nil
}

// PutHost checks that h, this agent's host, is what its Node says: the
// kubelet registers the Node and the controller manager assigns its pod
// CIDR, so there is nothing to write, but an agent configured with another
// address or subnet than the Node's would serve containers no other agent
// can place.
func (d *Directory) PutHost(ctx context.Context, h directory.Host) error {
	if h.Name != d.cfg.Node {
		return fmt.Errorf("directory: host %q is not this agent's node %q", h.Name, d.cfg.Node)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	n, err := d.cfg.Client.Nodes().Get(ctx, h.Name, metav1.GetOptions{})
	if err != nil {
		return d.apiError("read node "+h.Name, "get nodes", err)
	}
	return checkNode(n, h)
}

func checkNode(n *corev1.Node, h directory.Host) error {
	got, ok := nodeHost(n)
	switch {
	case !ok:
		return fmt.Errorf("directory: node %s has no InternalIP yet; its kubelet reports it", n.Name)
	case got.FabricIP != h.FabricIP:
		return fmt.Errorf("directory: node %s's InternalIP is %s, but the agent serves fabric IP %s; drop --fabric-ip to take the node's", n.Name, got.FabricIP, h.FabricIP)
	case got.Subnet != "" && got.Subnet != h.Subnet:
		return fmt.Errorf("directory: node %s's podCIDR is %s, but the agent serves subnet %s; drop --subnet to take the node's", n.Name, got.Subnet, h.Subnet)
	}
	return nil
}

// apiError wraps a failed API call with what was being done and what the
// agent needs to be allowed (verb resource) for it.
func (d *Directory) apiError(what, needs string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("directory: %s: %w; the agent's service account needs %q (see deploy/ RBAC)", what, err, needs)
	}
	return fmt.Errorf("directory: %s (gave up after %v; check that the Kubernetes API server is reachable): %w", what, d.cfg.RequestTimeout, err)
}
