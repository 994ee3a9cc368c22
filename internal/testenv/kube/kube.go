// Package kube is internal/kubelab for tests: Start brings Kubernetes up
// on a fresh FreeFlow cluster for one test and removes both when the test
// ends, and the methods fail the test where kubelab's return an error.
// docs/KUBERNETES.md says what runs where and why.
package kube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/kubelab"
	"github.com/freeflow-net/freeflow/internal/ociimage"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// Options says what Start builds.
type Options struct {
	// Hosts is the number of FreeFlow hosts, one node on each (default 2).
	Hosts int
	// BinDir holds FreeFlow's binaries (testenv.BuildBinaries).
	BinDir string
	// NoAgents brings the FreeFlow cluster up without its freeflowd agents
	// (`cluster up --no-agents`), for agents run by a DaemonSet.
	NoAgents bool
	// NoCNI: see kubelab.Options.
	NoCNI bool
}

// Cluster is a running Kubernetes cluster and the FreeFlow cluster under
// it.
type Cluster struct {
	*kubelab.Cluster
	FF *testenv.Cluster
}

// Start brings up a FreeFlow cluster and Kubernetes on it, skipping the
// test if a part is missing from the machine. Everything is removed when
// the test ends (`freeflow cluster down` finds all of it, see
// internal/cluster), and on failure the end of each component's log is
// written to the test log first.
func Start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if why := kubelab.Missing(); why != "" {
		t.Skip(why)
	}
	if opts.Hosts == 0 {
		opts.Hosts = 2
	}
	pause := filepath.Join(t.TempDir(), "pause")
	if err := BuildStatic(pause, "./internal/kubelab/pause"); err != nil {
		t.Fatal(err)
	}
	var extra []string
	if opts.NoAgents {
		extra = append(extra, "--no-agents")
	}
	ff, err := testenv.Up(opts.BinDir, "k8s", opts.Hosts, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ff.Down(); err != nil {
			t.Errorf("cluster down %s: %v", ff.Name, err)
		}
	})
	kc, err := kubelab.Up(context.Background(), ff.Name, kubelab.Options{Pause: pause, NoCNI: opts.NoCNI})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Cluster: kc, FF: ff}
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			kc.LogTails(&b)
			t.Log(b.String())
		}
	})
	t.Cleanup(kc.Close)
	t.Logf("kube: %d nodes %s %.1fs after the FreeFlow cluster %s was up", len(kc.Nodes),
		map[bool]string{true: "registered", false: "Ready"}[kc.Registered], kc.ReadyAfter.Seconds(), ff.Name)
	return c
}

// Kubectl runs kubectl as the admin and returns its output, failing the
// test if it fails.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Cluster.Kubectl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlErr runs kubectl as the admin and returns its output and error.
func (c *Cluster) KubectlErr(args ...string) (string, error) {
	return c.Cluster.Kubectl(context.Background(), args...)
}

// Apply creates (or updates) the objects of a YAML manifest.
func (c *Cluster) Apply(t testing.TB, manifest string) {
	t.Helper()
	if err := c.Cluster.Apply(context.Background(), manifest); err != nil {
		t.Fatal(err)
	}
}

// WaitPodPhase waits up to timeout until pod namespace/name is in phase
// and returns how long it waited (pod start latency, from a fresh apply).
func (c *Cluster) WaitPodPhase(t testing.TB, namespace, name, phase string, timeout time.Duration) time.Duration {
	t.Helper()
	took, err := c.Cluster.WaitPodPhase(context.Background(), namespace, name, phase, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return took
}

// WaitReady waits until every node is Ready.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	if err := c.Cluster.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// IPAMReservations lists the addresses host-local holds for node's pods.
func (c *Cluster) IPAMReservations(t testing.TB, node string) []string {
	t.Helper()
	ips, err := c.Cluster.IPAMReservations(node)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

// ImportImage imports an image file into every node's containerd.
func (c *Cluster) ImportImage(t testing.TB, file string) {
	t.Helper()
	if err := c.Cluster.ImportImage(file); err != nil {
		t.Fatal(err)
	}
}

// BuildImage writes an image of rootfs with cfg and imports it on every
// node.
func (c *Cluster) BuildImage(t testing.TB, rootfs string, cfg ociimage.Config) {
	t.Helper()
	if err := c.Cluster.BuildImage(rootfs, cfg); err != nil {
		t.Fatal(err)
	}
}

// BuildStatic builds the Go package pkg (a path relative to the module
// root, such as ./internal/kubelab/pause) as a static binary at out.
func BuildStatic(out, pkg string) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s (static): %w\n%s", pkg, err, b)
	}
	return nil
}
