package e2e

import (
	"os/exec"
	"testing"

	"github.com/freeflow-net/freeflow/internal/asyncecho"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// asyncioEchoPy is an asyncio echo server (serve) and client (send HOST):
// the client opens 4 connections at once and on each sends 2 MiB of random
// bytes in chunks of random size, half-closes, reads the echo to EOF and
// compares; it prints "OK 4" if all four came back intact. Both ends run
// on the event loop (epoll, non-blocking sockets).
const asyncioEchoPy = `
import asyncio, os, random, sys
async def echo(r, w):
    while b := await r.read(65536):
        w.write(b); await w.drain()
    w.close(); await w.wait_closed()
async def serve():
    s = await asyncio.start_server(echo, "0.0.0.0", 7100)
    await s.serve_forever()
async def one(host):
    data = os.urandom(2 << 20)
    r, w = await asyncio.open_connection(host, 7100)
    async def send():
        i = 0
        while i < len(data):
            n = random.randint(1, 65536); w.write(data[i:i+n]); i += n
            await w.drain()
        w.write_eof()
    sender = asyncio.create_task(send())
    got = await r.read(-1)
    await sender; w.close()
    return got == data
async def send(host):
    ok = await asyncio.gather(*(one(host) for _ in range(4)))
    print("OK", sum(ok))
asyncio.run(serve() if sys.argv[1] == "serve" else send(sys.argv[2]))
`

// TestPythonAsyncioEcho: python3 asyncio client and server echo random
// bytes intact over concurrent connections, same host and cross host, on
// the overlay and on the fast paths.
func TestPythonAsyncioEcho(t *testing.T) {
	c := newCluster(t, 2)
	onEveryPath(t, c, func(t *testing.T, m mode) string {
		srv := testenv.RandomName("aio", 4)
		c.StartDetached(t, "h1", srv, m.flags, "python3", "-c", asyncioEchoPy, "serve")
		c.WaitListening(t, srv, 7100)
		return srv
	}, func(t *testing.T, host, srv string, flags []string) {
		if out := runClient(t, c, host, flags, "python3", "-c", asyncioEchoPy, "send", srv).Stdout; out != "OK 4\n" {
			t.Fatalf("asyncio echo client: %q, want OK 4 (connections that came back intact)", out)
		}
	})
}

// TestPythonUvloopEcho: asyncio on uvloop, server and client in containers
// on the same host, 100 connections of 1 MiB one at a time and 100 with 16
// in flight: every echo intact, none stalled (issue 14, item 2: the end of
// stream after the last byte was not reported to a waiting loop).
func TestPythonUvloopEcho(t *testing.T) {
	py := asyncecho.DebianPython
	if err := exec.Command(py, "-c", "import uvloop").Run(); err != nil {
		t.Skip("python3 has no uvloop (Debian python3-uvloop; scripts/install-deps.sh)")
	}
	c := newCluster(t, 1)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := testenv.RandomName("uvl", 4)
			c.StartDetached(t, "h1", srv, m.flags, py, "-c", asyncecho.Uvloop(), "serve", "7101")
			c.WaitListening(t, srv, 7101)
			for _, inFlight := range []int{1, 16} {
				echoAll(t, c, m.flags, []string{py, "-c", asyncecho.Uvloop()}, srv, 7101, 100, inFlight, 1<<20)
			}
		})
	}
}
