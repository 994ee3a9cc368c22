package e2e

import (
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// lateConnectPy is a client that observes its non-blocking connects late,
// as the JVM's HttpClient does (late HOST PORT COUNT GREET: COUNT
// connections, 20 at a time; each connects non-blocking, sleeps 100 ms,
// waits in epoll for EPOLLOUT, then with GREET for EPOLLIN and echoPy's
// greeting, then checks an echo).
const lateConnectPy = `
import os, select, socket, sys, threading, time
host, port, count, greet = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
ok = []
def one():
    c = socket.socket(); c.setblocking(False)
    c.connect_ex((host, port))
    time.sleep(0.1)
    ep = select.epoll(); ep.register(c.fileno(), select.EPOLLOUT)
    assert ep.poll(5), "connect not complete after 5 s"
    if greet:
        ep.modify(c.fileno(), select.EPOLLIN)
        assert ep.poll(5), "no greeting after 5 s"
        c.setblocking(True)
        assert c.recv(5, socket.MSG_WAITALL) == b"hello", "greeting lost"
    c.setblocking(True)
    data = os.urandom(1000); c.sendall(data); c.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = c.recv(65536)
        if not b: break
        got += b
    assert got == data, "sent %d bytes, got %d back" % (len(data), len(got))
    ep.close(); c.close(); ok.append(1)
def batch(n):
    for _ in range(n): one()
ts = [threading.Thread(target=batch, args=(count // 20,)) for _ in range(20)]
for t in ts: t.start()
for t in ts: t.join()
print("OK", len(ok))
`

// TestLateObservingClientFastPath: a client that looks at its
// non-blocking connect 100 ms after making it (later than the agent's
// 45 ms peer wait) gets the fast path on every one of 1000 connections on
// one host (shm), 99% across hosts (host-tcp), also when the server speaks
// first (the greeting written on the server's channel before the client
// looked reaches it, epoll readiness included). The client's library
// decided each connect when it completed (lib/src/setup/settler.c), not when
// the program looked.
func TestLateObservingClientFastPath(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "plain", nil, "python3", "-c", echoPy, "serve", "7001")
	c.StartDetached(t, "h1", "greet", nil, "python3", "-c", echoPy, "serve", "7002", "greet")
	c.WaitListening(t, "plain", 7001)
	c.WaitListening(t, "greet", 7002)
	for _, tc := range []struct{ host, srv, port, greet, path string }{
		{"h1", "plain", "7001", "0", "shm"},
		{"h1", "greet", "7002", "1", "shm"},
		{"h2", "plain", "7001", "0", "host-tcp"},
		{"h2", "greet", "7002", "1", "host-tcp"},
	} {
		t.Run(tc.srv+"-from-"+tc.host, func(t *testing.T) {
			paths := watchPaths(t, c, "h1", tc.host)
			out := c.MustFF(t, "run", "--host", tc.host, "--name", testenv.RandomName("l", 4), "--rm", "--",
				"python3", "-c", lateConnectPy, "late", tc.srv, tc.port, "1000", tc.greet)
			if strings.TrimSpace(out) != "OK 1000" {
				t.Fatalf("late client: %q, want OK 1000", out)
			}
			if tc.host == "h1" {
				paths.expect(t, tc.path, "")
				return
			}
			// Across hosts a few of 1000 still wait out peer-timeout (0.4 to
			// 0.5% here: an ACCEPT read before its OFFER, on a loaded
			// machine); both ends then agree on the overlay. 99% is the
			// bound on a loaded machine.
			for _, h := range []string{"h1", "h2"} {
				got := pathDeltas(paths.before[h], counters(t, c, h))
				if got["host-tcp"] < 990 || got["shm"]+got["unix"] != 0 {
					t.Errorf("%s's agent: %v; want host-tcp for at least 99%% of the 1000 connections", h, got)
				}
			}
		})
	}
}
