#!/usr/bin/python3
"""A peer of a container being migrated (the bench's experiment migrate).

migrate_peer.py HOST PORT KEY: one redis connection to HOST:PORT; INCR KEY
every 2 ms, each reply checked to be the previous one plus 1 (nothing lost,
repeated or out of order). Prints "ready" once the first reply is right.
A line on its input ("move") marks the start of the migration; the end of
its input stops it after the request in flight. Prints one JSON line:
{"requests": N, "slowest_before_ms": B, "slowest_ms": S}: the slowest reply
before the mark and from the mark on (the migration and after). A wrong
reply or a failed connection prints {"error": ...} and exits 1.

Plain blocking sockets through libc, as a real client's.
"""
import json
import socket
import sys
import threading
import time

# A reply later than this fails the run: the longest migration measured
# here takes seconds, and TCP's retransmissions back off to a few more.
REPLY_TIMEOUT = 30
INTERVAL = 0.002


def main(argv):
    if len(argv) != 3:
        print("usage: migrate_peer.py HOST PORT KEY", file=sys.stderr)
        return 2
    host, port, key = argv[0], int(argv[1]), argv[2].encode()
    moving, stop = threading.Event(), threading.Event()

    def watch_input():
        for _ in sys.stdin:
            moving.set()
        stop.set()

    request = b"*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n" % (len(key), key)
    want, slowest = 1, {False: 0.0, True: 0.0}
    try:
        s = socket.create_connection((host, port), timeout=REPLY_TIMEOUT)
        f = s.makefile("rb")
        while True:
            during = moving.is_set()
            t = time.monotonic()
            s.sendall(request)
            line = f.readline()
            took = time.monotonic() - t
            if line != b":%d\r\n" % want:
                raise ValueError("reply %d was %r" % (want, line))
            # A reply that was waited for while the move began counts as
            # the move's.
            during = during or moving.is_set()
            slowest[during] = max(slowest[during], took)
            if want == 1:
                print("ready", flush=True)
                threading.Thread(target=watch_input, daemon=True).start()
            want += 1
            if stop.is_set():
                break
            time.sleep(INTERVAL)
    except (OSError, ValueError) as e:
        print(json.dumps({"error": str(e), "requests": want - 1}), flush=True)
        return 1
    print(json.dumps({"requests": want - 1, "slowest_before_ms": 1000 * slowest[False],
                      "slowest_ms": 1000 * slowest[True]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
