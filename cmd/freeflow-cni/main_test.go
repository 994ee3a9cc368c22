package main

import (
	"os/exec"
	"strings"
	"testing"
)

// daemon is the agent's own package, which links etcd and gRPC; the
// plugin reaches the agent through internal/agentapi instead.
const daemon = "github.com/freeflow-net/freeflow/internal/agent"

// heavy reports whether the plugin must not link pkg: etcd, gRPC (most of
// the 19 MB the plugin weighed when it did), client-go and the Kubernetes
// API types (the kubernetes datastore's, tens of MB), or the daemon and
// the datastores that bring them.
func heavy(pkg string) bool {
	for _, prefix := range []string{"go.etcd.io/", "google.golang.org/grpc", "k8s.io/", datastores} {
		if strings.HasPrefix(pkg, prefix) {
			return true
		}
	}
	return pkg == daemon
}

// datastores holds the etcd and Kubernetes directories (internal/directory
// itself holds only the records).
const datastores = "github.com/freeflow-net/freeflow/internal/directory/"

// The CNI plugin talks to the agent through internal/agentapi and carries
// internal/directory's records, neither of which links etcd, gRPC,
// client-go or the daemon.
func TestPluginLinksNeitherEtcdNorGRPC(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test lists the plugin's dependencies with the go command: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if heavy(pkg) {
			bad = append(bad, pkg)
		}
	}
	if len(bad) > 0 {
		t.Errorf("freeflow-cni links %d packages of etcd, gRPC, client-go or the daemon, among them %s; see what imports them with go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/freeflow-cni",
			len(bad), strings.Join(bad[max(0, len(bad)-3):], ", "))
	}
}
