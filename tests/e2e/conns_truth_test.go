package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// rawCloseC connects to HOST PORT, echoes one byte, prints "echoed", and
// at SIGUSR1 closes the connection with its own syscall instruction (as a
// Go program or a runtime with inline system calls does: no libc
// function, no syscall() the library could route), prints "closed" and
// lives on, so the agent cannot learn of the close from its exit.
const rawCloseC = `
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static long raw_close(long fd)
{
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_close), "D"(fd) : "rcx", "r11", "memory");
	return ret;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	sigset_t set;
	char b = 'x';
	int fd, sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (argc != 3 || getaddrinfo(argv[1], argv[2], &hints, &ai))
		return 2;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) || write(fd, &b, 1) != 1 ||
	    read(fd, &b, 1) != 1)
		return 3;
	printf("echoed\n");
	fflush(stdout);
	sigwait(&set, &sig);
	if (raw_close(fd))
		return 4;
	printf("closed\n");
	fflush(stdout);
	for (;;)
		pause();
}
`

// buildC compiles the C program src into a new file named name and
// returns its path, for containers to mount.
func buildC(t *testing.T, name, src string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("cc", "-O2", "-o", out, "-x", "c", "-")
	cmd.Stdin = strings.NewReader(src)
	b, err := cmd.CombinedOutput()
	must(t, err, "compile %s: %s", name, b)
	return out
}

// TestRawInlineCloseReleasesEnd: a client that closes its shm connection
// with an inline syscall instruction, which no wrapper and no route of the
// library sees, and lives on: within seconds `freeflow conns` lists
// neither end and `freeflow status` counts no shared memory for them (the
// agent sees that the process no longer holds the socket its ledger
// names), though the client never said CLOSED and has not exited.
func TestRawInlineCloseReleasesEnd(t *testing.T) {
	c := newCluster(t, 1)
	bin := buildC(t, "rawclose", rawCloseC)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	cli := testenv.RandomName("raw", 4)
	c.StartDetached(t, "h1", cli, volume(bin, "/tmp/rawclose"), "/tmp/rawclose", "srv", "7001")
	waitLog(t, c, cli, "echoed")
	testenv.WaitFor(t, "conns to list both ends of the client's connection on shm", func() bool {
		ends := connsOf(t, c, cli)
		return len(ends) == 2 && ends[0].Path == "shm" && ends[1].Path == "shm"
	})
	if got := counters(t, c, "h1").ShmBytes; got == 0 {
		t.Fatalf("status shm_bytes = 0 with the shm connection open")
	}

	c.MustFF(t, "exec", cli, "--", "kill", "-USR1", "1")
	waitLog(t, c, cli, "closed")
	testenv.WaitFor(t, "the agent to drop the connection closed by an inline system call and release its shared memory", func() bool {
		return len(connsOf(t, c, cli)) == 0 && counters(t, c, "h1").ShmBytes == 0
	})
}

// forkExecServerPy (serve PORT) accepts each connection, forks, and the
// child execs a new python3 that echoes on the connection it inherited (as
// sshd re-executes itself for each connection); the parent closes its copy.
const forkExecServerPy = `
import os, socket, sys
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(16)
    while True:
        c, _ = s.accept()
        if os.fork() == 0:
            s.close(); os.set_inheritable(c.fileno(), True)
            os.execvp("python3", ["python3", "-c", sys.argv[3], "handle", str(c.fileno())])
        c.close()
else:
    c = socket.socket(fileno=int(sys.argv[2]))
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
`

