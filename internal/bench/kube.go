package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/kubelab"
	"github.com/freeflow-net/freeflow/internal/state"
)

// The Kubernetes experiments (`--only kube`, and part of the full run):
// FreeFlow installed on a real two-node Kubernetes cluster
// (internal/kubelab) the way docs/KUBERNETES-DEPLOY.md tells a user to,
// measured against what the same cluster gives without it. They need a
// cluster of their own (hosts without the CLI's agents: FreeFlow's
// DaemonSet runs them), so they run after the path experiments, and
// their "paths" are what a pod gets rather than placements.

// KubeName selects the Kubernetes experiments in --only.
const KubeName = "kube"

// Path groups of the Kubernetes experiments.
const (
	groupKubeSame  = "k8s same node"
	groupKubeCross = "k8s cross node"
	groupKubePods  = "k8s pods"
)

// Paths of the Kubernetes experiments.
const (
	pathKubePodNet    = "k8s-pod-net"
	pathKubeFreeFlow  = "k8s-freeflow"
	pathKubePodNetX   = "k8s-pod-net-x"
	pathKubeFreeFlowX = "k8s-freeflow-x"
	pathKubeBridgeCNI = "k8s-bridge-cni"
	pathKubeFFCNI     = "k8s-freeflow-cni"
)

var kubePaths = []PathInfo{
	{Name: pathKubePodNet, Group: groupKubeSame, Role: RoleBaseline, Server: "redis pod on h1, opted out", Client: "Job pod on h1, opted out",
		Target: "the server pod's IP", About: `two pods of one node annotated freeflow.io/fast-path: "off": the node's bridge, as without FreeFlow`},
	{Name: pathKubeFreeFlow, Group: groupKubeSame, Role: RoleCandidate, Server: "redis pod on h1", Client: "Job pod on h1",
		Target: "the server pod's IP", About: "two pods of one node whose specs say nothing of FreeFlow, under its runtime handler", Expect: "shm"},
	{Name: pathKubePodNetX, Group: groupKubeCross, Role: RoleBaseline, Server: "redis pod on h1, opted out", Client: "Job pod on h2, opted out",
		Target: "the server pod's IP", About: "pods of two nodes, opted out: the overlay between the nodes, as without FreeFlow"},
	{Name: pathKubeFreeFlowX, Group: groupKubeCross, Role: RoleCandidate, Server: "redis pod on h1", Client: "Job pod on h2",
		Target: "the server pod's IP", About: "pods of two nodes under FreeFlow's runtime handler", Expect: "host-tcp"},
	{Name: pathKubeBridgeCNI, Group: groupKubePods, Role: RoleBaseline, Server: "-", Client: "-", Target: "-",
		About: "pods on a bridge + host-local CNI list alone, runc (the cluster before FreeFlow is installed)"},
	{Name: pathKubeFFCNI, Group: groupKubePods, Role: RoleCandidate, Server: "-", Client: "-", Target: "-",
		About: "pods on FreeFlow's CNI list (bridge + host-local + freeflow-cni) and runtime handler (the wrapper before runc)"},
}

var kubeInfos = []ExperimentInfo{
	{Name: "kube-install", Better: "lower", NoRatios: true,
		Title:   "Kubernetes: `kubectl apply -f deploy/` to FreeFlow's DaemonSet rolled out and both nodes Ready (the image imported before), seconds",
		Metrics: []MetricInfo{{Key: "s", Label: "seconds", Headline: true}}},
	{Name: "kube-pod-start", Better: "lower",
		Title:   "Kubernetes: pod start, `kubectl apply` of a pod (image present) to phase Running, seconds (the two paths cannot interleave: FreeFlow's list replaces the bridge's)",
		Metrics: []MetricInfo{{Key: "s", Label: "seconds", Headline: true}}},
	{Name: "kube-redis", Better: "higher",
		Title:   "Kubernetes: redis between pods, redis-benchmark in a Job pod, 20 connections, SET and GET, requests/s and p99 ms",
		Metrics: redisBench.Info.Metrics},
}

// kubeNS is the namespace of the bench's pods (one tenant: they trust
// each other).
const kubeNS = "bench"

// kubeTimeout bounds each pod's or Job's way to where it is waited for.
const kubeTimeout = 2 * time.Minute

// kubeRun is one run of the Kubernetes experiments.
type kubeRun struct {
	o    Options
	raw  *Raw
	cli  CLI
	kc   *kubelab.Cluster
	reps int
}

