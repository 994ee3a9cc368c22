#!/usr/bin/python3
"""Connection setup rate, in the spirit of netperf TCP_CRR.

server HOST PORT: accept connections; read one byte, answer one byte, close.
client HOST PORT SECONDS: for SECONDS, open a connection, send one byte,
read the answer and the server's close, close; print one JSON line:
{"connections": N, "errors": E, "seconds": S, "rate": N/S}.

The server closes first, so TIME_WAIT stays on its side and a fast client
does not run out of ephemeral ports. Plain blocking sockets through libc:
an LD_PRELOAD socket library sees every call, as it would in a real app.
"""
import json
import socket
import sys
import time

MAX_ERRORS = 100


def serve(host, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1024)
    while True:
        conn, _ = ls.accept()
        conn.settimeout(5)
        try:
            if conn.recv(1):
                conn.sendall(b"y")
        except OSError:
            pass
        conn.close()


def one(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
        s.sendall(b"x")
        if s.recv(1) != b"y" or s.recv(1) != b"":
            raise OSError("bad answer from server")
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


def main(argv):
    if len(argv) == 3 and argv[0] == "server":
        serve(argv[1], int(argv[2]))
        return 0
    if len(argv) == 4 and argv[0] == "client":
        return client(argv[1], int(argv[2]), float(argv[3]))
    print("usage: connrate.py server HOST PORT | client HOST PORT SECONDS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
