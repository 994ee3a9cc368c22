package cluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/cluster"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// These tests drive the real CLI. TestMain builds the binaries once; every
// test brings up its own uniquely named cluster.

var (
	binDir     string // freeflow, freeflowd and freeflow-cni built from this tree
	skipReason string
	setupErr   error
)

func TestMain(m *testing.M) {
	skipReason = testenv.Missing("ip", "bridge", "nsenter", "nft", "/usr/bin/etcd")
	if skipReason == "" {
		// BuildBinaries makes the directory readable by everyone:
		// TestNotRoot runs the CLI as nobody.
		binDir, setupErr = testenv.BuildBinaries()
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

// uniqueCluster returns a fresh cluster name whose remains are torn down
// when the test ends, whatever happened.
func uniqueCluster(t *testing.T) string {
	t.Helper()
	c := &testenv.Cluster{Name: testenv.RandomName("t", 4), BinDir: binDir}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("cluster down %s: %v", c.Name, err)
		}
	})
	return c.Name
}

// freeflow runs the CLI on cluster and returns its output (stdout, then
// stderr) and exit code.
func freeflow(t *testing.T, cluster string, args ...string) (string, int) {
	t.Helper()
	r := (&testenv.Cluster{Name: cluster, BinDir: binDir}).FF(t, args...)
	return r.Stdout + r.Stderr, r.Code
}

func mustUp(t *testing.T, cluster string, hosts int) *state.Cluster {
	t.Helper()
	out, code := freeflow(t, cluster, "cluster", "up", "--hosts", fmt.Sprint(hosts))
	if code != 0 {
		t.Fatalf("cluster up exited %d:\n%s", code, out)
	}
	t.Logf("%s", strings.TrimSpace(out))
	c, err := state.NewLayout(cluster).LoadCluster()
	if err != nil {
		t.Fatal(err)
	}
	if c.Phase != state.PhaseUp {
		t.Fatalf("phase %q after up, want %q", c.Phase, state.PhaseUp)
	}
	return c
}

// pids of the cluster's processes as recorded in its state.
func pids(c *state.Cluster) []int {
	out := []int{c.Etcd.PID}
	for _, h := range c.Hosts {
		out = append(out, h.AgentPID)
	}
	return out
}

func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// assertGone checks that nothing of cluster is left: no namespace, no
// process running in it or started for it, no mount, no file.
func assertGone(t *testing.T, cluster string, known []int) {
	t.Helper()
	l := state.NewLayout(cluster)
	if names, _ := netns.List(cluster + "-"); len(names) > 0 {
		t.Errorf("namespaces left: %v", names)
	}
	for _, pid := range known {
		if running(pid) {
			t.Errorf("process %d still running", pid)
		}
	}
	if pids := processesMentioning(l.Dir()); len(pids) > 0 {
		t.Errorf("processes of the cluster still running: %v", pids)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), l.Dir()) || strings.Contains(string(mounts), "/run/netns/"+cluster+"-") {
		t.Errorf("mounts left under %s or /run/netns", l.Dir())
	}
	if _, err := os.Stat(l.Dir()); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", l.Dir(), err)
	}
}