// runKube runs the Kubernetes experiments into raw, or notes why it
// cannot (a part missing from the machine).
func runKube(ctx context.Context, o Options, raw *Raw) (err error) {
	bin := filepath.Dir(o.Bin)
	image, pause := kubelab.ImageFile(bin), filepath.Join(bin, kubelab.PauseProgram)
	why := kubelab.Missing()
	for _, f := range []string{image, pause} {
		if _, err := os.Stat(f); why == "" && err != nil {
			why = fmt.Sprintf("needs %s: run `make kubelab` (or `make bench`)", f)
		}
	}
	if why != "" {
		raw.Notes = append(raw.Notes, "the Kubernetes experiments did not run: "+why)
		return nil
	}
	raw.Paths = append(raw.Paths, kubePaths...)
	raw.Experiments = append(raw.Experiments, kubeInfos...)
	r := &kubeRun{o: o, raw: raw, cli: CLI{Bin: o.Bin, Cluster: state.RandomName("kb", 4)}, reps: o.Reps}
	raw.Setup.KubeCluster = r.cli.Cluster
	fmt.Fprintf(o.Log, "bench: Kubernetes on cluster %s (2 nodes)\n", r.cli.Cluster)
	if _, err := r.cli.run(ctx, "cluster", "up", "--hosts", "2", "--no-agents"); err != nil {
		return err
	}
	defer func() { err = joinErr(err, r.cli.Down(context.Background())) }()
	if r.kc, err = kubelab.Up(ctx, r.cli.Cluster, kubelab.Options{Pause: pause}); err != nil {
		return err
	}
	defer r.kc.Close()
	dir, err := os.MkdirTemp("", "ffbench-kube-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := r.kc.BuildRedisImage(dir); err != nil {
		return err
	}
	if _, err := r.kc.Kubectl(ctx, "create", "namespace", kubeNS); err != nil {
		return err
	}
	if err := r.podStarts(ctx, pathKubeBridgeCNI); err != nil {
		return err
	}
	took, err := r.kc.InstallFreeFlow(ctx, image)
	if err != nil {
		return err
	}
	r.add(Sample{Experiment: "kube-install", Case: "2 nodes", Path: pathKubeFFCNI, Rep: 1,
		Command: "kubectl apply -f deploy/; kubectl -n freeflow-system rollout status ds/freeflow; kubectl wait nodes Ready",
		Metrics: map[string]float64{"s": took.Seconds()}})
	if err := r.kc.SetDefaultRuntime("freeflow"); err != nil {
		return err
	}
	if err := r.podStarts(ctx, pathKubeFFCNI); err != nil {
		return err
	}
	return r.redis(ctx)
}

func (r *kubeRun) add(s Sample) {
	r.raw.Samples = append(r.raw.Samples, s)
	v := ""
	for k, m := range s.Metrics {
		v += fmt.Sprintf(" %s=%s", k, formatValue(m))
	}
	if s.Error != "" {
		v = " failed: " + firstLine(s.Error)
	}
	fmt.Fprintf(r.o.Log, "bench: %s %s %s rep %d:%s\n", s.Experiment, s.Case, s.Path, s.Rep, v)
}

// podsPerRound is how many pods each round of pod starts times, the nodes
// in turn.
const podsPerRound = 8

// relistPeriod is the kubelet's: it sees a started container at its next
// relist, so a pod's start latency includes up to one period. A pod
// applied at once when the previous one is Running would fall at the same
// point of that period each time (one node's relists set the pace of the
// other's), and a path's median would measure the phase, not the path:
// each pod is applied after a random pause within one period.
const relistPeriod = time.Second

// podStarts starts podsPerRound pods per repetition, each timed from its
// apply to phase Running, then deletes them all, waiting until their
// sandboxes are gone (their addresses released) before anything else
// runs. A first round is a warm-up: a node's first pod of an image also
// unpacks it.
func (r *kubeRun) podStarts(ctx context.Context, path string) error {
	for rep := 0; rep <= r.reps; rep++ {
		for i := range podsPerRound {
			node := r.kc.Nodes[i%len(r.kc.Nodes)]
			name := fmt.Sprintf("start-%d-%d", rep, i)
			s := Sample{Experiment: "kube-pod-start", Case: "1 pod", Path: path, Rep: rep, Warmup: rep == 0,
				Command: "sleep rand(1s); kubectl apply -f pod.yaml; kubectl wait --for=jsonpath={.status.phase}=Running pod/" + name}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(rand.N(relistPeriod)):
			}
			if err := r.kc.Apply(ctx, kubelab.ShellPod(kubeNS, name, node, false, "exec sleep 3600")); err != nil {
				return err
			}
			took, err := r.kc.WaitPodPhase(ctx, kubeNS, name, "Running", kubeTimeout)
			if err != nil {
				s.Error = err.Error()
			} else {
				s.Metrics = map[string]float64{"s": took.Seconds()}
			}
			r.add(s)
		}
	}
	_, err := r.kc.Kubectl(ctx, "-n", kubeNS, "delete", "pods", "--all", "--wait=true", "--timeout=120s")
	return err
}

