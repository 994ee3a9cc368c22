# An echo server and client on asyncio with uvloop (libuv's epoll loop);
# the command line and output are asyncecho's (asyncecho.go): serve PORT,
# or send HOST PORT CONNS IN_FLIGHT SIZE ROUNDS.
import asyncio, sys, time, uvloop

CONN_TIMEOUT = 20  # seconds one connection may take before it counts as hung

async def echo(r, w):
    while b := await r.read(65536):
        w.write(b); await w.drain()
    w.close()

async def serve(port):
    s = await asyncio.start_server(echo, "0.0.0.0", port)
    await s.serve_forever()

async def one(host, port, i, size):
    data = bytes((k * 7 + i) & 255 for k in range(256)) * (size // 256)
    r, w = await asyncio.open_connection(host, port)
    async def send():
        w.write(data); await w.drain(); w.write_eof()
    sender = asyncio.create_task(send())
    got = await r.read(-1)
    await sender; w.close()
    if got != data:
        raise ValueError(f"echo differs: {len(got)} of {size} bytes")

async def round_(host, port, conns, inflight, size, tally):
    sem = asyncio.Semaphore(inflight)
    async def run(i):
        async with sem:
            try:
                await asyncio.wait_for(one(host, port, i, size), CONN_TIMEOUT)
                tally["ok"] += 1
            except asyncio.TimeoutError:
                print("connection", i, f"no echo within {CONN_TIMEOUT} s", file=sys.stderr); tally["timeout"] += 1
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as e:
                print("connection", i, repr(e), file=sys.stderr); tally["reset"] += 1
            except Exception as e:
                print("connection", i, repr(e), file=sys.stderr); tally["other"] += 1
    await asyncio.gather(*(run(i) for i in range(conns)))

async def send(host, port, conns, inflight, size, rounds):
    tally = dict(ok=0, reset=0, timeout=0, other=0)
    for _ in range(rounds):
        start = time.monotonic()
        await round_(host, port, conns, inflight, size, tally)
        print(f"round {time.monotonic() - start:.6f}", flush=True)
    print(f"failed reset {tally['reset']} timeout {tally['timeout']} other {tally['other']}")
    print("OK", tally["ok"])

uvloop.install()
a = sys.argv
if a[1] == "serve":
    asyncio.run(serve(int(a[2])))
else:
    asyncio.run(send(a[2], *map(int, a[3:8])))
