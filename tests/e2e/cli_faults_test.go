package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// hostFootprint is what containers hold on a host outside their own
// directory: addresses in host-local's reservations and veths on the bridge.
type hostFootprint struct{ ips, veths []string }

// footprint reads host h's footprint from host-local's data directory (as
// the host's CNI configuration names it) and from the bridge.
func footprint(t *testing.T, c *testenv.Cluster, h string) hostFootprint {
	t.Helper()
	l := state.NewLayout(c.Name)
	b, err := os.ReadFile(cni.ConfListFile(l, h))
	must(t, err, "read the CNI configuration of %s", h)
	var list struct {
		Name    string
		Plugins []struct{ IPAM struct{ DataDir string } }
	}
	must(t, json.Unmarshal(b, &list), "parse %s", cni.ConfListFile(l, h))
	var f hostFootprint
	entries, err := os.ReadDir(filepath.Join(list.Plugins[0].IPAM.DataDir, list.Name))
	must(t, err, "list host-local's reservations on %s", h)
	for _, e := range entries {
		// Reservations are files named by the address; the rest is bookkeeping.
		if !strings.HasPrefix(e.Name(), "last_reserved_ip") && e.Name() != "lock" {
			f.ips = append(f.ips, e.Name())
		}
	}
	// JSON on stdout only: ip warns on stderr (e.g. "Peer netns reference is
	// invalid" while some namespace is going away).
	out, err := exec.Command("ip", "-j", "-n", l.HostNetNS(h), "link", "show", "master", cni.BridgeName).Output()
	must(t, err, "list the veths on %s", h)
	var links []struct{ IfName string }
	must(t, json.Unmarshal(out, &links), "parse ip -j link: %s", out)
	for _, link := range links {
		f.veths = append(f.veths, link.IfName)
	}
	return f
}

// runFailsLeavingNothing runs `freeflow run` of a new container with argv
// on host h (detached, then in the foreground) and checks that it fails
// with an error saying want and no panic, and that it left nothing: no
// reservation or veth beyond before, no network namespace, directory, crun
// state or process of the container. It returns the container's name.
func runFailsLeavingNothing(t *testing.T, c *testenv.Cluster, h string, before hostFootprint, want string, argv ...string) string {
	t.Helper()
	l := state.NewLayout(c.Name)
	name := testenv.RandomName("f", 4)
	id := c.Name + "-" + name
	for _, mode := range [][]string{{"-d"}, {"--rm"}} {
		r := c.FF(t, append(append(append([]string{"run", "--host", h, "--name", name}, mode...), "--"), argv...)...)
		if r.Code == 0 || strings.Contains(r.Stderr, "panic") || strings.Contains(r.Stderr, "goroutine") || !strings.Contains(r.Stderr, want) {
			t.Fatalf("run %v: exit %d, want a failure saying %q and no panic\nstdout: %s\nstderr: %s", mode, r.Code, want, r.Stdout, r.Stderr)
		}
		if after := footprint(t, c, h); !slices.Equal(after.ips, before.ips) || !slices.Equal(after.veths, before.veths) {
			t.Fatalf("run %v failed but left addresses or veths on %s: before %+v, after %+v", mode, h, before, after)
		}
		for _, p := range []string{state.NetNSPath(l.ContainerNetNS(name)), l.ContainerDir(name), filepath.Join(l.CrunRoot(), id)} {
			if _, err := os.Stat(p); err == nil {
				t.Fatalf("run %v failed but left %s", mode, p)
			}
		}
		if pids := pidsMentioning(id); len(pids) > 0 {
			t.Fatalf("run %v failed but left processes %v naming %s", mode, pids, id)
		}
	}
	return name
}

// rmRefusedKeepsContainer checks that `rm -f` of container name on host h
// fails saying want (the agent cannot take it out of the directory) and
// leaves it whole: running, with its address and veth.
func rmRefusedKeepsContainer(t *testing.T, c *testenv.Cluster, h, name string, before hostFootprint, want string) {
	t.Helper()
	if r := c.FF(t, "rm", "-f", name); r.Code == 0 || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "left as it is") {
		t.Fatalf("rm -f %s: exit %d, want a failure saying %q and that it is left as it is\nstderr: %s", name, r.Code, want, r.Stderr)
	}
	if after := footprint(t, c, h); !slices.Equal(after.ips, before.ips) || !slices.Equal(after.veths, before.veths) {
		t.Fatalf("a refused rm -f changed %s: before %+v, after %+v", h, before, after)
	}
	c.MustFF(t, "exec", name, "--", "true")
}

// pidsMentioning returns the processes whose command line contains s.
func pidsMentioning(s string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range dirs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

// TestRunWithAgentDownLeavesNothing: with the host's agent stopped, `run`
// fails with the plugin's clear error, undoes the half-made attachment
// (bridge and host-local had run) and leaves nothing; a container that was
// running is untouched and the host takes new containers once the agent is
// back. `rm -f` of the running container fails while the agent is down
// and leaves it whole.
func TestRunWithAgentDownLeavesNothing(t *testing.T) {
	c := newCluster(t, 1)
	runIdle(t, c, "h1", "alive", "blue")
	before := footprint(t, c, "h1")
	c.MustFF(t, "agent", "stop", "--host", "h1")
	runFailsLeavingNothing(t, c, "h1", before, "cannot reach the host agent", "sleep", "3600")
	rmRefusedKeepsContainer(t, c, "h1", "alive", before, "cannot reach the host agent")
	c.MustFF(t, "agent", "start", "--host", "h1")
	c.StartDetached(t, "h1", "after", nil, "sleep", "3600")
}

// TestRunWithEtcdDownLeavesNothing: with the managed etcd stopped (SIGSTOP:
// it hangs) and then killed, the agent cannot register the container; `run`
// fails with the agent's error naming etcd and leaves nothing, and `rm -f`
// of a running container fails and leaves it whole (its directory entry
// cannot be removed).
func TestRunWithEtcdDownLeavesNothing(t *testing.T) {
	c := newCluster(t, 1)
	runIdle(t, c, "h1", "alive", "blue")
	before := footprint(t, c, "h1")
	pid, _ := clusterPIDs(t, c)
	for _, sig := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGSTOP", syscall.SIGSTOP}, {"SIGKILL", syscall.SIGKILL}} {
		t.Run(sig.name, func(t *testing.T) {
			must(t, syscall.Kill(pid, sig.sig), "send etcd %s", sig.name)
			runFailsLeavingNothing(t, c, "h1", before, "check that etcd is running and reachable", "sleep", "3600")
			rmRefusedKeepsContainer(t, c, "h1", "alive", before, "check that etcd is running and reachable")
		})
	}
}

// TestRunFailingToStartLeavesNothing: a container whose command crun cannot
// start was attached and registered before crun ran; `run` fails with
// crun's message and undoes all of it: the agent no longer lists it, and
// nothing else is left.
func TestRunFailingToStartLeavesNothing(t *testing.T) {
	c := newCluster(t, 1)
	runIdle(t, c, "h1", "alive", "blue")
	before := footprint(t, c, "h1")
	name := runFailsLeavingNothing(t, c, "h1", before, "not found", "/nonexistent/program")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if found, err := lists(ctx, state.NewLayout(c.Name), "h1", name); err != nil || found {
		t.Fatalf("after a failed run the agent lists %s: %v, %v; want it unregistered", name, found, err)
	}
}