// redisCase is where a redis client runs, and on which paths.
type redisCase struct {
	name, node  string
	off, freeOn string // the opted-out and the FreeFlow path
}

// redis runs redis-benchmark from a Job pod against a redis pod on the
// first node, opted out and not, from the same node and the other,
// interleaved: each repetition runs every case on every path in turn.
func (r *kubeRun) redis(ctx context.Context) error {
	server := r.kc.Nodes[0]
	ips := map[bool]string{}
	for _, off := range []bool{true, false} {
		name := map[bool]string{true: "redis-off", false: "redis-ff"}[off]
		if err := r.kc.Apply(ctx, kubelab.RedisServer(kubeNS, name, server, off)); err != nil {
			return err
		}
		if _, err := r.kc.Kubectl(ctx, "-n", kubeNS, "rollout", "status", "deploy/"+name, "--timeout=120s"); err != nil {
			return err
		}
		out, err := r.kc.Kubectl(ctx, "-n", kubeNS, "get", "pods", "-l", "app="+name, "-o", "jsonpath={.items[0].status.podIP}")
		if err != nil {
			return err
		}
		ips[off] = strings.TrimSpace(out)
	}
	r.raw.Setup.Servers = append(r.raw.Setup.Servers, "kube-redis: redis-server --port 6379 --save '' --appendonly no, one pod of a Deployment on "+server)
	cases := []redisCase{{"same node", server, pathKubePodNet, pathKubeFreeFlow}, {"cross node", r.kc.Nodes[1], pathKubePodNetX, pathKubeFreeFlowX}}
	for rep := 1; rep <= r.reps; rep++ {
		for _, c := range cases {
			for _, off := range []bool{true, false} {
				path := map[bool]string{true: c.off, false: c.freeOn}[off]
				if err := r.redisJob(ctx, rep, c, path, off, ips[off]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// redisClient is the Job's command: redis-benchmark's CSV.
const redisClient = "exec redis-benchmark -h $0 -p 6379 -c 20 -t set,get -n 100000 --csv"

// redisJob runs one redis-benchmark Job and records its sample. A
// FreeFlow path whose connections the agents did not put on the path it
// expects is marked suspect.
func (r *kubeRun) redisJob(ctx context.Context, rep int, c redisCase, path string, off bool, ip string) error {
	name := fmt.Sprintf("rb-%d-%s", rep, path)
	s := Sample{Experiment: "kube-redis", Case: "20 conns " + c.name, Path: path, Rep: rep,
		Command: fmt.Sprintf("Job on %s: %s", c.node, strings.Replace(redisClient, "$0", ip, 1))}
	want := pathExpect(path)
	var before connCounters
	if want != "" {
		var err error
		if before, err = readCounters(ctx, r.cli); err != nil {
			return err
		}
	}
	if err := r.kc.Apply(ctx, kubelab.ShellJob(kubeNS, name, c.node, off, redisClient, ip)); err != nil {
		return err
	}
	_, err := r.kc.Kubectl(ctx, "-n", kubeNS, "wait", "job/"+name, "--for=condition=complete", fmt.Sprintf("--timeout=%ds", int(kubeTimeout.Seconds())))
	out, lerr := r.kc.Kubectl(ctx, "-n", kubeNS, "logs", "job/"+name)
	switch {
	case err != nil:
		s.Error, s.Output = err.Error(), out
	case lerr != nil:
		s.Error = lerr.Error()
	default:
		if s.Metrics, err = ParseRedisBenchmark(out); err != nil {
			s.Error, s.Output = err.Error(), out
		}
	}
	if want != "" && s.Error == "" {
		after, err := readCounters(ctx, r.cli)
		if err != nil {
			return err
		}
		if g := gained(before, after); g.Paths[want] == 0 || g.Fallback > 0 {
			s.Suspect = append(s.Suspect, fmt.Sprintf("expected %s: the agents put its connection ends on %v and %d on the overlay (%s)",
				want, g.Paths, g.Fallback, reasonList(g.Reasons)))
		}
	}
	r.add(s)
	_, err = r.kc.Kubectl(ctx, "-n", kubeNS, "delete", "job", name, "--wait=true", "--cascade=foreground", "--timeout=60s")
	return err
}

// pathExpect is the path a Kubernetes path's connections must take ("" =
// not checked).
func pathExpect(name string) string {
	for _, p := range kubePaths {
		if p.Name == name {
			return p.Expect
		}
	}
	return ""
}