// TestForkExecServerListsBothEnds: with a server that forks and execs a
// handler per connection (the parent closing its copy, as sshd does),
// `freeflow conns` lists both ends of a client's connection, each once,
// as what they are: moved down from shm to a socket pair at the fork
// (unix, moved-down), at the client too, which adopted the move.
func TestForkExecServerListsBothEnds(t *testing.T) {
	c := newCluster(t, 1)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", forkExecServerPy, "serve", "7001", forkExecServerPy)
	c.WaitListening(t, "srv", 7001)
	cli := testenv.RandomName("fx", 4)
	c.StartDetached(t, "h1", cli, nil, "python3", "-c", stepClientPy, "srv", "7001")
	waitLog(t, c, cli, "step1 OK")
	var ends []agentapi.ConnInfo
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("conns lists for the client's connection: %+v", ends)
		}
	})
	moved := func(e agentapi.ConnInfo) bool { return e.Path == "unix" && e.Reason == "moved-down" }
	testenv.WaitFor(t, "conns to list the connection's two ends, one in each container, both unix moved-down", func() bool {
		ends = connsOf(t, c, cli)
		return len(ends) == 2 && ends[0].LocalContainer != ends[1].LocalContainer && moved(ends[0]) && moved(ends[1])
	})
	if got := counters(t, c, "h1").ShmBytes; got != 0 {
		t.Errorf("status shm_bytes = %d; the only connection moved down to a socket pair", got)
	}
}

// holdOpenPy opens N connections to HOST PORT, one after the other,
// prints "opened N" and keeps them open (client HOST PORT N); or accepts
// connections and keeps them open (serve PORT), waiting in accept alone:
// a server that polls its connections costs each accept as much as it
// holds.
const holdOpenPy = `
import signal, socket, sys
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(4096)
    held = []
    while True:
        held.append(s.accept()[0])
held = [socket.create_connection((sys.argv[2], int(sys.argv[3]))) for _ in range(int(sys.argv[4]))]
print("opened", len(held), flush=True)
signal.pause()
`

// byContainerPath counts conns by local container and path.
func byContainerPath(conns []agentapi.ConnInfo) map[string]int {
	n := map[string]int{}
	for _, e := range conns {
		n[e.LocalContainer+" "+e.Path]++
	}
	return n
}

// TestConnsLists20000LiveConnections: with 20 000 live connections on one
// host (two clients of 10 000 each, to two servers: a process may hold
// at most its RLIMIT_NOFILE, 20 000 here), `freeflow conns` lists all
// 40 000 ends, each once, both ends of every connection (also of two
// connections that share a 4-tuple: the swap frees the overlay port).
func TestConnsLists20000LiveConnections(t *testing.T) {
	const perClient = 10000
	c := newCluster(t, 1)
	for i, port := range []string{"7001", "7002"} { // one client at a time: a busy agent answers late
		srv, cli := "srv"+port, testenv.RandomName("many", 4)
		c.StartDetached(t, "h1", srv, nil, "python3", "-c", holdOpenPy, "serve", port)
		c.WaitListening(t, srv, 7001+i)
		c.StartDetached(t, "h1", cli, nil, "python3", "-c", holdOpenPy, "client", srv, port, fmt.Sprint(perClient))
		waitLogFor(t, c, cli, fmt.Sprintf("opened %d", perClient), 5*time.Minute)
	}
	start := time.Now()
	all := hostConns(t, c, "h1")
	took := time.Since(start)
	if len(all) != 4*perClient {
		t.Fatalf("conns lists %d ends (by container and path: %v); want %d, both ends of %d connections",
			len(all), byContainerPath(all), 4*perClient, 2*perClient)
	}
	// Two live connections may share a 4-tuple (the swap frees the overlay
	// port for a later connection): ends are counted, not a set.
	type key struct{ container, local, remote string }
	ends := map[key]int{}
	for _, e := range all {
		ends[key{e.LocalContainer, e.Local, e.Remote}]++
	}
	for _, e := range all {
		k, other := key{e.LocalContainer, e.Local, e.Remote}, key{e.RemoteContainer, e.Remote, e.Local}
		if ends[k] != ends[other] {
			t.Fatalf("conns lists %d ends like %+v and %d of its other end", ends[k], e, ends[other])
		}
	}
	t.Logf("conns listed %d ends in %v", len(all), took)
}
