package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

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

// uvloopEchoPy is an echo server (serve) and client (send HOST CONNS
// IN_FLIGHT SIZE) on uvloop, libuv's epoll loop: each connection sends SIZE
// bytes while it reads, half-closes, reads the echo to EOF and compares;
// the client prints "OK n" for the connections that came back intact
// (each within 20 s) and what failed on stderr.
const uvloopEchoPy = `
import asyncio, sys, uvloop
async def echo(r, w):
    while b := await r.read(65536):
        w.write(b); await w.drain()
    w.close()
async def serve():
    s = await asyncio.start_server(echo, "0.0.0.0", 7101)
    await s.serve_forever()
async def one(host, i, size):
    data = bytes((k * 7 + i) & 255 for k in range(256)) * (size // 256)
    r, w = await asyncio.open_connection(host, 7101)
    async def send():
        w.write(data); await w.drain(); w.write_eof()
    sender = asyncio.create_task(send())
    got = await r.read(-1)
    await sender; w.close()
    return got == data
async def send(host, conns, inflight, size):
    sem, ok = asyncio.Semaphore(inflight), 0
    async def run(i):
        nonlocal ok
        async with sem:
            try:
                intact = await asyncio.wait_for(one(host, i, size), 20)
                ok += intact
            except Exception as e:
                print("connection", i, repr(e), file=sys.stderr)
    await asyncio.gather(*(run(i) for i in range(conns)))
    print("OK", ok)
uvloop.install()
a = sys.argv
asyncio.run(serve() if a[1] == "serve" else send(a[2], int(a[3]), int(a[4]), int(a[5])))
`

const debianPython = "/usr/bin/python3"

// TestPythonUvloopEcho: asyncio on uvloop, server and client in containers
// on the same host, 100 connections of 1 MiB one at a time and 100 with 16
// in flight: every echo intact, none stalled (issue 14, item 2: the end of
// stream after the last byte was not reported to a waiting loop).
func TestPythonUvloopEcho(t *testing.T) {
	// Debian's python3, which python3-uvloop is for (a PATH may put another first).
	if err := exec.Command(debianPython, "-c", "import uvloop").Run(); err != nil {
		t.Skip("python3 has no uvloop (Debian python3-uvloop; scripts/install-deps.sh)")
	}
	c := newCluster(t, 1)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := testenv.RandomName("uvl", 4)
			c.StartDetached(t, "h1", srv, m.flags, debianPython, "-c", uvloopEchoPy, "serve")
			c.WaitListening(t, srv, 7101)
			for _, inFlight := range []string{"1", "16"} {
				before, start := counters(t, c, "h1"), time.Now()
				r := runClient(t, c, "h1", m.flags, debianPython, "-c", uvloopEchoPy, "send", srv, "100", inFlight, "1048576")
				if got := strings.TrimSpace(r.Stdout); got != "OK 100" {
					t.Fatalf("uvloop echo client, %s in flight: %q, want OK 100 (connections intact)\nstderr: %s",
						inFlight, got, firstLines(r.Stderr, 10))
				}
				t.Logf("%s in flight: %v (client container included), connection ends by path: %v",
					inFlight, time.Since(start).Round(time.Millisecond), pathDeltas(before, counters(t, c, "h1")))
			}
		})
	}
}
