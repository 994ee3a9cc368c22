package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// echoCheckPy defines echo(c, tag): send 1 MiB of random bytes on socket c while
// reading them back from the echo server, then print "<tag> OK" or "<tag>
// CORRUPT <bytes got>". It needs os and threading.
const echoCheckPy = `def echo(c, tag):
    data = os.urandom(1 << 20); got = b""
    threading.Thread(target=c.sendall, args=(data,)).start()
    while len(got) < len(data):
        b = c.recv(65536)
        if not b: break
        got += b
    print(tag, "OK" if got == data else "CORRUPT %d" % len(got), flush=True)`

// stepClientPy keeps one connection to an echo server and, at each SIGUSR1,
// does the next step, printing a line per step:
//
//	step 1 (at start): connect, echo 1 MiB, print the socket's names
//	step 2: echo 1 MiB on the same connection, then on a new one
//	step 3, step 4: echo 1 MiB on another new connection
const stepClientPy = `
import os, signal, socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
` + echoCheckPy + `
def fresh(tag):
    c = socket.create_connection((host, port)); echo(c, tag); c.close()
signal.signal(signal.SIGUSR1, lambda *a: None)
c = socket.create_connection((host, port))
print("names", c.getsockname()[0], c.getpeername()[0], flush=True)
echo(c, "step1")
signal.pause(); echo(c, "step2-old"); fresh("step2-new")
signal.pause(); fresh("step3")
signal.pause(); fresh("step4")
signal.pause()
`

// TestAgentCrashKeepsConnections: with the agents SIGKILLed, established
// fast-path connections keep working and new connections work over the
// overlay; once the agents are back, new connections get fast paths again
// (the first one to each listener may still take the overlay: a listener
// registers with a restarted agent when its process next talks to it).
// The application sees only overlay addresses throughout.
func TestAgentCrashKeepsConnections(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	srvIP := containerIP(t, c, "srv")
	for _, host := range []string{"h1", "h2"} {
		t.Run(host, func(t *testing.T) {
			want := map[string]string{"h1": "shm", "h2": "host-tcp"}[host]
			involved := map[string][]string{"h1": {"h1"}, "h2": {"h1", "h2"}}[host]
			cli := testenv.RandomName("k", 4)
			paths := watchPaths(t, c, involved...)
			c.StartDetached(t, host, cli, nil, "python3", "-c", stepClientPy, "srv", "7001")
			waitLog(t, c, cli, "step1 OK")
			paths.expect(t, want, "")
			cliIP := containerIP(t, c, cli)
			if names := logLine(t, c, cli, "names"); names != fmt.Sprintf("names %s %s", cliIP, srvIP) {
				t.Fatalf("socket names after the swap: %q, want overlay addresses %s and %s", names, cliIP, srvIP)
			}

			for _, h := range involved {
				c.MustFF(t, "agent", "stop", "--kill", "--host", h)
			}
			c.MustFF(t, "exec", cli, "--", "kill", "-USR1", "1")
			waitLog(t, c, cli, "step2-old OK")
			waitLog(t, c, cli, "step2-new OK")

			for _, h := range involved {
				c.MustFF(t, "agent", "start", "--host", h)
			}
			c.MustFF(t, "exec", cli, "--", "kill", "-USR1", "1")
			waitLog(t, c, cli, "step3 OK")
			paths = watchPaths(t, c, involved...)
			c.MustFF(t, "exec", cli, "--", "kill", "-USR1", "1")
			waitLog(t, c, cli, "step4 OK")
			paths.expect(t, want, "")
		})
	}
}

// logLine returns the first line of container name's output that starts
// with prefix, or "".
func logLine(t *testing.T, c *testenv.Cluster, name, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(c.MustFF(t, "logs", name), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// waitLog waits until container name has printed line; a CORRUPT line fails.
func waitLog(t *testing.T, c *testenv.Cluster, name, line string) {
	t.Helper()
	waitLogFor(t, c, name, line, 10*time.Second)
}

// waitLogFor is waitLog for up to d.
func waitLogFor(t *testing.T, c *testenv.Cluster, name, line string, d time.Duration) {
	t.Helper()
	testenv.WaitWithin(t, d, fmt.Sprintf("%s to print %q", name, line), func() bool {
		logs := c.MustFF(t, "logs", name)
		if strings.Contains(logs, "CORRUPT") || strings.Contains(logs, "Traceback") {
			t.Fatalf("%s failed:\n%s", name, logs)
		}
		return strings.Contains(logs, line)
	})
}
