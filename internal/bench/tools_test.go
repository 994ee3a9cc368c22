package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// needTools skips unless root and every program the bench runs exists.
func needTools(t *testing.T) {
	t.Helper()
	if why := testenv.Missing("sockperf", "iperf3", "NPtcp", "make", "cc", "/usr/bin/python3", "taskset", "nsenter", "ss", "sysctl", "ip"); why != "" {
		t.Skip(why)
	}
}

// testNetNS makes a private network namespace with loopback up.
func testNetNS(t *testing.T) string {
	t.Helper()
	name := testenv.RandomName("tb", 6)
	if err := netns.Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(name); err != nil {
			t.Error(err)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	return netns.Path(name)
}

// TestExperimentsOnLoopback runs every experiment's real server and client
// (the quick cases) in a private namespace with cubic set there, and checks
// the parsed figures: the commands, parsers and congestion-control setting
// the bench relies on, without a cluster; ffmem's experiments also over a
// Unix socket. Applications need their Debian packages
// (scripts/install-deps.sh); the fabric cap and Open MPI need a cluster.
func TestExperimentsOnLoopback(t *testing.T) {
	needTools(t)
	ns := testNetNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	used, st, err := SetCC(ctx, map[string]string{"test": ns}, "cubic")
	t.Cleanup(func() {
		if err := st.Restore(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err != nil || used["test"] != "cubic" {
		t.Fatalf("SetCC: %v %v", used, err)
	}
	env := toolEnv{Script: string(connrateScript), CC: "cubic", Tools: testTools(t)}
	for _, e := range Experiments {
		t.Run(e.Info.Name, func(t *testing.T) {
			switch {
			case e.Shaped:
				t.Skip("the fabric cap needs a cluster: see TestQuickBenchOnRealCluster and the full run")
			case e.Launcher:
				t.Skip("Open MPI between containers needs a cluster: see the full run and tests/e2e TestOpenMPI")
			case slices.Contains(e.transports(), TransportVerbs):
				t.Skip("the virtual verbs device is a FreeFlow container's: see TestParsePerftest, tests/e2e TestVerbsDebianProgramsBetweenContainers and the full run")
			}
			if why := testenv.Missing(appTools[e.Info.Name]...); why != "" {
				t.Skip(why + " (scripts/install-deps.sh installs it)")
			}
			if e.Prepare != nil {
				if err := e.Prepare(ctx, env.Tools); err != nil {
					t.Skip(err) // the bench's row says the same
				}
			}
			env := env
			if e.DefaultCC {
				env.CC = "" // the namespace has the run's, not the machine's
			}
			var dir string
			if srv := e.Server(env); srv.Port != 0 {
				dir = startServer(t, ctx, ns, srv)
			}
			for _, tr := range e.transports() {
				d := dial{Addr: "127.0.0.1", Transport: tr}
				if tr == TransportUnix {
					d.Addr = ffmemSocket(dir)
				}
				argv := e.Client(env, d, e.jobCases(false)[0], 1)
				if e.Info.Name == idle.Info.Name {
					argv[len(argv)-1] = "1" // --seconds: one is enough to see it work
				}
				out, err := runCmd(ctx, netns.Command(ns, argv[0], argv[1:]...))
				if err != nil {
					t.Fatal(err)
				}
				checkLoopbackFigures(t, env, e, out)
			}
		})
	}
}

// checkLoopbackFigures parses one client's output: every headline figure
// positive (an idle connection's CPU and a CPU per GB may be 0), and no
// congestion control other than the one set.
func checkLoopbackFigures(t *testing.T, env toolEnv, e Experiment, out []byte) {
	t.Helper()
	per := map[string]map[string]float64{}
	var suspect []string
	var err error
	if e.sweep() {
		per, suspect, err = e.ParseSweep(env, out)
	} else {
		per[""], suspect, err = parseAll(env, e, [][]byte{out})
	}
	if err != nil {
		t.Fatal(err)
	}
	for c, m := range per {
		n := 0
		for _, mi := range e.Info.Metrics {
			v, ok := m[mi.Key]
			if !mi.Headline || !ok {
				continue
			}
			n++
			if v <= 0 && mi.Key != mCPUPerGB && mi.Key != mIdleCPU {
				t.Errorf("%s %s = %v", c, mi.Key, v)
			}
		}
		if n == 0 {
			t.Errorf("%s: no headline figure in %v", c, m)
		}
	}
	for _, s := range suspect {
		// Loopback may retransmit now and then; a wrong CC may not.
		if strings.HasPrefix(s, "congestion control") {
			t.Errorf("suspect: %s", s)
		}
	}
}

// testTools builds ffmem and fills a tools directory, as a run does.
func testTools(t *testing.T) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-s", "-C", root+"/tools/ffmem").CombinedOutput(); err != nil {
		t.Fatalf("build ffmem: %v\n%s", err, out)
	}
	tl, err := makeTools(root+"/tools/ffmem/build/ffmem", "/nonexistent/freeflow", "none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.remove() })
	return tl.dir
}

// appTools are the programs an application experiment needs beyond the
// network tools.
var appTools = map[string][]string{
	"redis":             {"redis-server", "redis-benchmark"},
	"nginx":             {"nginx", "wrk"},
	"memcached":         {"memcached", "memcaslap"},
	"memcached-latency": {"memcached"},
	"pgbench":           {"pgbench", "setpriv", postgresBin() + "/postgres"},
}

// startServer runs srv in ns the way a host-namespace site does, with $D a
// directory the postgres user can reach, waits until it listens, and
// returns $D.
func startServer(t *testing.T, ctx context.Context, ns string, srv Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ffbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	cmd := netns.Command(ns, "sh", "-c", "export D="+dir+"; "+srv.Shell)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGroup(cmd, stopGrace) })
	if err := waitListening(ctx, &site{Label: "test", NSPath: ns}, []int{srv.Port}); err != nil {
		t.Fatalf("%v\nserver output:\n%s", err, log.String())
	}
	return dir
}
