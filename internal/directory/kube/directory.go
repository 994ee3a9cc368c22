// Package kube is the cluster directory kept in the Kubernetes API, the
// datastore of `freeflowd --datastore kubernetes` (internal/directory/etcd
// is the other one, and the CLI cluster's).
//
// Where each record lives (docs/KUBERNETES-DATASTORE.md says why):
//
//	container  the annotation freeflow.io/record on its pod: the JSON of
//	           directory.Container, written by the agent of the pod's node
//	           on REGISTER and removed on UNREGISTER (or gone with the pod)
//	host       the Node: its InternalIP is the fabric address, spec.podCIDR
//	           the container subnet (written by the kubelet and the
//	           controller manager, never by FreeFlow)
//	key        the Secret freeflow-cluster-key in FreeFlow's namespace
//	policy     the ConfigMap freeflow-config in FreeFlow's namespace, keys
//	settings   policy.json and settings.json
//
// Every agent watches every Pod and Node (and that ConfigMap) through
// client-go informers and answers reads from what they pushed to it, never
// from the API: a stale answer beats none, as with etcd, and Health says
// whether the watches are live.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Names of FreeFlow's objects and fields in the Kubernetes API.
const (
	RecordAnnotation = "freeflow.io/record" // on a pod: its directory.Container, JSON
	// RecordMACAnnotation on a pod: the record's MAC under the cluster key
	// (recordMAC), which lets it count before the kubelet reports the IP.
	RecordMACAnnotation = "freeflow.io/record-mac"
	TenantLabel         = "freeflow.io/tenant" // on a pod: its tenant (default: its namespace)
	DefaultNamespace    = "freeflow-system"    // where FreeFlow's own objects live
	ClusterKeySecret    = "freeflow-cluster-key"
	ClusterKeyField     = "key" // the Secret's data key holding the 32 key bytes
	ConfigMapName       = "freeflow-config"
	PolicyKey           = "policy.json"   // the ConfigMap key of the fast-path policy (internal/policy)
	SettingsKey         = "settings.json" // the ConfigMap key of the cluster settings (directory.Settings)
)

// Defaults for the Config fields left zero.
const (
	// DefaultResync is how often the informers hand the agent every cached
	// object again, which re-checks the records; changes arrive through the
	// watch at once regardless.
	DefaultResync  = 10 * time.Minute
	defaultRequest = 5 * time.Second
)

// Config says which API server to use and for which node.
type Config struct {
	Client         corev1client.CoreV1Interface // core/v1 is all the agent uses; the full clientset would add 12 MB to freeflowd
	Node           string                       // the Node this agent serves (the DaemonSet's spec.nodeName)
	Namespace      string                       // FreeFlow's own namespace; default DefaultNamespace
	Resync         time.Duration                // informer resync; default DefaultResync
	RequestTimeout time.Duration                // bound on each write and read of the API; default 5 s

	// Logf receives state changes and skipped records; default log.Printf.
	Logf func(format string, args ...any)
}

// Directory is a cluster's container directory on the Kubernetes API:
// writes patch pods, reads come from the informers' pushes.
type Directory struct {
	cfg    Config
	cache  *view
	health *health
	config cache.SharedIndexInformer // FreeFlow's ConfigMap
	nodes  cache.SharedIndexInformer
	key    atomic.Pointer[[]byte] // the cluster key, once read (ClusterKey)

	cancel    context.CancelFunc
	done      sync.WaitGroup
	closeOnce sync.Once
}

// New returns a Directory for cfg.Node and starts its informers. It does
// not wait for the API server: the cache fills as soon as it answers, and
// Health tells whether it has. ctx only carries values: the Directory runs
// until Close.
func New(ctx context.Context, cfg Config) (*Directory, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d := &Directory{cfg: cfg, cache: newView(), health: newHealth(cfg.Logf), cancel: cancel}
	pods := d.informer("pods", &corev1.Pod{}, d.podsLW(), cache.ResourceEventHandlerFuncs{
		AddFunc: d.sawPod, UpdateFunc: func(_, p any) { d.sawPod(p) }, DeleteFunc: d.lostPod,
	})
	if err := pods.SetTransform(slimPod); err != nil {
		cancel()
		return nil, fmt.Errorf("directory: pod informer: %w", err)
	}
	d.nodes = d.informer("nodes", &corev1.Node{}, d.nodesLW(), cache.ResourceEventHandlerFuncs{
		AddFunc: d.sawNode, UpdateFunc: func(_, n any) { d.sawNode(n) }, DeleteFunc: d.lostNode,
	})
	d.config = d.informer("configmap", &corev1.ConfigMap{}, d.configLW(), cache.ResourceEventHandlerFuncs{
		AddFunc: d.sawConfig, UpdateFunc: func(_, c any) { d.sawConfig(c) },
	})
	for _, inf := range []cache.SharedIndexInformer{pods, d.nodes, d.config} {
		d.done.Add(1)
		go func() {
			defer d.done.Done()
			inf.RunWithContext(runCtx)
		}()
	}
	return d, nil
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.Client == nil {
		return cfg, errors.New("directory: no Kubernetes client given")
	}
	if cfg.Node == "" {
		return cfg, errors.New("directory: no node name given; pass --node or set NODE_NAME (a DaemonSet sets it from spec.nodeName)")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequest
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	return cfg, nil
}

// informer returns an informer of what through lw that reports its watch's
// state to Health and its events to h.
func (d *Directory) informer(what string, obj runtime.Object, lw *cache.ListWatch, h cache.ResourceEventHandler) cache.SharedIndexInformer {
	d.health.expect(what)
	inf := cache.NewSharedIndexInformerWithOptions(d.observed(what, lw), obj,
		cache.SharedIndexInformerOptions{ResyncPeriod: d.cfg.Resync, ObjectDescription: what})
	// Errors only before Run; none here.
	_, _ = inf.AddEventHandlerWithResyncPeriod(h, d.cfg.Resync)
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) { // an expired watch is re-listed, not an outage
			d.health.failed(what, err)
		}
	})
	return inf
}

// observed wraps lw so that a failed list or watch marks what down, and an
// established watch marks it live.
func (d *Directory) observed(what string, lw *cache.ListWatch) *cache.ListWatch {
	list, watchFn := lw.ListWithContextFunc, lw.WatchFuncWithContext
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, o)
			if err != nil {
				d.health.failed(what, err)
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			if err != nil {
				d.health.failed(what, err)
			} else {
				d.health.watching(what)
			}
			return w, err
		},
	}
}

func (d *Directory) podsLW() *cache.ListWatch {
	pods := d.cfg.Client.Pods(metav1.NamespaceAll)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: pods.Watch,
	}
}

func (d *Directory) nodesLW() *cache.ListWatch {
	nodes := d.cfg.Client.Nodes()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: nodes.Watch,
	}
}

// configLW watches only FreeFlow's ConfigMap, so the agent may be granted
// that one object (resourceNames) and nothing else of the namespace.
func (d *Directory) configLW() *cache.ListWatch {
	cms := d.cfg.Client.ConfigMaps(d.cfg.Namespace)
	only := fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = only
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = only
			return cms.Watch(ctx, o)
		},
	}
}

// Health reports whether the watches are live and, if not, why.
func (d *Directory) Health() directory.Health { return d.health.get() }

// Close stops the informers. The cache stays readable.
func (d *Directory) Close() error {
	d.closeOnce.Do(func() {
		d.cancel()
		d.done.Wait()
	})
	return nil
}
