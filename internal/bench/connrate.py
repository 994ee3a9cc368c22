#!/usr/bin/python3
"""Connection setup rate, in the spirit of netperf TCP_CRR.

server HOST PORT: accept connections; read one byte, answer one byte, close.
server-threads HOST PORT: the same, each connection answered in a thread of
its own, so a client slow to send does not hold up the next accept.
client HOST PORT SECONDS: for SECONDS, open a connection, send one byte,
read the answer and the server's close, close; print one JSON line:
{"connections": N, "errors": E, "seconds": S, "rate": N/S}.
client-late HOST PORT COUNT: COUNT connections, LATE_IN_FLIGHT at a time,
each observed late as the JVM's HttpClient does: a non-blocking connect,
LATE_SLEEP asleep, then epoll for EPOLLOUT; then the same exchange. The
JSON line also has each connection's time, connect to close, in ms:
"conn_ms_p50" and "conn_ms_p99".

The server closes first, so TIME_WAIT stays on its side and a fast client
does not run out of ephemeral ports. Plain blocking sockets through libc:
an LD_PRELOAD socket library sees every call, as it would in a real app.
"""
import errno
import json
import os
import select
import socket
import sys
import threading
import time

MAX_ERRORS = 100
# A late observer's pause between its connect and its first look, and how
# many of its connections are in flight at once (a JVM client's pool).
LATE_SLEEP = 0.1
LATE_IN_FLIGHT = 20


def answer(conn):
    conn.settimeout(5)
    try:
        if conn.recv(1):
            conn.sendall(b"y")
    except OSError:
        pass
    conn.close()


def serve(host, port, threads):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1024)
    while True:
        conn, _ = ls.accept()
        if threads:
            threading.Thread(target=answer, args=(conn,), daemon=True).start()
        else:
            answer(conn)


def exchange(s):
    """One byte each way, then the server's close."""
    s.settimeout(5)
    s.sendall(b"x")
    if s.recv(1) != b"y" or s.recv(1) != b"":
        raise OSError("bad answer from server")


def one(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
        exchange(s)
    finally:
        s.close()


def client(host, port, seconds):
    n = errors = 0
    last = ""
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end and errors < MAX_ERRORS:
        try:
            one(host, port)
            n += 1
        except OSError as e:
            errors += 1
            last = str(e)
    took = time.monotonic() - start
    out = {"connections": n, "errors": errors, "seconds": took, "rate": n / took}
    if last:
        out["last_error"] = last
    print(json.dumps(out))
    return 0 if n > 0 else 1


def one_late(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setblocking(False)
        err = s.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, "connect: " + os.strerror(err))
        time.sleep(LATE_SLEEP)
        ep = select.epoll()
        try:
            ep.register(s.fileno(), select.EPOLLOUT)
            if not ep.poll(5):
                raise OSError("connect not complete 5 s after its first look")
        finally:
            ep.close()
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, "connect: " + os.strerror(err))
        exchange(s)
    finally:
        s.close()


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def client_late(host, port, count):
    lock = threading.Lock()
    left = [count]
    times, errors, last = [], [0], [""]

    def worker():
        while True:
            with lock:
                if left[0] == 0 or errors[0] >= MAX_ERRORS:
                    return
                left[0] -= 1
            t0 = time.monotonic()
            try:
                one_late(host, port)
                took = time.monotonic() - t0
                with lock:
                    times.append(took)
            except OSError as e:
                with lock:
                    errors[0] += 1
                    last[0] = str(e)

    start = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(min(count, LATE_IN_FLIGHT))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - start
    out = {"connections": len(times), "errors": errors[0], "seconds": took, "rate": len(times) / took}
    if times:
        times.sort()
        out.update(conn_ms_p50=1000 * percentile(times, 0.5), conn_ms_p99=1000 * percentile(times, 0.99))
    if last[0]:
        out["last_error"] = last[0]
    print(json.dumps(out))
    return 0 if times else 1


def main(argv):
    if len(argv) == 3 and argv[0] in ("server", "server-threads"):
        serve(argv[1], int(argv[2]), argv[0] == "server-threads")
        return 0
    if len(argv) == 4 and argv[0] == "client":
        return client(argv[1], int(argv[2]), float(argv[3]))
    if len(argv) == 4 and argv[0] == "client-late":
        return client_late(argv[1], int(argv[2]), int(argv[3]))
    print("usage: connrate.py server|server-threads HOST PORT | client HOST PORT SECONDS"
          " | client-late HOST PORT COUNT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
