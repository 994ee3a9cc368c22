# An echo server that accepts its connections only once the file ACCEPT
# exists (its listen queue holds them meanwhile), then serves each on a
# thread of its own.
import os, select, socket, sys, threading, time

go = sys.argv[1]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 7002))
l.listen(16)


def serve(c):
    for line in c.makefile("rb"):
        c.sendall(line)


while True:
    select.select([l], [], [])
    while not os.path.exists(go):
        time.sleep(0.01)
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
