package e2e

import (
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// slowAcceptPy is a server whose accept() comes a while after each
// connection is queued, as a busy event loop's or one that sleeps
// between accepts (serve PORT DELAY_MS [dual]: each accept DELAY_MS after
// select says one is there; it echoes each connection; dual: on a
// dual-stack [::] socket, as Node.js listens), and a client (client
// HOST PORT COUNT: COUNT connections one after another, from one process,
// so that later ones may go over a link; each sends 64 KiB of random
// bytes and checks the echo).
const slowAcceptPy = `
import os, select, socket, sys, threading, time
if sys.argv[1] == "serve":
    dual = sys.argv[4:] == ["dual"]
    s = socket.socket(socket.AF_INET6 if dual else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if dual else "0.0.0.0", int(sys.argv[2]))); s.listen(64)
    delay = int(sys.argv[3]) / 1000
    def echo(c):
        while True:
            b = c.recv(65536)
            if not b: break
            c.sendall(b)
        c.close()
    while True:
        select.select([s], [], [])
        time.sleep(delay)
        c, _ = s.accept(); threading.Thread(target=echo, args=(c,)).start()
else:
    host, port, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    def send(c, data):
        c.sendall(data); c.shutdown(socket.SHUT_WR)
    for i in range(count):
        data = os.urandom(65536)
        c = socket.create_connection((host, port))
        threading.Thread(target=send, args=(c, data)).start()
        got = b""
        while True:
            b = c.recv(65536)
            if not b: break
            got += b
        assert got == data, "connection %d: sent %d bytes, got %d back, not the same" % (i, len(data), len(got))
        c.close()
    print("OK", count)
`

// TestSlowAcceptorServerOnShm: a server that calls accept() 100 ms
// after each connection is queued, later than the agent's 45 ms wait for
// an ACCEPT, and a client in another container on the same host: every
// one of 20 connections gets shm at both ends (none falls to the overlay
// with peer-timeout), every byte intact. The agent saw each connection
// still in the accept queue and waited on (internal/agent/acceptq.go).
// Across hosts, with the server 80 ms late (past the acceptor's agent's
// 40 ms, inside the connector's agent's 150 ms budget), all on host-tcp.
// A dual-stack listener ([::], as Node.js listens) holds the IPv4
// client's connection as a v4-mapped IPv6 socket: found in its queue all
// the same, all on shm.
func TestSlowAcceptorServerOnShm(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "slow", nil, "python3", "-c", slowAcceptPy, "serve", "7001", "100")
	c.StartDetached(t, "h1", "slow80", nil, "python3", "-c", slowAcceptPy, "serve", "7002", "80")
	c.StartDetached(t, "h1", "slowdual", nil, "python3", "-c", slowAcceptPy, "serve", "7003", "100", "dual")
	c.WaitListening(t, "slow", 7001)
	c.WaitListening(t, "slow80", 7002)
	c.WaitListening(t, "slowdual", 7003)
	for _, tc := range []struct{ host, srv, port, path string }{
		{"h1", "slow", "7001", "shm"},
		{"h2", "slow80", "7002", "host-tcp"},
		{"h1", "slowdual", "7003", "shm"},
	} {
		t.Run(tc.srv+"-from-"+tc.host, func(t *testing.T) {
			hosts := []string{"h1"}
			if tc.host != "h1" {
				hosts = append(hosts, tc.host)
			}
			paths := watchPaths(t, c, hosts...)
			out := c.MustFF(t, "run", "--host", tc.host, "--name", testenv.RandomName("c", 4), "--rm", "--",
				"python3", "-c", slowAcceptPy, "client", tc.srv, tc.port, "20")
			if strings.TrimSpace(out) != "OK 20" {
				t.Fatalf("client: %q, want OK 20", out)
			}
			paths.expect(t, tc.path, "")
			ends := uint64(0)
			for _, h := range hosts {
				ends += pathDeltas(paths.before[h], counters(t, c, h))[tc.path]
			}
			if ends != 40 {
				t.Errorf("%d connection ends on %s; want both ends of all 20", ends, tc.path)
			}
		})
	}
}
