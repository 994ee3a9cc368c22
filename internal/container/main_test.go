package container_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// These tests drive the real CLI binary against a real 2-host cluster
// (namespaces, etcd, freeflowd, crun, CNI). TestMain builds the binaries and
// brings the cluster up once; every test removes its own containers.

var (
	binDir     string           // freeflow, freeflowd, freeflow-cni
	tc         *testenv.Cluster // unique per run so parallel runs never collide
	skipReason string
	setupErr   error // why the cluster could not be set up; its tests fail with it
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if skipReason = testenv.Missing("crun", "ip", "unshare", "iperf3", "python3", "cnitool", "etcd", "etcdctl", "/usr/lib/cni/bridge"); skipReason != "" {
		return m.Run()
	}
	if binDir, setupErr = testenv.BuildBinaries(); setupErr != nil {
		return m.Run()
	}
	defer os.RemoveAll(binDir)
	if tc, setupErr = testenv.Up(binDir, "tc", 2); setupErr != nil {
		return m.Run()
	}
	defer func() {
		if err := tc.Down(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down: %v\n", err)
		}
	}()
	return m.Run()
}

func needCluster(t *testing.T) state.Layout {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return state.NewLayout(tc.Name)
}

// ff runs the freeflow CLI on the test cluster.
func ff(t *testing.T, args ...string) testenv.Result {
	t.Helper()
	return tc.FF(t, args...)
}

// mustFF runs the CLI and fails the test unless it exits 0.
func mustFF(t *testing.T, args ...string) string {
	t.Helper()
	return tc.MustFF(t, args...)
}

// startDetached runs a detached container and removes it when the test ends.
func startDetached(t *testing.T, host, name string, argv ...string) {
	t.Helper()
	tc.StartDetached(t, host, name, nil, argv...)
}

// find returns the first entry of list that match accepts, or nil.
func find[T any](list []T, match func(T) bool) *T {
	for i := range list {
		if match(list[i]) {
			return &list[i]
		}
	}
	return nil
}
