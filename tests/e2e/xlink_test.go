package e2e

import (
	"strconv"
	"strings"
	"testing"
)

// manyEchoPy connects argv[3] times in turn to argv[1]:argv[2], echoing 1
// MiB on each connection ("conn<i> OK"), then prints "done".
const manyEchoPy = `
import os, socket, sys, threading
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
` + echoCheckPy + `
for i in range(n):
    c = socket.create_connection((host, port)); echo(c, "conn%d" % i); c.close()
print("done", flush=True)
`

// TestCrossHostConnectionsOverLink: a process that connects again and
// again to a server on another host sets up its connections after the
// first over a cross-host link, without either agent (the library says
// how each was decided, FREEFLOW_DEBUG=1), every one on host-tcp as the
// agents count them (the linked ones from the ledgers), bytes intact.
func TestCrossHostConnectionsOverLink(t *testing.T) {
	const conns = 20
	c := newCluster(t, 2)
	c.StartDetached(t, "h2", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	paths := watchPaths(t, c, "h1", "h2")
	r := runClient(t, c, "h1", []string{"--env", "FREEFLOW_DEBUG=1"}, "python3", "-c", manyEchoPy, "srv", "7001", strconv.Itoa(conns))
	if got := strings.Count(r.Stdout, " OK\n"); got != conns || !strings.Contains(r.Stdout, "done") {
		t.Fatalf("%d of %d connections echoed intact\nstdout: %s\nstderr: %s", got, conns, r.Stdout, r.Stderr)
	}
	paths.expect(t, "host-tcp", "")
	byAgent := strings.Count(r.Stderr, "swapped to host tcp, decided by the agent")
	overLink := strings.Count(r.Stderr, "swapped to host tcp, decided over a link")
	// A link lasts 2 s: on a slow machine a second grant may be needed.
	if byAgent+overLink != conns || byAgent < 1 || overLink < conns-3 {
		t.Fatalf("of %d connections, %d were decided by the agents and %d over a link; want all but the first (or few) over a link\nstderr: %s",
			conns, byAgent, overLink, r.Stderr)
	}
}
