# Connects to HOST:7002, says "connected", waits for the file GO, then
# sends three lines and checks each comes back. Prints "OK", or what failed.
import os, socket, sys, time

host, go = sys.argv[1], sys.argv[2]
s = socket.create_connection((host, 7002), timeout=30)
print("connected", flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
f = s.makefile("rb")
for i in range(3):
    m = b"line %d\n" % i
    s.sendall(m)
    got = f.readline()
    if got != m:
        print("sent", m, "got", got, flush=True)
        sys.exit(1)
print("OK", flush=True)
