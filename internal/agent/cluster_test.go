package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// A real two-host cluster (freeflow cluster up, run, conns, agent stop):
// Go askers inside two containers' network namespaces play the libraries
// of a cross-host connection; the agents broker it through the real
// fabric.
func TestCrossHostOnRealCluster(t *testing.T) {
	if why := testenv.Missing("crun", "ip", "nsenter", "unshare", "etcd", "make", "cc", "/usr/lib/cni/bridge", "setpriv"); why != "" {
		t.Skip(why)
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	c, err := testenv.Up(bin, "tb", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	l := state.NewLayout(c.Name)
	c.MustFF(t, "run", "--host", "h1", "--name", "c1", "-d", "--", "sleep", "3600")
	c.MustFF(t, "run", "--host", "h2", "--name", "c2", "-d", "--", "sleep", "3600")
	c.MustFF(t, "run", "--host", "h2", "--name", "plain", "--no-freeflow", "-d", "--", "sleep", "3600")
	checkPreload(t, c)
	ips := containerIPs(t, c)
	cl, err := l.LoadCluster()
	if err != nil {
		t.Fatal(err)
	}
	fab1, fab2 := cl.Hosts[0].FabricIP, cl.Hosts[1].FabricIP
	waitFor(t, "both agents know both hosts and every container", func() bool {
		st := map[string]agentapi.Status{}
		for _, h := range []string{"h1", "h2"} {
			a, err := agentapi.DialAdmin(l.AdminSocket(h))
			if err != nil {
				return false
			}
			st[h], err = a.Status(ctxT(t))
			a.Close()
			if err != nil {
				return false
			}
		}
		return st["h1"].Containers == 3 && st["h2"].Containers == 3
	})

	srv, cli := ips["c2"]+":5201", ips["c1"]+":40000"
	con, acc := askAcross(t, c, askSpec{Sock: l.AgentSocket("h1"), Ask: "connect", Local: cli, Remote: srv},
		&askSpec{Sock: l.AgentSocket("h2"), Listen: "0.0.0.0:5201", Ask: "accept", Local: srv, Remote: cli})
	if con.Path != "host-tcp" || acc.Path != "host-tcp" || con.Data != "ok" || acc.Data != "ok" {
		t.Fatalf("connector %+v, acceptor %+v; want host-tcp with the bytes through", con, acc)
	}
	// The channel is a kernel TCP connection between the fabric addresses.
	if !strings.HasPrefix(con.SockName, fab1+":") || con.PeerName != fmt.Sprintf("%s:%d", fab2, DefaultBrokerPort) ||
		acc.SockName != con.PeerName || acc.PeerName != con.SockName {
		t.Errorf("connector %s -> %s, acceptor %s -> %s; want %s -> %s:%d", con.SockName, con.PeerName, acc.SockName, acc.PeerName, fab1, fab2, DefaultBrokerPort)
	}

	// A peer without the library: overlay at once, the same on both ends.
	plainSrv := ips["plain"] + ":80"
	con, _ = askAcross(t, c, askSpec{Sock: l.AgentSocket("h1"), Ask: "connect", Local: ips["c1"] + ":40001", Remote: plainSrv}, nil)
	if con.Path != "overlay" || con.Reason != reasonPeerNoLib {
		t.Errorf("connect to a --no-freeflow container: %+v", con)
	}

	// The acceptor's agent stopped: overlay, agent-unreachable, at once.
	c.MustFF(t, "agent", "stop", "--host", "h2")
	start := time.Now()
	con, _ = askAcross(t, c, askSpec{Sock: l.AgentSocket("h1"), Ask: "connect", Local: ips["c1"] + ":40002", Remote: srv}, nil)
	if con.Path != "overlay" || con.Reason != reasonUnreachable || time.Since(start) > 5*time.Second {
		t.Errorf("with h2's agent stopped: %+v", con)
	}
}

// askAcross runs the connector in c1's namespace and, if acc is not nil,
// the acceptor in c2's, both asContainer (the agents run with the fabric
// guard), and returns their results; while both still run,
// `freeflow conns` must list each end on its host.
func askAcross(t *testing.T, c *testenv.Cluster, con askSpec, acc *askSpec) (askResult, askResult) {
	t.Helper()
	l := state.NewLayout(c.Name)
	if acc == nil {
		a := startAskerVia(t, asContainer(l.ContainerNetNS("c1")), con)
		a.goAhead()
		r := a.result(t)
		a.finish()
		return r, askResult{}
	}
	ac, aa, rc, ra := askPairVia(t, asContainer(l.ContainerNetNS("c1")), asContainer(l.ContainerNetNS("c2")), con, *acc)
	defer ac.finish()
	defer aa.finish()
	checkListed(t, c, "h1", con.Local, con.Remote, rc.Path)
	checkListed(t, c, "h2", acc.Local, acc.Remote, ra.Path)
	return rc, ra
}

// checkListed checks host's `freeflow conns -o json` has exactly one entry
// for local, with exactly the documented fields.
func checkListed(t *testing.T, c *testenv.Cluster, host, local, remote, path string) {
	t.Helper()
	var found []map[string]string
	for _, e := range hostConnsJSON(t, c, host) {
		if e["local"] == local {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("conns on %s: %d entries for %s, want 1", host, len(found), local)
	}
	e := found[0]
	var keys []string
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "local,local_container,path,reason,remote,remote_container" {
		t.Errorf("conns -o json fields: %v", keys)
	}
	if e["remote"] != remote || e["path"] != path || e["local_container"] == "" || e["remote_container"] == "" {
		t.Errorf("conns on %s: %v; want %s -> %s on %s", host, e, local, remote, path)
	}
}

func hostConnsJSON(t *testing.T, c *testenv.Cluster, host string) []map[string]string {
	t.Helper()
	var out []map[string]string
	if err := json.Unmarshal([]byte(c.MustFF(t, "conns", "--host", host, "-o", "json")), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPreload: FreeFlow containers preload the library, --no-freeflow
// ones do not, and `freeflow exec` keeps it.
func checkPreload(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	probe := `echo "$LD_PRELOAD"; test -r /run/freeflow-lib/libfreeflow.so && echo readable; grep -c libfreeflow /proc/self/maps`
	if out := c.MustFF(t, "exec", "c1", "--", "sh", "-c", probe); !strings.Contains(out, "/run/freeflow-lib/libfreeflow.so\nreadable\n") {
		t.Errorf("exec in a FreeFlow container:\n%s", out)
	}
	if out := c.FF(t, "exec", "plain", "--", "sh", "-c", probe).Stdout; strings.Contains(out, "readable") || strings.TrimSpace(strings.Split(out, "\n")[0]) != "" {
		t.Errorf("exec in a --no-freeflow container:\n%s", out)
	}
}

func containerIPs(t *testing.T, c *testenv.Cluster) map[string]string {
	t.Helper()
	var list []struct{ Name, IP string }
	if err := json.Unmarshal([]byte(c.MustFF(t, "ps", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, x := range list {
		ips[x.Name] = x.IP
	}
	return ips
}
