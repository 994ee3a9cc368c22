package bench

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/kubelab"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// buildFreeflow builds the project's binaries into a temporary bin dir
// (the CLI starts freeflowd from its own directory) and skips unless the
// cluster and container commands the bench drives exist.
func buildFreeflow(t *testing.T) string {
	t.Helper()
	needTools(t)
	if why := testenv.Missing("crun", "etcd"); why != "" {
		t.Skip(why)
	}
	dir, err := testenv.BuildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// ffmem lands next to freeflow, as `make build` puts it in bin/.
	root, _ := testenv.ModuleRoot()
	if out, err := exec.Command("make", "-s", "-C", root+"/tools/ffmem").CombinedOutput(); err != nil {
		t.Fatalf("build ffmem: %v\n%s", err, out)
	}
	if out, err := exec.Command("cp", root+"/tools/ffmem/build/ffmem", dir).CombinedOutput(); err != nil {
		t.Fatalf("copy ffmem: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "freeflow")
	help, _ := exec.Command(bin, "help").Output()
	for _, c := range []string{"cluster", "run", "exec", "ps", "rm"} {
		if !bytes.Contains(help, []byte("\n  "+c+" ")) {
			t.Skipf("freeflow has no %q command yet; the bench drives the cluster through it", c)
		}
	}
	return bin
}

// assertClusterGone fails if any namespace of cluster is left.
func assertClusterGone(t *testing.T, cluster string) {
	t.Helper()
	if left, _ := netns.List(cluster + "-"); len(left) > 0 {
		t.Errorf("bench left network namespaces %v", left)
		for _, ns := range left {
			netns.Delete(ns)
		}
	}
}

// TestQuickBenchOnRealCluster runs `freeflow bench --quick` end to end with
// one repetition of 1 s: its own cluster, real containers, real tools.
// Every path must have produced every figure, and the cluster must be gone.
func TestQuickBenchOnRealCluster(t *testing.T) {
	bin := buildFreeflow(t)
	allowed, _ := os.ReadFile(allowedPath)
	raw, dir, stdout := runBench(t, bin, "--quick", "--duration", "1s", "--reps", "1")
	defer assertClusterGone(t, raw.Setup.Cluster)
	if again, _ := os.ReadFile(allowedPath); !bytes.Equal(again, allowed) {
		t.Errorf("allowed congestion control list %q not restored to %q", again, allowed)
	}
	if cc := uniformCC(raw.Setup.CCUsed); cc != "cubic" {
		t.Errorf("congestion control used: %v, want cubic everywhere", raw.Setup.CCUsed)
	}
	checkEveryFigure(t, raw)
	checkFreeFlowPaths(t, raw)
	for _, p := range raw.Paths {
		if !strings.Contains(stdout, p.Name) {
			t.Errorf("printed table lacks path %s:\n%s", p.Name, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "report.md")); err != nil {
		t.Error(err)
	}
}

// runBench runs `freeflow bench args...` into a temporary directory and
// returns its raw results, their directory and what it printed.
func runBench(t *testing.T, bin string, args ...string) (*Raw, string, string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(bin, append(append([]string{"bench"}, args...), "--out", out)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	raws, _ := filepath.Glob(filepath.Join(out, "*", "raw.json"))
	if err != nil || len(raws) != 1 {
		t.Fatalf("bench: %v (%d raw.json)\nstderr:\n%s", err, len(raws), stderr.String())
	}
	raw, err := LoadRaw(raws[0])
	if err != nil {
		t.Fatal(err)
	}
	return raw, filepath.Dir(raws[0]), stdout.String()
}

// checkEveryFigure asserts every quick path has a positive headline
// figure for every case of every quick experiment that runs on it.
func checkEveryFigure(t *testing.T, raw *Raw) {
	t.Helper()
	quick, _ := SelectExperiments(nil, true)
	want := 0
	for _, p := range raw.Paths {
		for _, e := range quick {
			if e.applies(pathNamed(t, p.Name)) {
				want += len(e.Cases(false))
			}
		}
	}
	n := 0
	for _, r := range SummarizeRaw(raw) {
		if !r.ran() {
			continue
		}
		n++
		if m, ok := r.Stats[mCPUPerGB]; ok && r.Exp.Name == "throughput" && m.N > 0 && m.Median <= 0 {
			t.Errorf("throughput on %s: no CPU per GB", r.Path.Name)
		}
		figures := 0
		for _, m := range r.Exp.Metrics {
			st := r.Stats[m.Key]
			if !m.Headline || st.N == 0 && r.Exp.Name == limits.Info.Name { // a limits case has one of its two figures
				continue
			}
			figures++
			if st.N != 1 || st.Median <= 0 {
				t.Errorf("%s %s on %s: %s = %+v; notes %q", r.Exp.Name, r.Case, r.Path.Name, m.Label, st, r.Notes)
			}
		}
		if figures == 0 {
			t.Errorf("%s %s on %s: no headline figure; notes %q", r.Exp.Name, r.Case, r.Path.Name, r.Notes)
		}
	}
	if n != want {
		t.Errorf("%d rows measured, want %d (every quick case on every path it applies to)", n, want)
	}
}

func pathNamed(t *testing.T, name string) Path {
	t.Helper()
	ps, err := SelectPaths([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// checkFreeFlowPaths asserts every FreeFlow row was checked with
// `freeflow conns` and really took the path it claims: no row of a path
// with an expected path carries a note about the path.
func checkFreeFlowPaths(t *testing.T, raw *Raw) {
	t.Helper()
	for _, r := range SummarizeRaw(raw) {
		if r.Path.Expect == "" {
			continue
		}
		for _, n := range r.Notes {
			if strings.Contains(n, "expected "+r.Path.Expect) || strings.Contains(n, "path not checked") || strings.Contains(n, "counters not read") {
				t.Errorf("%s %s on %s did not take path %s: %s", r.Exp.Name, r.Case, r.Path.Name, r.Path.Expect, n)
			}
		}
	}
}

// TestKubeBenchOnRealCluster runs `freeflow bench --only kube` end to end
// with one repetition: its own two-node Kubernetes, FreeFlow installed
// from the image `make kubelab` builds, real pods. Every Kubernetes
// experiment has its figures on every path it measures, FreeFlow's pods
// took the paths they claim, and the cluster is gone.
func TestKubeBenchOnRealCluster(t *testing.T) {
	if why := kubelab.Missing(); why != "" {
		t.Skip(why)
	}
	bin := buildFreeflow(t)
	if err := testenv.Make("kubelab", filepath.Dir(bin)); err != nil {
		t.Fatal(err)
	}
	raw, _, stdout := runBench(t, bin, "--only", KubeName, "--reps", "1")
	if raw.Setup.KubeCluster == "" {
		t.Fatalf("the Kubernetes experiments did not run: %q", raw.Notes)
	}
	defer assertClusterGone(t, raw.Setup.KubeCluster)
	measured := map[string]int{}
	for _, r := range SummarizeRaw(raw) {
		if !r.ran() {
			continue
		}
		measured[r.Exp.Name]++
		for _, m := range r.Exp.Metrics {
			if st := r.Stats[m.Key]; m.Headline && (st.N == 0 || st.Median <= 0) {
				t.Errorf("%s %s on %s: %s = %+v; notes %q", r.Exp.Name, r.Case, r.Path.Name, m.Label, st, r.Notes)
			}
		}
	}
	// install on FreeFlow's path; pod start on both; redis on two paths
	// in each of two cases.
	if want := map[string]int{"kube-install": 1, "kube-pod-start": 2, "kube-redis": 4}; !maps.Equal(measured, want) {
		t.Errorf("rows measured per experiment %v, want %v", measured, want)
	}
	checkFreeFlowPaths(t, raw)
	if !strings.Contains(stdout, pathKubeFreeFlowX) {
		t.Errorf("printed table lacks path %s:\n%s", pathKubeFreeFlowX, stdout)
	}
}

// TestMigrateBenchOnRealCluster runs `freeflow bench --quick --only
// migrate` with one repetition: its own cluster, a 64 MiB redis-server
// without the library and one with it, each moved from h1 to h2 while its
// peers on both hosts INCR, every reply right (with the library, the h1
// peer's connection on shared memory, parked on TCP first). Each row has
// every headline figure and no note, and the cluster is gone.
func TestMigrateBenchOnRealCluster(t *testing.T) {
	if why := migrateMissing(); why != "" {
		t.Skip(why)
	}
	bin := buildFreeflow(t)
	raw, _, stdout := runBench(t, bin, "--quick", "--only", MigrateName, "--reps", "1")
	if raw.Setup.MigrateCluster == "" {
		t.Fatalf("the migration experiment did not run: %q", raw.Notes)
	}
	defer assertClusterGone(t, raw.Setup.MigrateCluster)
	paths := map[string]bool{}
	for _, r := range SummarizeRaw(raw) {
		if !r.ran() {
			continue
		}
		paths[r.Path.Name] = r.Case == "64 MiB"
		if r.Exp.Name != MigrateName || r.Runs != 1 || len(r.Notes) > 0 {
			t.Errorf("%s %s on %s: %d runs, notes %q", r.Exp.Name, r.Case, r.Path.Name, r.Runs, r.Notes)
		}
		for _, m := range r.Exp.Metrics {
			if st := r.Stats[m.Key]; m.Headline && (st.N != 1 || st.Median <= 0) {
				t.Errorf("%s %s: %s = %+v", r.Exp.Name, r.Case, m.Label, st)
			}
		}
		if want := map[string]float64{pathMigrate: 0, pathMigrateLib: 1}[r.Path.Name]; r.Stats[mParked].Median != want {
			t.Errorf("%s %s on %s: %v connections parked, want %v", r.Exp.Name, r.Case, r.Path.Name, r.Stats[mParked].Median, want)
		}
	}
	if len(paths) != 2 || !paths[pathMigrate] || !paths[pathMigrateLib] {
		t.Errorf("rows measured: %v; want the 64 MiB row of %s and of %s", paths, pathMigrate, pathMigrateLib)
	}
	for _, note := range raw.Notes {
		if strings.Contains(note, "migration") {
			t.Errorf("run note: %s", note)
		}
	}
	if !strings.Contains(stdout, "migrate 64 MiB") {
		t.Errorf("printed table lacks the migration:\n%s", stdout)
	}
}

// TestSelectSeparateRuns: --only kube or migrate alone runs no path
// experiment, with others both; the full run (no --only) runs every path
// experiment, the migrations and the Kubernetes ones, the quick run its
// quick ones and neither separate run unless named.
func TestSelectSeparateRuns(t *testing.T) {
	quick, _ := SelectExperiments(nil, true)
	for _, c := range []struct {
		only     []string
		quick    bool
		separate string
		exps     int
	}{
		{[]string{KubeName}, false, KubeName, 0},
		{[]string{MigrateName}, false, MigrateName, 0},
		{[]string{"redis", KubeName}, false, KubeName, 1},
		{[]string{KubeName, "redis", MigrateName}, false, MigrateName + "," + KubeName, 1},
		{[]string{"redis"}, false, "", 1},
		{nil, false, MigrateName + "," + KubeName, len(Experiments)},
		{nil, true, "", len(quick)},
		{[]string{KubeName}, true, KubeName, 0},
		{[]string{MigrateName}, true, MigrateName, 0},
	} {
		sep, exps, err := selectRun(Options{Only: c.only, Quick: c.quick})
		var names []string
		for _, s := range sep {
			names = append(names, s.name)
		}
		if got := strings.Join(names, ","); err != nil || got != c.separate || len(exps) != c.exps {
			t.Errorf("--only %v, quick %v: separate runs %q, %d path experiments (%v); want %q, %d", c.only, c.quick, got, len(exps), err, c.separate, c.exps)
		}
	}
}

// TestBenchInterruptedCleansUp sends Ctrl-C while the bench measures and
// checks it still removes its cluster.
func TestBenchInterruptedCleansUp(t *testing.T) {
	bin := buildFreeflow(t)
	cmd := exec.Command(bin, "bench", "--quick", "--only", "latency", "--out", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cluster := ""
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if c, ok := strings.CutPrefix(sc.Text(), "bench: starting servers and clients in cluster "); ok {
			cluster = c
			break
		}
	}
	if cluster == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("bench never started measuring")
	}
	time.Sleep(2 * time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for sc.Scan() { // drain, so the bench never blocks on a full pipe
		}
	}()
	err = cmd.Wait()
	if err == nil {
		t.Error("an interrupted bench exited 0")
	}
	assertClusterGone(t, cluster)
}
