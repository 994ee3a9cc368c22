package e2e

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"

	"github.com/freeflow-net/freeflow/internal/cluster"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// clusterPIDs returns the managed etcd's pid and each host's agent pid, as
// the cluster's state records them.
func clusterPIDs(t *testing.T, c *testenv.Cluster) (etcd int, agents map[string]int) {
	t.Helper()
	cl, err := state.NewLayout(c.Name).LoadCluster()
	must(t, err, "load the cluster's state")
	if !cl.Etcd.Managed || cl.Etcd.PID <= 0 { // a pid to signal, never 0 or -1
		t.Fatalf("cluster %s has no managed etcd: %+v", c.Name, cl.Etcd)
	}
	agents = map[string]int{}
	for _, h := range cl.Hosts {
		agents[h.Name] = h.AgentPID
	}
	return cl.Etcd.PID, agents
}

// waitHealthy waits until `freeflow status` shows etcd healthy and every
// agent answering and connected to the directory.
func waitHealthy(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	var r cluster.Report
	testenv.WaitFor(t, "status to show etcd healthy and every agent connected", func() bool {
		must(t, json.Unmarshal([]byte(c.MustFF(t, "status", "-o", "json")), &r), "parse status -o json")
		for _, h := range r.Hosts {
			if h.Agent == nil || !h.Agent.Directory.Connected {
				return false
			}
		}
		return r.Etcd.Healthy
	})
}

// upAgain runs `cluster up` with the flags the cluster was made with and
// fails the test unless it succeeds.
func upAgain(t *testing.T, c *testenv.Cluster, hosts int) {
	t.Helper()
	c.MustFF(t, "cluster", "up", "--hosts", fmt.Sprint(hosts))
}

// TestClusterUpRevivesDeadEtcdAndAgent: `cluster up` on a cluster whose
// managed etcd, then one agent, were SIGKILLed starts exactly what died:
// status shows the directory healthy and every agent connected, the other
// processes keep their pids, a connection open across the repair keeps
// working, and a new container reaches an old one across hosts. A repeated
// `up` changes nothing.
func TestClusterUpRevivesDeadEtcdAndAgent(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	c.StartDetached(t, "h2", "cli", nil, "python3", "-c", stepClientPy, "srv", "7001")
	waitLog(t, c, "cli", "step1 OK")

	etcd, agents := clusterPIDs(t, c)
	must(t, syscall.Kill(etcd, syscall.SIGKILL), "kill etcd")
	upAgain(t, c, 2)
	waitHealthy(t, c)
	newEtcd, nowAgents := clusterPIDs(t, c)
	if newEtcd == etcd || fmt.Sprint(nowAgents) != fmt.Sprint(agents) {
		t.Fatalf("up after etcd died: etcd pid %d -> %d, agents %v -> %v; want a new etcd and the same agents", etcd, newEtcd, agents, nowAgents)
	}

	must(t, syscall.Kill(agents["h2"], syscall.SIGKILL), "kill the agent on h2")
	upAgain(t, c, 2)
	waitHealthy(t, c)
	etcdNow, nowAgents := clusterPIDs(t, c)
	if etcdNow != newEtcd || nowAgents["h1"] != agents["h1"] || nowAgents["h2"] == agents["h2"] {
		t.Fatalf("up after h2's agent died: etcd pid %d -> %d, agents %v -> %v; want only h2's agent new", newEtcd, etcdNow, agents, nowAgents)
	}

	upAgain(t, c, 2)
	if e, a := clusterPIDs(t, c); e != etcdNow || fmt.Sprint(a) != fmt.Sprint(nowAgents) {
		t.Fatalf("a repeated up changed a healthy cluster: etcd %d -> %d, agents %v -> %v", etcdNow, e, nowAgents, a)
	}

	c.MustFF(t, "exec", "cli", "--", "kill", "-USR1", "1")
	waitLog(t, c, "cli", "step2-old OK")
	waitLog(t, c, "cli", "step2-new OK")
	out := c.MustFF(t, "run", "--host", "h2", "--name", "late", "--rm", "--", "python3", "-c", echoPy, "send", "srv", "7001", fmt.Sprint(echoBytes))
	echoOK(t, out, echoBytes)
}
