package e2e

import (
	"testing"

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
