package kubelab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/deploy"
)

// DaemonSetFile is the manifest of FreeFlow's DaemonSet in deploy/.
const DaemonSetFile = "30-daemonset.yaml"

// InstallFreeFlow installs FreeFlow the way docs/KUBERNETES-DEPLOY.md tells
// a user to: the image (the file `make image` writes) imported on every
// node, deploy/'s manifests applied. Only what this cluster needs that a
// real one does not is changed, with kubectl's own local edits: the API
// server's address for the DaemonSet's pods (there is no kube-proxy to
// route the kubernetes Service) and the cluster name (the name in the
// paths of the agents' sockets, which clusters side by side must not
// share). It returns once the DaemonSet has rolled out and every node is
// Ready, with the time that took from the apply. Enabling the runtime
// handler is SetDefaultRuntime.
func (c *Cluster) InstallFreeFlow(ctx context.Context, image string) (time.Duration, error) {
	if err := c.ImportImage(image); err != nil {
		return 0, err
	}
	files, err := deploy.Manifests()
	if err != nil {
		return 0, err
	}
	var docs []string
	for _, f := range files {
		text := string(f.Text)
		if f.Name == DaemonSetFile {
			if text, err = c.daemonSetHere(ctx, f.Text); err != nil {
				return 0, err
			}
		}
		docs = append(docs, text)
	}
	begin := time.Now()
	if err := c.Apply(ctx, strings.Join(docs, "\n---\n")); err != nil {
		return 0, err
	}
	if _, err := c.Kubectl(ctx, "-n", "freeflow-system", "rollout", "status", "ds/freeflow", "--timeout=180s"); err != nil {
		return 0, fmt.Errorf("FreeFlow's DaemonSet did not roll out: %w\n%s", err, c.FreeFlowLogs(ctx))
	}
	if err := c.WaitReady(ctx); err != nil {
		return 0, err
	}
	return time.Since(begin), nil
}

// daemonSetHere is the DaemonSet's manifest with this cluster's API server
// address and cluster name.
func (c *Cluster) daemonSetHere(ctx context.Context, manifest []byte) (string, error) {
	host, port, _ := strings.Cut(strings.TrimPrefix(c.APIServer, "https://"), ":")
	cluster := "--cluster=" + c.Name
	f, err := os.CreateTemp(c.dir, "ds-*.yaml")
	if err != nil {
		return "", err
	}
	f.Close()
	defer os.Remove(f.Name())
	if err := os.WriteFile(f.Name(), manifest, 0o644); err != nil {
		return "", err
	}
	patch := fmt.Sprintf(`[{"op":"add","path":"/spec/template/spec/initContainers/0/command/-","value":%q},`+
		`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":%q}]`, cluster, cluster)
	patched, err := c.Kubectl(ctx, "patch", "--local", "-f", f.Name(), "--type=json", "-p", patch, "-o", "yaml")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(f.Name(), []byte(patched), 0o644); err != nil {
		return "", err
	}
	return c.Kubectl(ctx, "set", "env", "--local", "-f", f.Name(), "-o", "yaml", "--all",
		"KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)
}

// FreeFlowLogs is the end of every FreeFlow pod's logs, both containers.
func (c *Cluster) FreeFlowLogs(ctx context.Context) string {
	var b strings.Builder
	pods, _ := c.Kubectl(ctx, "-n", "freeflow-system", "get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
	for _, p := range strings.Fields(pods) {
		for _, ctr := range []string{"install", "agent"} {
			logs, err := c.Kubectl(ctx, "-n", "freeflow-system", "logs", p, "-c", ctr, "--tail=30")
			fmt.Fprintf(&b, "--- %s's %s container (%v):\n%s\n", p, ctr, err, logs)
		}
	}
	return b.String()
}

// ImageFile is where `make image` leaves FreeFlow's image, next to the
// binaries in bin.
func ImageFile(bin string) string { return filepath.Join(bin, "freeflow-image.tar") }

// PauseProgram is the static pause program `make kubelab` builds next to
// the binaries (Options.Pause).
const PauseProgram = "freeflow-pause"
