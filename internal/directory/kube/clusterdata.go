package kube

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterKey returns the key the agents authenticate their fast-path
// offers with, from the Secret freeflow-cluster-key. The first agent to
// find none creates it; an agent whose create loses the race (AlreadyExists)
// reads the winner's, so concurrent first users agree.
func (d *Directory) ClusterKey(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	secrets := d.cfg.Client.Secrets(d.cfg.Namespace)
	what := d.cfg.Namespace + "/" + ClusterKeySecret
	s, err := secrets.Get(ctx, ClusterKeySecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fresh := make([]byte, directory.ClusterKeySize)
		if _, err := rand.Read(fresh); err != nil {
			return nil, fmt.Errorf("directory: generate cluster key: %w", err)
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterKeySecret, Namespace: d.cfg.Namespace},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{ClusterKeyField: fresh},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, ClusterKeySecret, metav1.GetOptions{})
		}
		if err != nil {
			return nil, d.apiError("create cluster key secret "+what, "get and create secrets in "+d.cfg.Namespace, err)
		}
	} else if err != nil {
		return nil, d.apiError("read cluster key secret "+what, "get secrets in "+d.cfg.Namespace, err)
	}
	if k := s.Data[ClusterKeyField]; len(k) == directory.ClusterKeySize {
		d.key.Store(&k)
		return k, nil
	}
	return nil, fmt.Errorf("directory: secret %s has no %d-byte %q; delete it and restart the agents to make a new one",
		what, directory.ClusterKeySize, ClusterKeyField)
}

// Policy returns the fast-path policy document, the ConfigMap's
// policy.json, or nil when there is none (the default policy applies).
func (d *Directory) Policy(context.Context) ([]byte, error) { return d.document(PolicyKey) }

// Settings returns the cluster settings document, the ConfigMap's
// settings.json, or nil when there is none (the defaults apply).
func (d *Directory) Settings(context.Context) ([]byte, error) { return d.document(SettingsKey) }

// document returns a key of FreeFlow's ConfigMap from the informer's
// cache, nil if the ConfigMap or the key is absent. Until the ConfigMap
// has been listed once there is no answer: the agent keeps its defaults
// and asks again.
func (d *Directory) document(key string) ([]byte, error) {
	if !d.config.HasSynced() {
		return nil, fmt.Errorf("directory: ConfigMap %s/%s not yet read from the Kubernetes API server", d.cfg.Namespace, ConfigMapName)
	}
	obj, ok, err := d.config.GetStore().GetByKey(d.cfg.Namespace + "/" + ConfigMapName)
	if err != nil || !ok {
		return nil, err
	}
	cm, _ := obj.(*corev1.ConfigMap)
	if v, ok := cm.Data[key]; ok {
		return []byte(v), nil
	}
	return nil, nil
}

// configKeys are the keys FreeFlow's ConfigMap may hold.
var configKeys = []string{PolicyKey, SettingsKey}

// sawConfig logs the keys of FreeFlow's ConfigMap it does not know, so a
// misspelt key is reported rather than silently leaving the default.
func (d *Directory) sawConfig(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != ConfigMapName {
		return
	}
	d.health.saw(cm.ResourceVersion)
	for k := range cm.Data {
		if !slices.Contains(configKeys, k) {
			d.cfg.Logf("directory: ConfigMap %s/%s: ignoring key %q; FreeFlow reads %v", cm.Namespace, cm.Name, k, configKeys)
		}
	}
	for k := range cm.BinaryData {
		d.cfg.Logf("directory: ConfigMap %s/%s: ignoring binaryData key %q; put %v under data, as JSON text", cm.Namespace, cm.Name, k, configKeys)
	}
}

// nodeWaitLog is how often Node repeats that it is still waiting.
const nodeWaitLog = 30 * time.Second

// Node waits until this agent's Node has an InternalIP, and a pod CIDR
// too if needSubnet, and returns them as its Host; freeflowd takes its
// fabric IP and subnet from it when they are not given. It gives up when
// ctx ends.
func (d *Directory) Node(ctx context.Context, needSubnet bool) (directory.Host, error) {
	var logged time.Time
	for {
		h, err := d.node(ctx, needSubnet)
		if err == nil {
			return h, nil
		}
		if time.Since(logged) > nodeWaitLog {
			d.cfg.Logf("%v; waiting", err)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return directory.Host{}, errors.Join(err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func (d *Directory) node(ctx context.Context, needSubnet bool) (directory.Host, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	n, err := d.cfg.Client.Nodes().Get(ctx, d.cfg.Node, metav1.GetOptions{})
	if err != nil {
		return directory.Host{}, d.apiError("read node "+d.cfg.Node, "get nodes", err)
	}
	h, ok := nodeHost(n)
	if !ok {
		return h, fmt.Errorf("directory: node %s has no InternalIP yet (its kubelet reports it; or pass --fabric-ip)", d.cfg.Node)
	}
	if needSubnet && h.Subnet == "" {
		return h, fmt.Errorf("directory: node %s has no spec.podCIDR yet "+
			"(the controller manager assigns it with --allocate-node-cidrs; or pass --subnet)", d.cfg.Node)
	}
	return h, nil
}
