# Two redis connections at one 4-tuple (both bound to one local port: the
# library closed the first one's overlay socket at its swap, freeing the
# port), each INCRing a key of its own every 2 ms, every reply checked to
# be the previous one plus 1, until the file STOP exists. Prints "OK
# <requests> <local port>", or what failed.
import os, socket, sys, time

host, stop = sys.argv[1], sys.argv[2]


def connect(port):
    for _ in range(200):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
            s.connect((host, 6379))
            return s
        except OSError:
            s.close()
            time.sleep(0.05)
    print("could not connect from port", port, flush=True)
    sys.exit(1)


def incr(s, f, key, want):
    s.sendall(b"*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n" % (len(key), key))
    line = f.readline()
    if line != b":%d\r\n" % want:
        print("key", key, "reply", want, "was", line, flush=True)
        sys.exit(1)


a = socket.create_connection((host, 6379))
port = a.getsockname()[1]
fa = a.makefile("rb")
incr(a, fa, b"ka", 1)
time.sleep(0.5)  # a is on shm by now: its overlay socket, and port, are gone
b = connect(port)
fb = b.makefile("rb")
n = 1
while not os.path.exists(stop):
    n += 1
    incr(a, fa, b"ka", n)
    incr(b, fb, b"kb", n - 1)
    time.sleep(0.002)
print("OK", n, port, flush=True)
