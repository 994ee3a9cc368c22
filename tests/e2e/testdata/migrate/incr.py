# One redis connection: INCR KEY every 2 ms until the file STOP exists, each
# reply checked to be the previous one plus 1 (nothing lost, repeated or
# out of order). Prints "OK <requests> <slowest reply in ms>", or why it
# failed.
import os, socket, sys, time

host, key, stop = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.create_connection((host, 6379), timeout=20)
f = s.makefile("rb")
want, slowest = 1, 0.0
while not os.path.exists(stop):
    t = time.monotonic()
    s.sendall(b"*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n" % (len(key), key.encode()))
    line = f.readline()
    slowest = max(slowest, time.monotonic() - t)
    if line != b":%d\r\n" % want:
        print("reply", want, "was", line, flush=True)
        sys.exit(1)
    want += 1
    time.sleep(0.002)
print("OK %d %.1f" % (want - 1, slowest * 1000), flush=True)
