package nodeinstall

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// apiServer is how a pod reaches the Kubernetes API: the address the
// kubelet puts in its environment, the service account's token and CA.
// Only the installer's one read needs it; a client library would make the
// static binary several times larger for one GET.
type apiServer struct {
	Host, Port string
	SecretsDir string // the service account's token and ca.crt
}

func inCluster() apiServer {
	return apiServer{Host: os.Getenv("KUBERNETES_SERVICE_HOST"), Port: os.Getenv("KUBERNETES_SERVICE_PORT"),
		SecretsDir: "/var/run/secrets/kubernetes.io/serviceaccount"}
}

// nodePodCIDR returns node's pod CIDR (its first IPv4 one) as the API
// server has it (assigned by the controller manager, or set when the node
// was registered).
func nodePodCIDR(ctx context.Context, api apiServer, node string) (string, error) {
	var n struct {
		Spec struct {
			PodCIDR  string   `json:"podCIDR"`
			PodCIDRs []string `json:"podCIDRs"`
		} `json:"spec"`
	}
	if err := api.get(ctx, "/api/v1/nodes/"+url.PathEscape(node), &n); err != nil {
		return "", fmt.Errorf("read node %s's pod CIDR (or pass --pod-cidr): %w", node, err)
	}
	for _, c := range append(n.Spec.PodCIDRs, n.Spec.PodCIDR) {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
			return c, nil
		}
	}
	return "", fmt.Errorf("node %s has no IPv4 pod CIDR yet (spec.podCIDR); the controller manager assigns one with --allocate-node-cidrs, or pass --pod-cidr", node)
}

func (a apiServer) get(ctx context.Context, path string, v any) error {
	if a.Host == "" || a.Port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod")
	}
	token, err := os.ReadFile(filepath.Join(a.SecretsDir, "token"))
	if err != nil {
		return fmt.Errorf("read the service account token: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(a.SecretsDir, "ca.crt"))
	if err != nil {
		return fmt.Errorf("read the cluster's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s", filepath.Join(a.SecretsDir, "ca.crt"))
	}
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(a.Host, a.Port)+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(token))
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}
