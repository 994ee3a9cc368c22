package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// holdServePy serves port argv[1] with argv[2] processes sharing the
// listener (forked workers, each accepting: once two have, the agent
// grants no more links for it), echoing what each connection sends and
// closing it at EOF.
const holdServePy = `
import os, selectors, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(512)
for _ in range(int(sys.argv[2]) - 1):
    if os.fork() == 0: break
s.setblocking(False)
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
while True:
    for k, _ in sel.select():
        if k.fileobj is s:
            try: c, _ = s.accept()
            except BlockingIOError: continue
            sel.register(c, selectors.EVENT_READ)
        else:
            b = k.fileobj.recv(65536)
            if b: k.fileobj.sendall(b)
            else: sel.unregister(k.fileobj); k.fileobj.close()
`

// holdClientPy opens n connections to host:port for each argument
// host:port:n, one after the other, echoes a byte on each, prints "opened
// <count>" and holds them until SIGUSR1; then it closes them all and
// prints "closed".
const holdClientPy = `
import signal, socket, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
conns = []
for t in sys.argv[1:]:
    host, port, n = t.split(":")
    for i in range(int(n)):
        c = socket.create_connection((host, int(port)))
        c.sendall(b"x")
        if c.recv(1) != b"x": print("CORRUPT", len(conns), flush=True)
        conns.append(c)
print("opened", len(conns), flush=True)
signal.sigwait({signal.SIGUSR1})
for c in conns: c.close()
print("closed", flush=True)
signal.sigwait({signal.SIGUSR1})
`

// hostConns returns `freeflow conns --host host -o json`.
func hostConns(t *testing.T, c *testenv.Cluster, host string) []agentapi.ConnInfo {
	t.Helper()
	var all []agentapi.ConnInfo
	out := c.MustFF(t, "conns", "--host", host, "-o", "json")
	must(t, json.Unmarshal([]byte(out), &all), "parse `freeflow conns -o json`: %s", out)
	return all
}

// pathsOf counts conns by path.
func pathsOf(conns []agentapi.ConnInfo) map[string]int {
	n := map[string]int{}
	for _, e := range conns {
		n[e.Path]++
	}
	return n
}

// endsByContainer counts conns by local container, path and remote container.
func endsByContainer(conns []agentapi.ConnInfo) map[string]int {
	n := map[string]int{}
	for _, e := range conns {
		n[e.LocalContainer+" "+e.Path+" -> "+e.RemoteContainer]++
	}
	return n
}

// overlayReasons counts the overlay conns by reason.
func overlayReasons(conns []agentapi.ConnInfo) map[string]int {
	n := map[string]int{}
	for _, e := range conns {
		if e.Path == "overlay" {
			n[e.Reason]++
		}
	}
	return n
}

// TestAgentRestartListsEveryConnection: with 400 connections open on
// host h1 (shm decided over links and by the agent, unix, and host-tcp
// from h2), `freeflow conns` and `freeflow status` of a killed and
// restarted agent show the same connections and the same shm charge as
// before, at once, while the processes do nothing (the agent reads their
// ledgers itself); once the clients close them all, both go to zero.
func TestAgentRestartListsEveryConnection(t *testing.T) {
	const linked, pooled, unix, crossHost = 150, 150, 50, 50
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", holdServePy, "7001", "1")
	c.StartDetached(t, "h1", "pool", nil, "python3", "-c", holdServePy, "7002", "2")
	c.WaitListening(t, "srv", 7001)
	c.WaitListening(t, "pool", 7002)
	clients := []struct {
		host, name string
		flags      []string
		targets    []string
		n          int
	}{
		{"h1", "cli-shm", nil, []string{fmt.Sprintf("srv:7001:%d", linked), fmt.Sprintf("pool:7002:%d", pooled)}, linked + pooled},
		{"h1", "cli-unix", []string{"--no-shm"}, []string{fmt.Sprintf("srv:7001:%d", unix)}, unix},
		{"h2", "cli-far", nil, []string{fmt.Sprintf("srv:7001:%d", crossHost)}, crossHost},
	}
	for _, cl := range clients {
		c.StartDetached(t, cl.host, cl.name, cl.flags, append([]string{"python3", "-c", holdClientPy}, cl.targets...)...)
	}
	for _, cl := range clients {
		waitLog(t, c, cl.name, fmt.Sprintf("opened %d", cl.n))
	}

	// Every end is listed; on a busy machine a few may have had to take
	// the overlay (the agent lists those too, with the reason).
	before := hostConns(t, c, "h1")
	wantEnds := 2*(linked+pooled+unix) + crossHost
	n := pathsOf(before)
	if len(before) != wantEnds || n["shm"] == 0 || n["unix"] == 0 || n["host-tcp"] == 0 {
		t.Fatalf("h1's agent lists %d connection ends by path %v (overlay: %v); want %d: shm, unix and host-tcp\n%v",
			len(before), n, overlayReasons(before), wantEnds, endsByContainer(before))
	}
	t.Logf("h1's agent lists %d connection ends by path %v; overlay: %v", len(before), n, overlayReasons(before))
	charge := agentStatus(t, c, "h1").Connections.ShmBytes
	if charge == 0 {
		t.Fatalf("h1's agent charges no shm with %d shm connections open", linked+pooled)
	}

	c.MustFF(t, "agent", "stop", "--kill", "--host", "h1")
	c.MustFF(t, "agent", "start", "--host", "h1")
	// The agent answers before its directory cache has filled; it knows
	// the connections once it knows its containers.
	testenv.WaitFor(t, "h1's restarted agent to know its 4 containers", func() bool {
		return agentStatus(t, c, "h1").LocalContainers == 4
	})
	after := hostConns(t, c, "h1")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("h1's restarted agent lists %d connection ends by path %v; before the restart %d by path %v",
			len(after), pathsOf(after), len(before), pathsOf(before))
	}
	if got := agentStatus(t, c, "h1").Connections; got.ShmBytes != charge || got.Live != len(before) {
		t.Errorf("h1's restarted agent: %d live ends, %d shm bytes charged; before the restart %d, %d",
			got.Live, got.ShmBytes, len(before), charge)
	}

	for _, cl := range clients {
		c.MustFF(t, "exec", cl.name, "--", "kill", "-USR1", "1")
		waitLog(t, c, cl.name, "closed")
	}
	testenv.WaitFor(t, "the closed connections to leave h1's listing and shm charge", func() bool {
		st := agentStatus(t, c, "h1").Connections
		return len(hostConns(t, c, "h1")) == 0 && st.ShmBytes == 0 && st.Live == 0
	})
}
