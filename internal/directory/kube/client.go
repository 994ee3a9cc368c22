package kube

import (
	"fmt"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient returns a client of the API server that kubeconfig names, or,
// when kubeconfig is "", of the cluster the agent runs in as a pod (its
// service account's token and the KUBERNETES_SERVICE_* variables).
func NewClient(kubeconfig string) (corev1client.CoreV1Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("directory: no --kubeconfig given and not running in a pod: %w; pass --kubeconfig", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("directory: read kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "freeflowd"
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("directory: Kubernetes client for %s: %w", cfg.Host, err)
	}
	return c, nil
}
