package bench

import (
	"context"
	"os/exec"
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
// the bench relies on, without a cluster.
func TestExperimentsOnLoopback(t *testing.T) {
	needTools(t)
	ns := testNetNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
			srv := netns.Command(ns, e.Server(env)[0], e.Server(env)[1:]...)
			srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-srv.Process.Pid, syscall.SIGKILL); srv.Wait() })
			if err := waitListening(ctx, &site{Label: "test", NSPath: ns}, serverPorts([][]string{e.Server(env)})); err != nil {
				t.Fatal(err)
			}
			argv := e.Client(env, "127.0.0.1", e.Cases(false)[0], 1)
			out, err := runCmd(ctx, netns.Command(ns, argv[0], argv[1:]...))
			if err != nil {
				t.Fatal(err)
			}
			m, suspect, err := e.Parse(env, out)
			if err != nil {
				t.Fatal(err)
			}
			for _, mi := range e.Info.Metrics {
				if mi.Headline && m[mi.Key] <= 0 {
					t.Errorf("%s = %v", mi.Key, m[mi.Key])
				}
			}
			for _, s := range suspect {
				// Loopback may retransmit now and then; a wrong CC may not.
				if e.Info.Name == "throughput" && s != "" && s[0] == 'c' {
					t.Errorf("suspect: %s", s)
				}
			}
		})
	}
}
