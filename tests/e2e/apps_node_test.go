package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/freeflow-net/freeflow/internal/asyncecho"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// nodeFileServerJS is a Node.js (libuv) server (serve FILE) that answers
// each connection's first bytes with the whole of FILE, read with
// fs.readFileSync just then, and closes it: libuv closes sockets with
// syscall(SYS_close), so the file often gets the number of a connection
// closed a moment before. The client (get HOST N PAR SHA256) makes N
// connections, PAR at a time, and prints "OK N" if every body had the
// file's length and SHA-256.
const nodeFileServerJS = `
const net = require("net"), fs = require("fs"), crypto = require("crypto");
const [mode, a, b, c, want] = process.argv.slice(1);
if (mode === "serve") {
  net.createServer(s => {
    s.once("data", () => s.end(fs.readFileSync(a)));
    s.on("error", e => { console.error("server socket:", e.message); process.exit(3); });
  }).listen(7200, "0.0.0.0");
} else {
  let next = 0, ok = 0, done = 0;
  const total = +b;
  const one = () => {
    if (next >= total) return;
    next++;
    const h = crypto.createHash("sha256"), s = net.connect(7200, a);
    let n = 0;
    s.on("connect", () => s.write("GET\n"));
    s.on("data", d => { h.update(d); n += d.length; });
    s.on("error", e => console.error("client:", e.message));
    s.on("close", () => {
      const got = h.digest("hex");
      if (got === want) ok++; else console.error("body of", n, "bytes, sha256", got);
      if (++done === total) console.log("OK", ok); else one();
    });
  };
  for (let i = 0; i < +c; i++) one();
}
`

// TestNodeServerReadsFilesBetweenResponses: a Node.js server that reads a
// file between responses, with a Node.js client on the same host on shm,
// 400 connections 8 at a time: every response body is the file, intact
// (the file never reads from a connection closed behind the library's
// back), and once they are done the agent has released every end (the
// shared memory charged for them is back to 0). Again with libuv's io_uring
// turned on in the server (UV_USE_IO_URING=1: an SQPOLL ring for files and
// epoll_ctl batched through a second ring), which keeps it off shm.
func TestNodeServerReadsFilesBetweenResponses(t *testing.T) {
	const conns, par = 400, 8
	c := newCluster(t, 1)
	blob := randomBytes(256 << 10)
	sum := sha256.Sum256(blob)
	file := hostFile(t, "blob", blob)
	// FREEFLOW_DEBUG=1: a failure shows how each connection was decided, and why any was reset.
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"epoll", []string{"FREEFLOW_DEBUG=1"}},
		{"io_uring", []string{"FREEFLOW_DEBUG=1", "UV_USE_IO_URING=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.RandomName("node", 4)
			argv := append(append([]string{"env"}, tc.env...), "node", "-e", nodeFileServerJS, "serve", "/tmp/blob")
			c.StartDetached(t, "h1", srv, volume(file, "/tmp/blob"), argv...)
			c.WaitListening(t, srv, 7200)
			paths := watchPaths(t, c, "h1")
			// Bounded: a client that waits forever for a body fails the test, not the run.
			r := runClient(t, c, "h1", nil, "timeout", "120", "env", "FREEFLOW_DEBUG=1", "node", "-e", nodeFileServerJS, "get", srv,
				fmt.Sprint(conns), fmt.Sprint(par), hex.EncodeToString(sum[:]))
			if want := fmt.Sprintf("OK %d\n", conns); r.Stdout != want {
				t.Fatalf("node client: %q, want %q (bodies that were the file, intact); stderr:\n%s\nserver's log:\n%s",
					r.Stdout, want, r.Stderr, c.FF(t, "logs", srv).Stdout)
			}
			paths.expect(t, "shm", "")
			testenv.WaitFor(t, "the agent to release every closed connection's shared memory", func() bool {
				return counters(t, c, "h1").ShmBytes == 0
			})
			if ends := connsOf(t, c, srv); len(ends) != 0 {
				t.Errorf("conns still lists %d ends of the server's closed connections: %+v", len(ends), ends[0])
			}
		})
	}
}

// TestNodeEcho: a Node.js (libuv) echo server and client in containers on
// the same host, 200 connections of 1 MiB and 200 of 64 KiB, 16 in flight
// (each writes while it reads, half-closes, reads the echo to EOF and
// compares): every echo intact, no reset, no connection hung past the
// client's 20 s, and with FreeFlow every connection end on shm (issue 14's
// libuv program).
func TestNodeEcho(t *testing.T) {
	c := newCluster(t, 1)
	node := []string{"node", "-e", asyncecho.Node()}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := testenv.RandomName("nde", 4)
			c.StartDetached(t, "h1", srv, m.flags, append(node, "serve", "7300")...)
			c.WaitListening(t, srv, 7300)
			for _, size := range []int{1 << 20, 64 << 10} {
				paths := watchPaths(t, c, "h1")
				echoAll(t, c, m.flags, node, srv, 7300, 200, 16, size)
				paths.expect(t, m.sameHost, "")
			}
		})
	}
}
