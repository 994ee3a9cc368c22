# One redis connection: SET KEY to a new 1-4 MiB value and GET it back, in
# one write each way (so a move finds bytes unread in both directions),
# until the file STOP exists; every value read must be the one written.
# Prints "OK <rounds> <slowest round in ms>", or why it failed.
import hashlib, os, random, socket, sys, time

host, key, stop = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.create_connection((host, 6379), timeout=20)
f = s.makefile("rb")
k = key.encode()
rounds, slowest = 0, 0.0
while not os.path.exists(stop):
    t = time.monotonic()
    value = hashlib.sha256(b"%s %d" % (k, rounds)).digest() * random.randint(1 << 15, 1 << 17)
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n"
              % (len(k), k, len(value), value, len(k), k))
    ok = f.readline()
    head = f.readline()
    got = f.read(len(value) + 2)
    slowest = max(slowest, time.monotonic() - t)
    if ok != b"+OK\r\n" or head != b"$%d\r\n" % len(value) or got != value + b"\r\n":
        print("round", rounds, "SET said", ok, "GET said", head[:40], "and", len(got), "bytes",
              "that differ" if got != value + b"\r\n" else "", flush=True)
        sys.exit(1)
    rounds += 1
print("OK %d %.1f" % (rounds, slowest * 1000), flush=True)
