// Package e2e tests what a user of a whole cluster depends on, through the
// real CLI, agents, etcd, crun and CNI. Tests of one component live with it.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

var (
	binDir     string
	skipReason string
	setupErr   error
)

func TestMain(m *testing.M) {
	skipReason = testenv.Missing("crun", "ip", "nsenter", "unshare", "python3", "etcd", "nft", "/usr/lib/cni/bridge")
	if skipReason == "" {
		var err error
		if binDir, err = testenv.BuildBinaries(); err != nil {
			setupErr = err
		}
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// newCluster brings up a fresh cluster for one test and tears it down after.
func newCluster(t *testing.T, hosts int, extra ...string) *testenv.Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	c, err := testenv.Up(binDir, "te", hosts, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	return c
}

// runIdle starts a detached container that just waits.
func runIdle(t *testing.T, c *testenv.Cluster, host, name, tenant string) {
	t.Helper()
	c.MustFF(t, "run", "--host", host, "--name", name, "--tenant", tenant, "-d", "--", "sleep", "3600")
}

func must(t *testing.T, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
