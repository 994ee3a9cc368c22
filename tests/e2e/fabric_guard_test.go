package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// escapePy connects to argv[1]:argv[2], echoes 1 MB on the connection and
// prints "echo OK" and "peer <ip:port>", the socket's real peer (read with
// the raw system call, past the library). On SIGUSR1 it does what a hostile
// process would, with raw system calls the library never sees: it clears
// the descriptor's mark (SO_MARK 0), printing "clear mark OK" or "clear mark
// <errno name>"; then for each ip:port in argv[3:] it disconnects the
// descriptor (connect AF_UNSPEC) and connects it there, printing "<ip:port>
// connected" or "<ip:port> not connected <why>" (it waits 2 s for each),
// then "done".
const escapePy = `
import ctypes, errno, os, platform, signal, socket, struct, sys, threading, time
host, port, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
libc = ctypes.CDLL("libc.so.6", use_errno=True)  # libc's own syscall(), not the library's (routes.c)
SYS_CONNECT, SYS_GETPEERNAME, SYS_SETSOCKOPT = {"x86_64": (42, 52, 54), "aarch64": (203, 205, 208)}[platform.machine()]
def raw(nr, *args):
    return 0 if libc.syscall(nr, *args) == 0 else ctypes.get_errno()
def peer(fd):
    sa, n = ctypes.create_string_buffer(16), ctypes.c_uint32(16)
    if raw(SYS_GETPEERNAME, fd, sa, ctypes.byref(n)):
        return None
    p, a = struct.unpack("!H4s", sa.raw[2:8])
    return "%s:%d" % (socket.inet_ntoa(a), p)
def connect(fd, addr):  # "" disconnects: AF_UNSPEC
    sa = bytes(16)
    if addr:
        h, p = addr.rsplit(":", 1)
        sa = struct.pack("=H", socket.AF_INET) + struct.pack("!H", int(p)) + socket.inet_aton(h) + bytes(8)
    return raw(SYS_CONNECT, fd, sa, 16)
` + echoCheckPy + `
signal.signal(signal.SIGUSR1, lambda *a: None)
c = socket.create_connection((host, port))
echo(c, "echo")
fd = c.fileno()
print("peer", peer(fd), flush=True)
signal.pause()
e = raw(SYS_SETSOCKOPT, fd, socket.SOL_SOCKET, socket.SO_MARK, ctypes.byref(ctypes.c_int(0)), 4)
print("clear mark", errno.errorcode[e] if e else "OK", flush=True)
os.set_blocking(fd, False)
for t in targets:
    e = connect(fd, "")
    if e:
        print(t, "not connected: disconnect failed:", os.strerror(e), flush=True); continue
    e = connect(fd, t)
    if e not in (0, errno.EINPROGRESS):
        print(t, "not connected:", os.strerror(e), flush=True); continue
    deadline = time.monotonic() + 2
    while peer(fd) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    print(t, "connected" if peer(fd) else "not connected within 2 s", flush=True)
print("done", flush=True)
`

// TestHandedSocketCannotReachHostNetwork: the host-tcp socket the agent
// hands to a container's process lives in the host's network namespace.
// The process cannot clear the socket's mark (its container has neither
// CAP_NET_RAW nor CAP_NET_ADMIN), and it can disconnect the socket, but
// connecting it again to the agents' offer ports or the directory, all of
// which that namespace reaches, fails (docs/PROTOCOL.md, "What a handed
// fabric socket can reach"). The connection carried its data intact
// before.
func TestHandedSocketCannotReachHostNetwork(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h2", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	h1, h2 := state.NewHost(1).FabricIP, state.NewHost(2).FabricIP
	targets := []string{h2 + ":7947", h1 + ":7947", fmt.Sprintf("%s:%d", state.FabricEtcd, state.EtcdPort)}
	// Control: every target answers a socket of h1's namespace.
	hostNS := state.NetNSPath(state.NewLayout(c.Name).HostNetNS("h1"))
	for _, a := range targets {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := netns.Dial(ctx, hostNS, "tcp", a)
		cancel()
		if err != nil {
			t.Fatalf("control: %s is not reachable from h1's namespace, so the test proves nothing: %v", a, err)
		}
		conn.Close()
	}

	paths := watchPaths(t, c, "h1", "h2")
	c.StartDetached(t, "h1", "esc", nil, append([]string{"python3", "-c", escapePy, "srv", "7001"}, targets...)...)
	waitLog(t, c, "esc", "echo OK")
	paths.expect(t, "host-tcp", "")
	ends := connsOf(t, c, "esc")
	if len(ends) != 2 {
		t.Fatalf("conns lists %d ends of esc's connection, want 2: %+v", len(ends), ends)
	}
	for _, e := range ends {
		if e.Path != "host-tcp" {
			t.Fatalf("conns entry %+v; want path host-tcp", e)
		}
	}
	if p := logLine(t, c, "esc", "peer"); !strings.HasPrefix(p, "peer "+h2+":") {
		t.Fatalf("the process's socket has %q, want h2's fabric address %s as its peer: not the handed socket", p, h2)
	}

	c.MustFF(t, "exec", "esc", "--", "kill", "-USR1", "1")
	waitLog(t, c, "esc", "done") // within 10 s: each attempt waits 2 s
	if l := logLine(t, c, "esc", "clear mark"); l != "clear mark EPERM" {
		t.Errorf("the process tried to clear the handed socket's mark: %q, want EPERM", l)
	}
	logs := c.MustFF(t, "logs", "esc")
	var reached []string
	for _, a := range targets {
		if !strings.Contains(logs, a+" not connected") {
			reached = append(reached, a)
		}
	}
	if len(reached) > 0 {
		t.Errorf("the handed socket, disconnected, reached %s:\n%s", strings.Join(reached, ", "), logs)
	}
}