// processesMentioning returns live processes whose command line contains s
// (every agent and etcd of a cluster names the cluster directory).
func processesMentioning(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.Contains(cmdline, []byte(s)) && running(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func rootLinks(t *testing.T) string {
	out, err := exec.Command("ip", "-br", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestUpThenDownLeavesNothing(t *testing.T) {
	needRoot(t)
	name := uniqueCluster(t)
	linksBefore := rootLinks(t)
	c := mustUp(t, name, 2)
	for _, ns := range []string{name + "-fabric", name + "-h1", name + "-h2"} {
		if !netns.Exists(ns) {
			t.Errorf("namespace %s missing after up", ns)
		}
	}
	for _, pid := range pids(c) {
		if !running(pid) {
			t.Errorf("process %d recorded in cluster.json is not running", pid)
		}
	}
	if got := rootLinks(t); got != linksBefore {
		t.Errorf("up changed the root namespace's interfaces:\nbefore:\n%s\nafter:\n%s", linksBefore, got)
	}
	// A mount under the cluster directory, as containers make: down must undo it.
	mnt := filepath.Join(state.NewLayout(name).Dir(), "mnt test")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(t.TempDir(), mnt, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	out, code := freeflow(t, name, "cluster", "down")
	if code != 0 {
		t.Fatalf("cluster down exited %d:\n%s", code, out)
	}
	assertGone(t, name, pids(c))
	if got := rootLinks(t); got != linksBefore {
		t.Errorf("root namespace interfaces changed after down:\n%s", got)
	}
	out, code = freeflow(t, name, "cluster", "down")
	if code != 0 || !strings.Contains(out, "does not exist") {
		t.Errorf("second down: exit %d, %q; want 0 and 'does not exist'", code, out)
	}
}

// TestDownAfterKilledUp SIGKILLs the CLI in the middle of `up` and checks
// that `down` still removes everything it had made: once as soon as the
// first namespace exists, once after it started etcd.
func TestDownAfterKilledUp(t *testing.T) {
	needRoot(t)
	stages := map[string]func(c *state.Cluster, namespaces int) bool{
		"first namespace": func(c *state.Cluster, n int) bool { return n > 0 },
		"etcd started":    func(c *state.Cluster, n int) bool { return c.Etcd.PID > 0 },
	}
	for stage, reached := range stages {
		t.Run(stage, func(t *testing.T) {
			name := uniqueCluster(t)
			killUpWhen(t, name, reached)
			out, code := freeflow(t, name, "cluster", "down")
			if code != 0 {
				t.Fatalf("cluster down after a killed up exited %d:\n%s", code, out)
			}
			assertGone(t, name, nil)
		})
	}
}

// killUpWhen starts `cluster up` and SIGKILLs it once cluster.json says
// creating and reached says so.
func killUpWhen(t *testing.T, name string, reached func(*state.Cluster, int) bool) {
	t.Helper()
	l := state.NewLayout(name)
	cmd := exec.Command(filepath.Join(binDir, "freeflow"), "--cluster", name, "cluster", "up", "--hosts", "3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := l.LoadCluster()
		names, _ := netns.List(name + "-")
		if err == nil && c.Phase == state.PhaseCreating && reached(c, len(names)) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("up never reached the stage to kill it at")
}

// TestDownWithoutState removes a cluster whose cluster.json is corrupt.
func TestDownWithoutState(t *testing.T) {
	needRoot(t)
	name := uniqueCluster(t)
	c := mustUp(t, name, 1)
	if err := os.WriteFile(state.NewLayout(name).StateFile(), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := freeflow(t, name, "cluster", "down"); code != 0 {
		t.Fatalf("down exited %d:\n%s", code, out)
	}
	assertGone(t, name, pids(c))
}

func TestTwoClustersSideBySide(t *testing.T) {
	needRoot(t)
	a, b := uniqueCluster(t), uniqueCluster(t)
	mustUp(t, a, 1)
	cb := mustUp(t, b, 1)
	if out, code := freeflow(t, a, "cluster", "down"); code != 0 {
		t.Fatalf("down %s exited %d:\n%s", a, code, out)
	}
	assertGone(t, a, nil)
	for _, pid := range pids(cb) {
		if !running(pid) {
			t.Errorf("cluster %s lost process %d when %s went down", b, pid, a)
		}
	}
	for _, ns := range []string{b + "-fabric", b + "-h1"} {
		if !netns.Exists(ns) {
			t.Errorf("cluster %s lost namespace %s when %s went down", b, ns, a)
		}
	}
	if c, err := state.NewLayout(b).LoadCluster(); err != nil || c.Phase != state.PhaseUp {
		t.Errorf("cluster %s state after %s went down: %v, %v", b, a, c, err)
	}
}

// TestUpAgainRepairsOnlySameShape: `up` on a healthy cluster with its own
// flags changes nothing (the same processes run); with other flags it is
// refused with the way out.
func TestUpAgainRepairsOnlySameShape(t *testing.T) {
	needRoot(t)
	name := uniqueCluster(t)
	c := mustUp(t, name, 1)
	if again := mustUp(t, name, 1); fmt.Sprint(pids(again)) != fmt.Sprint(pids(c)) {
		t.Errorf("up on a healthy cluster changed its processes: %v -> %v", pids(c), pids(again))
	}
	out, code := freeflow(t, name, "cluster", "up", "--hosts", "2")
	if code == 0 || !strings.Contains(out, "already exists") || !strings.Contains(out, "cluster down") {
		t.Errorf("up with other flags: exit %d, %q; want an 'already exists ... cluster down' error", code, out)
	}
}

func TestClearErrors(t *testing.T) {
	needRoot(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cluster", "Bad-Name", "cluster", "up"}, 2, "invalid cluster name"},
		{[]string{"--cluster", "tzz", "cluster", "up", "--hosts", "0"}, 1, "need 1 to"},
		{[]string{"--cluster", "tzz", "cluster", "sideways"}, 2, "unknown subcommand"},
	}
	for _, tc := range cases {
		out, err := exec.Command(filepath.Join(binDir, "freeflow"), tc.args...).CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("freeflow %v: exit %d, %q; want exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}

func TestNotRoot(t *testing.T) {
	needRoot(t)
	cmd := exec.Command(filepath.Join(binDir, "freeflow"), "cluster", "up")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "must run as root") {
		t.Errorf("cluster up as nobody: %v, %q; want exit 1 and 'must run as root'", err, out)
	}
}

// TestUnreachableExternalEtcd gives `up` an etcd that nobody serves (a
// closed loopback port: the CLI dials an external etcd from its own
// namespace, so nothing may leave the machine): it must fail saying where
// etcd must be reachable from, and leave nothing.
func TestUnreachableExternalEtcd(t *testing.T) {
	needRoot(t)
	name := uniqueCluster(t)
	url := "http://" + closedLoopbackAddr(t)
	out, code := freeflow(t, name, "cluster", "up", "--hosts", "1", "--etcd", url)
	if code != 1 || !strings.Contains(out, url) || !strings.Contains(out, "reachable from where freeflow runs") {
		t.Errorf("up with an unreachable etcd: exit %d, %q", code, out)
	}
	assertGone(t, name, nil)
}

// closedLoopbackAddr returns a loopback address on which nothing listens.
func closedLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestStatusReportsCacheOnly checks that status shows healthy agents and
// directory, then says clearly that agents serve from their cache once
// etcd stops answering.
func TestStatusReportsCacheOnly(t *testing.T) {
	needRoot(t)
	name := uniqueCluster(t)
	c := mustUp(t, name, 2)
	r := statusJSON(t, name)
	if !r.Etcd.Healthy || len(r.Hosts) != 2 || len(r.Cached) != 0 {
		t.Fatalf("status of a fresh cluster: %+v", r)
	}
	for _, h := range r.Hosts {
		if h.Agent == nil || !h.Agent.Directory.Connected || h.Agent.PID != h.AgentPID {
			t.Errorf("host %s: agent %+v, error %q; want a connected agent with pid %d", h.Name, h.Agent, h.AgentError, h.AgentPID)
		}
	}

	// A stopped etcd accepts nothing: the agents' watches go silent.
	syscall.Kill(c.Etcd.PID, syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(c.Etcd.PID, syscall.SIGCONT) })
	deadline := time.Now().Add(10 * time.Second)
	for len(r.Cached) != 2 && time.Now().Before(deadline) {
		r = statusJSON(t, name)
	}
	if r.Etcd.Healthy || len(r.Cached) != 2 {
		t.Fatalf("with etcd stopped: etcd healthy %v, serving from cache %v; want unhealthy and both hosts", r.Etcd.Healthy, r.Cached)
	}
	out, code := freeflow(t, name, "status")
	if code != 0 || !strings.Contains(out, "serving from their cache") || !strings.Contains(out, "CACHE ONLY") {
		t.Errorf("status text with etcd stopped (exit %d):\n%s", code, out)
	}
}

func statusJSON(t *testing.T, name string) cluster.Report {
	t.Helper()
	out, code := freeflow(t, name, "status", "-o", "json")
	if code != 0 {
		t.Fatalf("status exited %d:\n%s", code, out)
	}
	var r cluster.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return r
}

func TestStatusOfMissingCluster(t *testing.T) {
	needRoot(t)
	out, code := freeflow(t, uniqueCluster(t), "status")
	if code != 1 || !strings.Contains(out, "does not exist") {
		t.Errorf("status of a missing cluster: exit %d, %q", code, out)
	}
}

// TestDownRemovesContainers runs a detached container and checks that down
// stops it and removes its crun state and cgroups.
func TestDownRemovesContainers(t *testing.T) {
	needRoot(t)
	if why := testenv.Missing("crun"); why != "" {
		t.Skip(why)
	}
	name := uniqueCluster(t)
	c := mustUp(t, name, 1)
	out, code := freeflow(t, name, "run", "--host", "h1", "--name", "sleeper", "-d", "--", "sleep", "600")
	if code != 0 {
		t.Fatalf("run exited %d:\n%s", code, out)
	}
	ct, err := state.NewLayout(name).LoadContainer("sleeper")
	if err != nil || !running(ct.PID) {
		t.Fatalf("container not running after run: %+v, %v", ct, err)
	}
	if out, code := freeflow(t, name, "cluster", "down"); code != 0 {
		t.Fatalf("down exited %d:\n%s", code, out)
	}
	assertGone(t, name, append(pids(c), ct.PID))
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + name + "-*"); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}

// TestUpNoAgents: `cluster up --no-agents` makes the hosts, overlay and
// etcd but no freeflowd (agents run elsewhere, as FreeFlow's DaemonSet on
// Kubernetes); status says so rather than reporting dead agents; `up`
// again repairs the same shape only; down removes everything.
func TestUpNoAgents(t *testing.T) {
	needRoot(t)
	name := uniqueCluster(t)
	out, code := freeflow(t, name, "cluster", "up", "--hosts", "2", "--no-agents")
	if code != 0 || !strings.Contains(out, "--no-agents") {
		t.Fatalf("cluster up --no-agents: exit %d:\n%s", code, out)
	}
	c, err := state.NewLayout(name).LoadCluster()
	if err != nil {
		t.Fatal(err)
	}
	if !c.NoAgents || c.Phase != state.PhaseUp {
		t.Fatalf("cluster.json after up --no-agents: no_agents %v, phase %q", c.NoAgents, c.Phase)
	}
	if agents := processesMentioning(state.NewLayout(name).AdminSocket("h1")); len(agents) > 0 || c.Hosts[0].AgentPID != 0 {
		t.Fatalf("an agent runs on h1 (pids %v, recorded %d)", agents, c.Hosts[0].AgentPID)
	}
	r := statusJSON(t, name)
	if !r.NoAgents || !r.Etcd.Healthy {
		t.Fatalf("status: no_agents %v, etcd healthy %v (%s)", r.NoAgents, r.Etcd.Healthy, r.Etcd.Error)
	}
	out, _ = freeflow(t, name, "status")
	if !strings.Contains(out, "none (--no-agents)") || strings.Contains(out, "NOT RUNNING") || strings.Contains(out, "not answering") {
		t.Errorf("status text of a cluster without agents:\n%s", out)
	}
	if out, code := freeflow(t, name, "cluster", "up", "--hosts", "2", "--no-agents"); code != 0 {
		t.Errorf("up --no-agents again (a repair): exit %d:\n%s", code, out)
	}
	if again, _ := state.NewLayout(name).LoadCluster(); again.Hosts[0].AgentPID != 0 || again.Hosts[1].AgentPID != 0 {
		t.Errorf("the repair started agents: %+v", again.Hosts)
	}
	out, code = freeflow(t, name, "cluster", "up", "--hosts", "2")
	if code == 0 || !strings.Contains(out, "no-agents") {
		t.Errorf("up with agents on a cluster made without: exit %d, %q; want a refusal naming no-agents", code, out)
	}
	if out, code := freeflow(t, name, "cluster", "down"); code != 0 {
		t.Fatalf("down exited %d:\n%s", code, out)
	}
	assertGone(t, name, pids(c))
}
