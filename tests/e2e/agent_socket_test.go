package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// socketAttackPy does, as uid 0 in its container, what a container that
// wants to serve its host's library socket itself would, and prints one
// line per attempt: "<attempt> OK" or "<attempt> <errno name>":
//
//	rename, unlink        move the agent's socket away
//	chmod                 take its mode away
//	bind                  bind a socket of its own in the directory
//	link, link-in         hard-link the agent's socket, or its own one, into the directory
//	mount, bind-mount     mount a file system or its /tmp over the directory
//	remount-rw, umount    make the directory writable, or uncover what is under it
//	impostor              if the agent's socket is gone: listen at its path
//
// then the same in a user and mount namespace of its own (userns-*; "userns
// <errno name>" if it cannot make one), where mounting over the directory
// changes only its own view, and listens there ("userns-impostor"). It
// prints "ready" with every socket it got listening, and holds them.
const socketAttackPy = `
import ctypes, errno, os, signal, socket
libc = ctypes.CDLL(None, use_errno=True)
D, MS_BIND, MS_REMOUNT = "/run/freeflow", 4096, 32
held = []
def c_call(r):
    if r != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def mount(src, flags, fstype=None):
    c_call(libc.mount(src, D.encode(), fstype, ctypes.c_ulong(flags), None))
def listen_at(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(path); s.listen(64); held.append(s)
def attempt(name, fn):
    try:
        fn(); print(name, "OK", flush=True); return True
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno), flush=True); return False
def attacks(prefix):
    attempt(prefix + "remount-rw", lambda: mount(None, MS_REMOUNT | MS_BIND))
    attempt(prefix + "umount", lambda: c_call(libc.umount2(D.encode(), 0)))
listen_at("/tmp/red.sock")
attempt("rename", lambda: os.rename(D + "/agent.sock", D + "/agent.sock.red"))
attempt("unlink", lambda: os.unlink(D + "/agent.sock"))
attempt("chmod", lambda: os.chmod(D + "/agent.sock", 0))
attempt("bind", lambda: listen_at(D + "/red.sock"))
attempt("link", lambda: os.link(D + "/agent.sock", D + "/agent-link.sock"))
attempt("link-in", lambda: os.link("/tmp/red.sock", D + "/red-link.sock"))
attempt("mount", lambda: mount(b"tmpfs", 0, b"tmpfs"))
attempt("bind-mount", lambda: mount(b"/tmp", MS_BIND))
attacks("")
if not os.path.exists(D + "/agent.sock"):
    attempt("impostor", lambda: listen_at(D + "/agent.sock"))
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    if libc.unshare(0x10000000 | 0x00020000):  # CLONE_NEWUSER | CLONE_NEWNS
        print("userns", errno.errorcode[ctypes.get_errno()], flush=True)
    else:
        for f, m in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
            with open("/proc/self/" + f, "w") as fh: fh.write(m)
        attacks("userns-")
        if attempt("userns-mount-over", lambda: mount(b"tmpfs", 0, b"tmpfs")):
            attempt("userns-impostor", lambda: listen_at(D + "/agent.sock"))
    os.write(w, b"x")
    signal.pause()
os.close(w); os.read(r, 1)
print("ready", flush=True)
signal.pause()
`

// TestContainerCannotReplaceAgentSocket: a container (uid 0, with what
// `freeflow run` gives it) cannot move, remove, change, replace, link over
// or mount over its host's library socket, nor make its directory writable: the
// directory is a read-only bind. In a user and mount namespace of its own
// it can cover the directory only in its own view. With every impostor
// socket it got listening, a connection between two other containers of
// its host still takes shm, decided by the real agent, intact; and a
// restarted agent's new socket is seen through the read-only bind of a
// container started before the restart.
func TestContainerCannotReplaceAgentSocket(t *testing.T) {
	c := newCluster(t, 1)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	c.StartDetached(t, "h1", "red", []string{"--tenant", "red"}, "python3", "-c", socketAttackPy)
	waitLog(t, c, "red", "ready")
	t.Logf("red's attempts:\n%s", c.MustFF(t, "logs", "red"))
	attempts := []string{"rename", "unlink", "chmod", "bind", "link", "link-in", "mount", "bind-mount", "remount-rw", "umount"}
	if userns := logLine(t, c, "red", "userns "); userns == "" {
		attempts = append(attempts, "userns-remount-rw", "userns-umount")
	}
	for _, a := range attempts {
		if line := logLine(t, c, "red", a+" "); line == "" || strings.HasSuffix(line, " OK") {
			t.Errorf("red's %s: %q, want it refused", a, line)
		}
	}

	paths := watchPaths(t, c, "h1")
	echoOK(t, c.MustFF(t, "run", "--host", "h1", "--name", testenv.RandomName("b", 4), "--rm", "--",
		"python3", "-c", echoPy, "send", "srv", "7001", fmt.Sprint(echoBytes)), echoBytes)
	paths.expect(t, "shm", "")

	c.MustFF(t, "agent", "stop", "--kill", "--host", "h1")
	c.MustFF(t, "agent", "start", "--host", "h1")
	if out := c.MustFF(t, "exec", "srv", "--", "python3", "-c", agentClientPy, "hello"); !strings.Contains(out, "name=srv") {
		t.Fatalf("HELLO from srv, started before the agent restarted: %q, want the agent to name it srv", out)
	}
}
