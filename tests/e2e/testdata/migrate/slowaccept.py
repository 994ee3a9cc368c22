# An echo server that accepts each connection 1 s after it arrives (its
# listen queue holds it meanwhile), then serves it on a thread of its own.
import select, socket, threading, time

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 7002))
l.listen(16)


def serve(c):
    for line in c.makefile("rb"):
        c.sendall(line)


while True:
    select.select([l], [], [])
    time.sleep(1)
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
