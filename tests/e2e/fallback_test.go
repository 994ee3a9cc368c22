package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// echoPy is an echo server and a checking client in python3, a
// library-enabled (dynamically linked) program:
//   - serve PORT [greet] [accept-after=MS] [dual]: greet sends "hello"
//     first on each connection; accept-after calls accept() MS after
//     select() says a connection is queued (a busy event loop, a server
//     that sleeps between accepts); dual listens on a dual-stack [::]
//     socket, as Node.js does;
//   - send HOST PORT N [COUNT]: COUNT connections (1), one after another
//     from one process, each sending N random bytes and checking the echo.
const echoPy = `
import os, select, socket, sys, threading, time
if sys.argv[1] == "serve":
    opts = sys.argv[3:]
    greet, dual = "greet" in opts, "dual" in opts
    delay = [int(o.split("=")[1]) / 1000 for o in opts if o.startswith("accept-after=")]
    s = socket.socket(socket.AF_INET6 if dual else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if dual else "0.0.0.0", int(sys.argv[2]))); s.listen(256)
    def echo(c):
        if greet: c.sendall(b"hello")
        while True:
            b = c.recv(65536)
            if not b: break
            c.sendall(b)
        c.close()
    while True:
        if delay:
            select.select([s], [], [])
            time.sleep(delay[0])
        c, _ = s.accept(); threading.Thread(target=echo, args=(c,)).start()
else:
    n, count = int(sys.argv[4]), int((sys.argv[5:] or ["1"])[0])
    for i in range(count):
        data = os.urandom(n)
        c = socket.create_connection((sys.argv[2], int(sys.argv[3])))
        threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR))).start()
        got = b""
        while True:
            b = c.recv(65536)
            if not b: break
            got += b
        assert got == data, "connection %d: sent %d bytes, got %d back, not the same" % (i, n, len(got))
        c.close()
    print("OK", n)
`

// staticEcho builds tests/e2e/testdata/echo as a static binary.
func staticEcho(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir, "./testdata/echo")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build static echo: %v\n%s", err, out)
	}
	return filepath.Join(dir, "echo")
}

// echoOK fails the test unless out is the client's "OK <n>".
func echoOK(t *testing.T, out string, n int) {
	t.Helper()
	if strings.TrimSpace(out) != fmt.Sprintf("OK %d", n) {
		t.Fatalf("echo client: %q, want OK %d", out, n)
	}
}

const echoBytes = 4 << 20

// TestStaticGoBinaryPeers: a static Go binary (which the library cannot
// enter) works as server and as client of library-enabled programs, same
// host and cross host, with every connection on the overlay.
func TestStaticGoBinaryPeers(t *testing.T) {
	c := newCluster(t, 2)
	bin := staticEcho(t)
	vol := []string{"-v", bin + ":/run/bin/echo:ro"}
	c.StartDetached(t, "h1", "gosrv", vol, "/run/bin/echo", "serve", "7000")
	c.StartDetached(t, "h1", "pysrv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "gosrv", 7000)
	c.WaitListening(t, "pysrv", 7001)
	for _, host := range []string{"h1", "h2"} {
		t.Run("python-client-go-server-"+host, func(t *testing.T) {
			paths := watchPaths(t, c, host)
			echoOK(t, c.MustFF(t, "run", "--host", host, "--name", testenv.RandomName("p", 4), "--rm", "--",
				"python3", "-c", echoPy, "send", "gosrv", "7000", fmt.Sprint(echoBytes)), echoBytes)
			paths.expect(t, "overlay", "listener-not-freeflow")
		})
		t.Run("go-client-python-server-"+host, func(t *testing.T) {
			paths := watchPaths(t, c, "h1")
			echoOK(t, c.MustFF(t, append(append([]string{"run", "--host", host, "--name", testenv.RandomName("g", 4), "--rm"}, vol...),
				"--", "/run/bin/echo", "send", "pysrv", "7001", fmt.Sprint(echoBytes))...), echoBytes)
			// The server's library saw no mark in the SYN (PROTOCOL.md, "The SYN mark").
			paths.expect(t, "overlay", "peer-no-library")
		})
	}
}

// TestStaticClientCostsAcceptorNoWait: 1000 connections from a static
// binary (no library) to a library-enabled server on the same host: the
// server's library tells from each SYN that the client has no library and
// asks its agent nothing (it used to wait 45 ms for a CONNECT that could
// not come: peer-timeout); each connection is counted as overlay
// peer-no-library.
func TestStaticClientCostsAcceptorNoWait(t *testing.T) {
	c := newCluster(t, 1)
	bin := staticEcho(t)
	c.StartDetached(t, "h1", "pysrv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "pysrv", 7001)
	paths := watchPaths(t, c, "h1")
	out := c.MustFF(t, "run", "--host", "h1", "--name", testenv.RandomName("g", 4), "--rm",
		"-v", bin+":/run/bin/echo:ro", "--", "/run/bin/echo", "repeat", "pysrv", "7001", "64", "1000")
	if n := strings.Count(out, "OK 64"); n != 1000 {
		t.Fatalf("static client: %d of 1000 connections echoed intact:\n%s", n, out)
	}
	paths.expect(t, "overlay", "peer-no-library")
	if got := pathDeltas(paths.before["h1"], counters(t, c, "h1"))["overlay"]; got != 1000 {
		t.Errorf("the server's agent counts %d overlay ends, want 1000 (one per connection)", got)
	}
}

// TestDifferentTenantsStayOnOverlay: containers of tenants that do not
// trust each other talk over the overlay, intact.
func TestDifferentTenantsStayOnOverlay(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "redsrv", []string{"--tenant", "red"}, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "redsrv", 7001)
	for _, host := range []string{"h1", "h2"} {
		t.Run(host, func(t *testing.T) {
			paths := watchPaths(t, c, host)
			echoOK(t, c.MustFF(t, "run", "--host", host, "--name", testenv.RandomName("b", 4), "--tenant", "blue", "--rm", "--",
				"python3", "-c", echoPy, "send", "redsrv", "7001", fmt.Sprint(echoBytes)), echoBytes)
			paths.expect(t, "overlay", "tenant-differs")
		})
	}
}

// TestHostProcessStaysOnOverlay: a process in a host's namespace, outside
// any container, talks to a container over the overlay, intact.
func TestHostProcessStaysOnOverlay(t *testing.T) {
	c := newCluster(t, 1)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	ip := containerIP(t, c, "srv")
	paths := watchPaths(t, c, "h1")
	cmd := netns.Command(state.NetNSPath(state.NewLayout(c.Name).HostNetNS("h1")), "python3", "-c", echoPy, "send", ip, "7001", fmt.Sprint(echoBytes))
	out, err := cmd.CombinedOutput()
	must(t, err, "client in h1's namespace: %s", out)
	echoOK(t, string(out), echoBytes)
	// The server's library saw no mark in the SYN (PROTOCOL.md, "The SYN mark").
	paths.expect(t, "overlay", "peer-no-library")
}

// containerIP returns the overlay IP of container name.
func containerIP(t *testing.T, c *testenv.Cluster, name string) string {
	t.Helper()
	for _, line := range strings.Split(c.MustFF(t, "ps"), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == name {
			return f[2]
		}
	}
	t.Fatalf("container %s not in `freeflow ps`", name)
	return ""
}
