package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
	if why := testenv.Missing("sockperf", "iperf3", "/usr/bin/python3", "taskset", "nsenter", "ss", "sysctl", "ip"); why != "" {
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
// (the first case) in a private namespace with cubic set there, and checks
// the parsed figures: the commands, parsers and congestion-control setting
// the bench relies on, without a cluster. Applications need their Debian
// packages (scripts/install-deps.sh); the fabric cap needs a cluster.
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
	env := toolEnv{Script: string(connrateScript), CC: "cubic"}
	for _, e := range Experiments {
		t.Run(e.Info.Name, func(t *testing.T) {
			if e.Shaped {
				t.Skip("the fabric cap needs a cluster: see TestQuickBenchOnRealCluster and the full run")
			}
			if why := testenv.Missing(appTools[e.Info.Name]...); why != "" {
				t.Skip(why + " (scripts/install-deps.sh installs it)")
			}
			startServer(t, ctx, ns, e.Server(env))
			argv := e.Client(env, "127.0.0.1", e.Cases(false)[0], 1)
			out, err := runCmd(ctx, netns.Command(ns, argv[0], argv[1:]...))
			if err != nil {
				t.Fatal(err)
			}
			m, suspect, err := parseAll(env, e, [][]byte{out})
			if err != nil {
				t.Fatal(err)
			}
			for _, mi := range e.Info.Metrics {
				if mi.Headline && mi.Key != mCPUPerGB && m[mi.Key] <= 0 {
					t.Errorf("%s = %v", mi.Key, m[mi.Key])
				}
			}
			for _, s := range suspect {
				// Loopback may retransmit now and then; a wrong CC may not.
				if strings.HasPrefix(s, "congestion control") {
					t.Errorf("suspect: %s", s)
				}
			}
		})
	}
}

// appTools are the programs an application experiment needs beyond the
// network tools.
var appTools = map[string][]string{
	"redis":     {"redis-server", "redis-benchmark"},
	"nginx":     {"nginx", "wrk"},
	"memcached": {"memcached", "memcaslap"},
	"pgbench":   {"pgbench", "setpriv", postgresBin() + "/postgres"},
}

// startServer runs srv in ns the way a host-namespace site does, with $D a
// directory the postgres user can reach, and waits until it listens.
func startServer(t *testing.T, ctx context.Context, ns string, srv Server) {
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
}
