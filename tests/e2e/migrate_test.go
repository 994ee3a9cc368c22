package e2e

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestMigrate: a redis-server started without the library moves h1 -> h2
// -> h3 -> h1 while three clients (on its home host with and without the
// library, and on h2) each hold one connection and INCR a key of their own
// every 2 ms: every reply is the one before plus 1, none fails, also across
// a move whose restore fails and is rolled back. A move CRIU refuses to
// dump leaves its container running where it was. The value
// written before is there after; it keeps its IP, its MAC and, entered
// with exec, the capabilities crun gave it; a second container moved to the
// same host reaches it; nothing of the moves is left once it is removed.
func TestMigrate(t *testing.T) {
	if m := testenv.Missing("redis-server", "redis-cli", "criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 3)
	srv := "mredis"
	c.StartDetached(t, "h1", srv, []string{"--no-freeflow"}, "redis-server", "--port", "6379", "--bind", "0.0.0.0",
		"--protected-mode", "no", "--save", "", "--appendonly", "no")
	c.WaitListening(t, srv, 6379)
	ip := containerOf(t, c, srv).IP
	mac, caps := c.MustFF(t, "exec", srv, "--", "cat", "/sys/class/net/eth0/address"), capBnd(t, c, srv)
	nofile := c.MustFF(t, "exec", srv, "--", "grep", "Max open files", "/proc/self/limits")
	value := hex.EncodeToString(randomBytes(4 << 10))
	runClient(t, c, "h2", nil, "redis-cli", "-h", srv, "SET", "before", value)

	ctl, flags := incrFlags(t)
	clients := []struct{ name, host string }{{"mc1", "h1"}, {"mc2", "h1"}, {"mc3", "h2"}}
	for i, cl := range clients {
		f := flags
		if i == 1 {
			f = append([]string{"--no-freeflow"}, flags...)
		}
		c.StartDetached(t, cl.host, cl.name, f, "python3", "/run/incr.py", srv, "key-"+cl.name, "/run/ctl/stop")
	}

	t.Run("failed_restore_rolls_back", func(t *testing.T) {
		// The destination's agent directory, which the restore binds into
		// the container, is missing for a moment: the restore fails and
		// the container runs on h1 again, its clients' connections kept.
		sock := filepath.Join("/run/freeflow", c.Name, "hosts", "h2", "sock")
		must(t, os.Rename(sock, sock+".away"), "hide h2's agent directory")
		r := c.FF(t, "migrate", srv, "--to", "h2")
		must(t, os.Rename(sock+".away", sock), "restore h2's agent directory")
		if r.Code == 0 || !strings.Contains(r.Stderr, "runs on h1 again") {
			t.Fatalf("migrate with a restore bound to fail: exit %d, stderr %q; want it back on h1", r.Code, r.Stderr)
		}
		if got := containerOf(t, c, srv); got.Host != "h1" || got.Status != "running" {
			t.Fatalf("after the failed move ps shows %+v; want it running on h1", got)
		}
	})

	t.Run("refused_dump_leaves_it_running", func(t *testing.T) {
		// A process holding a Unix connection to a peer outside the
		// container: CRIU refuses to dump it; the move is refused with
		// CRIU's reason, and the process runs on h1, its connection kept.
		dir := t.TempDir()
		must(t, os.Chmod(dir, 0o777), "open %s to the container", dir)
		ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
		must(t, err, "listen in %s", dir)
		defer ln.Close()
		must(t, os.Chmod(filepath.Join(dir, "sock"), 0o777), "open the socket to the container")
		c.StartDetached(t, "h1", "holder", append([]string{"--no-freeflow"}, volume(dir, "/run/u")...), "python3", "-c", `
import socket
s = socket.socket(socket.AF_UNIX)
s.connect("/run/u/sock")
f = s.makefile("rwb", buffering=0)
for line in f:
    f.write(b"alive " + line)
`)
		must(t, ln.(*net.UnixListener).SetDeadline(time.Now().Add(20*time.Second)), "set the accept deadline")
		conn, err := ln.Accept()
		must(t, err, "accept the holder's connection")
		defer conn.Close()
		r := c.FF(t, "migrate", "holder", "--to", "h2")
		if r.Code == 0 || !strings.Contains(r.Stderr, "criu dump") || !strings.Contains(r.Stderr, "runs on h1 as before") {
			t.Fatalf("migrate of a process CRIU cannot dump: exit %d, stderr %q; want CRIU's refusal, and it on h1", r.Code, r.Stderr)
		}
		if got := containerOf(t, c, "holder"); got.Host != "h1" || got.Status != "running" {
			t.Fatalf("after the refused move ps shows %+v; want it running on h1", got)
		}
		must(t, conn.SetDeadline(time.Now().Add(10*time.Second)), "set the connection's deadline")
		_, err = conn.Write([]byte("ping\n"))
		must(t, err, "write to the holder")
		got := make([]byte, len("alive ping\n"))
		_, err = io.ReadFull(conn, got)
		if err != nil || string(got) != "alive ping\n" {
			t.Fatalf("the holder's connection after the refused move: %q, %v; want \"alive ping\"", got, err)
		}
		c.MustFF(t, "rm", "-f", "holder")
	})

	for _, to := range []string{"h2", "h3", "h1"} {
		time.Sleep(500 * time.Millisecond)
		if out := c.MustFF(t, "migrate", srv, "--to", to); !strings.Contains(out, "to "+to) {
			t.Fatalf("migrate --to %s printed %q", to, out)
		}
		if got := containerOf(t, c, srv); got.Host != to || got.IP != ip || got.Status != "running" {
			t.Fatalf("after migrate --to %s, ps shows %+v; want it running on %s with IP %s", to, got, to, ip)
		}
		if got := c.MustFF(t, "exec", srv, "--", "cat", "/sys/class/net/eth0/address"); got != mac {
			t.Errorf("on %s the MAC is %q, not %q", to, got, mac)
		}
		if got := capBnd(t, c, srv); got != caps {
			t.Errorf("exec on %s has capabilities %s, not crun's %s", to, got, caps)
		}
		if got := c.MustFF(t, "exec", srv, "--", "grep", "Max open files", "/proc/self/limits"); got != nofile {
			t.Errorf("exec on %s has the open-file limit %q, not crun's %q", to, got, nofile)
		}
		if r := c.FF(t, "exec", srv, "--", "sh", "-c", "echo 10.0.0.1 evil >>/etc/hosts"); r.Code == 0 {
			t.Errorf("on %s the container could write the cluster's /etc/hosts", to)
		}
	}
	time.Sleep(500 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(ctl, "stop"), nil, 0o644), "stop the clients")
	for _, cl := range clients {
		testenv.WaitFor(t, cl.name+" to finish", func() bool { return containerOf(t, c, cl.name).Status == "exited" })
		if out := c.MustFF(t, "logs", cl.name); !strings.HasPrefix(out, "OK ") {
			t.Errorf("client %s on %s across the moves: %s", cl.name, cl.host, out)
		} else {
			t.Logf("client %s on %s: %s", cl.name, cl.host, strings.TrimSpace(out))
		}
	}
	for _, h := range []string{"h1", "h2", "h3"} {
		if out := runClient(t, c, h, nil, "redis-cli", "-h", srv, "--raw", "GET", "before").Stdout; out != value+"\n" {
			t.Errorf("GET from %s after the moves: %d bytes, not the %d-byte value written before", h, len(out), len(value))
		}
	}

	t.Run("two_moved_to_one_host", func(t *testing.T) {
		c.StartDetached(t, "h3", "other", []string{"--no-freeflow"}, "sleep", "3600")
		c.MustFF(t, "migrate", srv, "--to", "h2")
		c.MustFF(t, "migrate", "other", "--to", "h2")
		if out := c.MustFF(t, "exec", "other", "--", "redis-cli", "-h", srv, "PING"); out != "PONG\n" {
			t.Fatalf("from a second container moved to h2, redis-cli PING printed %q", out)
		}
		if a, b := c.MustFF(t, "exec", "other", "--", "cat", "/sys/class/net/eth0/address"), mac; a == b {
			t.Fatalf("two moved containers share the MAC %s", a)
		}
	})

	t.Run("exec_refused_once_init_changed_namespaces", func(t *testing.T) {
		// An init that makes a user and a mount namespace of its own (no
		// privilege needed) could put its own setpriv where exec, still
		// holding the CLI's privileges, runs it: exec enters the
		// namespaces the container was restored in, or refuses.
		c.StartDetached(t, "h1", "nsinit", []string{"--no-freeflow"}, "python3", "-c", `
import ctypes, os, sys, time
while not os.path.exists("/tmp/go"):
    time.sleep(0.05)
print("unshare", ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x00020000), ctypes.get_errno(), flush=True)
time.sleep(3600)
`)
		c.MustFF(t, "migrate", "nsinit", "--to", "h2")
		c.MustFF(t, "exec", "nsinit", "--", "touch", "/tmp/go")
		testenv.WaitFor(t, "nsinit to unshare", func() bool { return strings.Contains(c.MustFF(t, "logs", "nsinit"), "unshare") })
		if out := c.MustFF(t, "logs", "nsinit"); !strings.Contains(out, "unshare 0 ") {
			t.Fatalf("the init could not make its namespaces (%q): nothing to refuse", out)
		}
		r := c.FF(t, "exec", "nsinit", "--", "true")
		if r.Code == 0 || !strings.Contains(r.Stderr, "namespace it was restored in") {
			t.Fatalf("exec into a container whose init left its namespaces: exit %d, stderr %q; want a refusal", r.Code, r.Stderr)
		}
	})

	t.Run("removed_leaves_nothing", func(t *testing.T) {
		c.MustFF(t, "rm", "-f", srv)
		for _, h := range []string{"h1", "h2", "h3"} {
			ns := c.Name + "-" + h
			for _, args := range [][]string{{"route", "show", ip + "/32"}, {"neigh", "show", "proxy", ip}} {
				out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "" {
					t.Errorf("ip -n %s %s after rm: %q %v", ns, strings.Join(args, " "), out, err)
				}
			}
		}
		if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), c.Name+"-m-") ||
			strings.Contains(string(out), c.Name+"-c-"+srv) {
			t.Errorf("network namespaces left after rm:\n%s", out)
		}
	})
}

// incrFlags makes the directory the INCR clients (testdata/migrate/incr.py)
// look in for their stop files, and returns it with the run flags that
// mount it and the script.
func incrFlags(t *testing.T) (string, []string) {
	incr, err := filepath.Abs("testdata/migrate/incr.py")
	must(t, err, "find incr.py")
	ctl := t.TempDir()
	must(t, os.Chmod(ctl, 0o777), "open %s to the clients", ctl)
	return ctl, append(volume(incr, "/run/incr.py"), "-v", ctl+":/run/ctl")
}

// capBnd is the bounding capability set of a process exec'd in name.
func capBnd(t *testing.T, c *testenv.Cluster, name string) string {
	t.Helper()
	return strings.TrimSpace(c.MustFF(t, "exec", name, "--", "grep", "CapBnd", "/proc/self/status"))
}

// TestMigrateLibraryContainer: a redis-server running the FreeFlow library
// moves h1 -> h2 -> h1 while clients each hold one connection to it and
// check every reply: two without the library (overlay, on h1 and h2), and
// library clients on shared memory, which the move parks on plain TCP at
// their overlay tuples: one that INCRs every 2 ms, one that writes and
// reads back 1-4 MiB values (bytes in both rings when it parks), one on h2
// parked when the server leaves h2; the move back to h1 brings the h1
// clients' parked connections back onto shared memory (both ends on one
// host again). A library client itself moves too
// (the connecting end parks). While a library client on another host holds
// a host TCP connection to it, which cannot be parked yet, the move is
// refused with that reason and nothing changes. After the moves a new
// library connection takes shared memory where the server now runs.
func TestMigrateLibraryContainer(t *testing.T) {
	if m := testenv.Missing("redis-server", "redis-cli", "criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	srv := "lredis"
	c.StartDetached(t, "h1", srv, nil, "redis-server", "--port", "6379", "--bind", "0.0.0.0",
		"--protected-mode", "no", "--save", "", "--appendonly", "no")
	c.WaitListening(t, srv, 6379)
	value := hex.EncodeToString(randomBytes(4 << 10))
	runClient(t, c, "h2", nil, "redis-cli", "-h", srv, "SET", "before", value)

	ctl, flags := incrFlags(t)
	bulk, err := filepath.Abs("testdata/migrate/bulk.py")
	must(t, err, "find bulk.py")
	flags = append(flags, volume(bulk, "/run/bulk.py")...)
	client := func(name, host string, lib bool, script string) {
		f := flags
		if !lib {
			f = append([]string{"--no-freeflow"}, flags...)
		}
		c.StartDetached(t, host, name, f, "python3", "/run/"+script, srv, "key-"+name, "/run/ctl/stop-"+name)
	}
	stop := func(name string) {
		must(t, os.WriteFile(filepath.Join(ctl, "stop-"+name), nil, 0o644), "stop %s", name)
		testenv.WaitFor(t, name+" to finish", func() bool { return containerOf(t, c, name).Status == "exited" })
		if out := c.MustFF(t, "logs", name); !strings.HasPrefix(out, "OK ") {
			t.Errorf("client %s: %s", name, out)
		} else {
			t.Logf("client %s: %s", name, strings.TrimSpace(out))
		}
	}
	ends := func(peer string) (out []agentapi.ConnInfo) { // of the live connections between srv and peer
		var conns []agentapi.ConnInfo
		must(t, json.Unmarshal([]byte(c.MustFF(t, "conns", "-o", "json")), &conns), "parse freeflow conns -o json")
		for _, ci := range conns {
			if (ci.LocalContainer == srv && ci.RemoteContainer == peer) || (ci.LocalContainer == peer && ci.RemoteContainer == srv) {
				out = append(out, ci)
			}
		}
		return out
	}
	pathTo := func(peer string) (path, reason string) { // of a live connection between srv and peer
		for _, ci := range ends(peer) {
			return ci.Path, ci.Reason
		}
		return "", ""
	}
	onShm := func(peer string) {
		testenv.WaitFor(t, peer+"'s connection on shm", func() bool { p, _ := pathTo(peer); return p == "shm" })
	}
	// Both ends of the client's one connection are listed: the moved
	// container's too, whose library has not called its new agent.
	wantParked := func(peer string) {
		got := ends(peer)
		if len(got) != 2 || got[0].LocalContainer == got[1].LocalContainer {
			t.Errorf("after the move conns lists %+v for %s's connection; want both its ends", got, peer)
		}
		for _, ci := range got {
			if ci.Path != "overlay" || ci.Reason != "parked" {
				t.Errorf("after the move %s's end of its connection with %s is listed %s %s, want overlay parked", ci.LocalContainer, ci.RemoteContainer, ci.Path, ci.Reason)
			}
		}
	}
	move := func(name, to string) {
		time.Sleep(300 * time.Millisecond)
		out := c.MustFF(t, "migrate", name, "--to", to)
		if !strings.Contains(out, "to "+to) || !strings.Contains(out, "parked on plain TCP") {
			t.Fatalf("migrate %s --to %s printed %q; want its shm connections parked", name, to, out)
		}
		if got := containerOf(t, c, name); got.Host != to || got.Status != "running" {
			t.Fatalf("after migrate %s --to %s, ps shows %+v", name, to, got)
		}
	}
	client("ov1", "h1", false, "incr.py")
	client("ov2", "h2", false, "incr.py")
	client("shm1", "h1", true, "incr.py")
	client("bulk1", "h1", true, "bulk.py")
	onShm("shm1")
	onShm("bulk1")

	client("x2", "h2", true, "incr.py")
	testenv.WaitFor(t, "x2's connection on host-tcp", func() bool { p, _ := pathTo("x2"); return p == "host-tcp" })
	r := c.FF(t, "migrate", srv, "--to", "h2")
	if r.Code == 0 || !strings.Contains(r.Stderr, "fast paths (host-tcp ") {
		t.Fatalf("migrate with a host TCP connection open: exit %d, stderr %q; want a refusal naming it", r.Code, r.Stderr)
	}
	if got := containerOf(t, c, srv); got.Host != "h1" || got.Status != "running" {
		t.Fatalf("after the refusal ps shows %+v; want it running on h1", got)
	}
	if p, _ := pathTo("shm1"); p != "shm" {
		t.Errorf("after the refusal shm1's connection is on %s, not shm", p)
	}
	stop("x2")
	testenv.WaitFor(t, "x2's connection gone from the list", func() bool { p, _ := pathTo("x2"); return p == "" })

	if out := c.MustFF(t, "migrate", srv, "--to", "h2", "--dry-run"); !strings.Contains(out, "its 2 shared-memory connections parked") {
		t.Errorf("--dry-run printed %q; want the two shm connections it parks", out)
	}
	move(srv, "h2")
	wantParked("shm1")
	wantParked("bulk1")
	// Its library meets h2's agent at its next call (an accepted
	// connection asks): from then on its listener is FreeFlow's there.
	runClient(t, c, "h2", nil, "redis-cli", "-h", srv, "PING")
	client("shm2", "h2", true, "incr.py")
	onShm("shm2")
	move(srv, "h1")
	wantParked("shm2")
	onShm("shm1")
	onShm("bulk1")

	// The connecting end moves: shm3's connection parks from its side.
	runClient(t, c, "h1", nil, "redis-cli", "-h", srv, "PING")
	client("shm3", "h1", true, "incr.py")
	onShm("shm3")
	move("shm3", "h2")
	wantParked("shm3")

	time.Sleep(300 * time.Millisecond)
	for _, name := range []string{"ov1", "ov2", "shm1", "bulk1", "shm2", "shm3"} {
		stop(name)
	}
	if out := runClient(t, c, "h2", nil, "redis-cli", "-h", srv, "--raw", "GET", "before").Stdout; out != value+"\n" {
		t.Errorf("GET after the moves: %d bytes, not the %d-byte value written before", len(out), len(value))
	}
	client("shm4", "h1", true, "incr.py")
	onShm("shm4")
	stop("shm4")
}

// TestMigrateUnderConnectionChurn: nginx moves while clients on its host
// open and close connections all the time (HTTP without keep-alive) and
// two keep theirs: a connection that ends while the move parks the others
// needs no parking, and does not make the move fail (before, every such
// move was refused: "closed before it was parked", "1 ends here and 0 at
// its peer"); every request is answered, none fails.
func TestMigrateUnderConnectionChurn(t *testing.T) {
	if m := testenv.Missing("nginx", "wrk", "criu"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	www := filepath.Dir(hostFile(t, "nginx.conf", []byte(nginxConf)))
	must(t, os.WriteFile(filepath.Join(www, "page"), randomBytes(64<<10), 0o644), "write page")
	srv := "churnweb"
	c.StartDetached(t, "h1", srv, volume(www, "/run/www"), "nginx", "-e", "stderr", "-c", "/run/www/nginx.conf")
	c.WaitListening(t, srv, 80)
	url := "http://" + srv + "/page"
	c.StartDetached(t, "h1", "churn", nil, "wrk", "-d8s", "-c8", "-t1", "-H", "Connection: close", url)
	c.StartDetached(t, "h1", "keep", nil, "wrk", "-d8s", "-c2", "-t1", url)
	time.Sleep(2 * time.Second)
	if out := c.MustFF(t, "migrate", srv, "--to", "h2"); !strings.Contains(out, "moved from h1 to h2") {
		t.Fatalf("migrate printed %q", out)
	}
	for _, name := range []string{"churn", "keep"} {
		testenv.WaitFor(t, name+" to finish", func() bool { return containerOf(t, c, name).Status == "exited" })
		out := c.MustFF(t, "logs", name)
		if !strings.Contains(out, "requests in") || strings.Contains(out, "Socket errors") || strings.Contains(out, "Non-2xx") {
			t.Errorf("wrk %s through the move:\n%s", name, out)
		} else {
			t.Logf("wrk %s: %s", name, strings.TrimSpace(out))
		}
	}
}

// TestMigrateContainerTalkingToItself: a container whose two processes
// talk over its own address (redis-server and a client checking every
// INCR) moves there and back: their shm connection is parked too (its bell
// is a socket the agent made, which CRIU cannot take: before, every such
// move was refused after 5 s, "its library still holds 1 sockets of its
// agent's"), back on shm after each move (both its ends moved), parked
// again at the next, and the client's replies go on, none lost.
func TestMigrateContainerTalkingToItself(t *testing.T) {
	if m := testenv.Missing("redis-server", "criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	ctl, flags := incrFlags(t)
	name := "selfredis"
	c.StartDetached(t, "h1", name, flags, "sh", "-c",
		`redis-server --protected-mode no --save "" --daemonize yes && exec python3 /run/incr.py "$0" k /run/ctl/stop`, name)
	onShm := func(when string) {
		testenv.WaitFor(t, "its connection to itself on shm "+when, func() bool {
			return strings.Count(c.MustFF(t, "conns"), " shm ") == 2
		})
	}
	onShm("before the moves")
	for _, to := range []string{"h2", "h1"} { // parked at each move, back on shm after it: both ends moved
		time.Sleep(300 * time.Millisecond)
		out := c.MustFF(t, "migrate", name, "--to", to)
		if !strings.Contains(out, "1 shared-memory connection was parked") || !strings.Contains(out, "to "+to) {
			t.Fatalf("migrate --to %s printed %q", to, out)
		}
		onShm("after the move to " + to)
	}
	time.Sleep(300 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(ctl, "stop"), nil, 0o644), "stop the client")
	testenv.WaitFor(t, "the client to finish", func() bool { return containerOf(t, c, name).Status == "exited" })
	if out := c.MustFF(t, "logs", name); !strings.HasPrefix(out, "OK ") {
		t.Errorf("the client in the moved container: %s", out)
	} else {
		t.Logf("client: %s", strings.TrimSpace(out))
	}
}

// TestMigrateWaitsForAccept: a connection its server has not accepted yet
// (in its listen queue, established for its client) when the move starts,
// accepted 1 s later: the move waits for the program to accept it before
// the checkpoint, which CRIU would refuse ("In-flight connection"; before,
// the move was refused), and the client's connection works after the move.
func TestMigrateWaitsForAccept(t *testing.T) {
	if m := testenv.Missing("criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	dir, err := filepath.Abs("testdata/migrate")
	must(t, err, "find testdata/migrate")
	ctl := t.TempDir()
	must(t, os.Chmod(ctl, 0o777), "open %s to the client", ctl)
	flags := append([]string{"--no-freeflow", "-v", ctl + ":/run/ctl"}, volume(dir, "/run/migrate")...)
	srv := "slowacc"
	c.StartDetached(t, "h1", srv, flags, "python3", "/run/migrate/slowaccept.py", "/run/ctl/accept")
	c.WaitListening(t, srv, 7002)
	c.StartDetached(t, "h2", "waiting", flags, "python3", "/run/migrate/waitclient.py", srv, "/run/ctl/go")
	testenv.WaitFor(t, "the client connected", func() bool { return strings.Contains(c.MustFF(t, "logs", "waiting"), "connected") })
	accept := time.AfterFunc(time.Second, func() { os.WriteFile(filepath.Join(ctl, "accept"), nil, 0o644) })
	defer accept.Stop()
	if out := c.MustFF(t, "migrate", srv, "--to", "h2"); !strings.Contains(out, "moved from h1 to h2") {
		t.Fatalf("migrate printed %q", out)
	}
	must(t, os.WriteFile(filepath.Join(ctl, "go"), nil, 0o644), "let the client send")
	testenv.WaitFor(t, "the client to finish", func() bool { return containerOf(t, c, "waiting").Status == "exited" })
	if out := c.MustFF(t, "logs", "waiting"); !strings.Contains(out, "OK") {
		t.Errorf("the client whose connection waited in the listen queue at the move: %s", out)
	}
}

// TestMigrateTupleSharedByTwoConnections: a client holds two shm
// connections to a redis-server at one 4-tuple (the library closed the
// first one's overlay socket at its swap, so its port was free for the
// second, as a busy client's connects reuse ports: 8 of 400
// redis-benchmark connections did), each INCRing a key of its own; the
// server moves: both are parked (the second with a new port at the
// client), and every reply on each is the one before plus 1 (before: the
// move was refused, "2 ends here and 2 at its peer").
func TestMigrateTupleSharedByTwoConnections(t *testing.T) {
	if m := testenv.Missing("redis-server", "criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	ctl, flags := incrFlags(t)
	script, err := filepath.Abs("testdata/migrate/sametuple.py")
	must(t, err, "find sametuple.py")
	srv := "tupleredis"
	c.StartDetached(t, "h1", srv, nil, "redis-server", "--protected-mode", "no", "--save", "")
	c.WaitListening(t, srv, 6379)
	c.StartDetached(t, "h1", "twoconns", append(flags, volume(script, "/run/sametuple.py")...), "python3", "/run/sametuple.py", srv, "/run/ctl/stop")
	testenv.WaitFor(t, "two shm connections at one tuple", func() bool {
		return strings.Count(c.MustFF(t, "conns"), " shm ") == 4
	})
	if out := c.MustFF(t, "migrate", srv, "--to", "h2"); !strings.Contains(out, "2 shared-memory connections were parked") {
		t.Fatalf("migrate printed %q; want both connections parked", out)
	}
	if n := strings.Count(c.MustFF(t, "conns"), " parked"); n != 4 {
		t.Errorf("after the move conns lists %d parked ends; want both ends of both connections", n)
	}
	time.Sleep(300 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(ctl, "stop"), nil, 0o644), "stop the client")
	testenv.WaitFor(t, "the client to finish", func() bool { return containerOf(t, c, "twoconns").Status == "exited" })
	if out := c.MustFF(t, "logs", "twoconns"); !strings.HasPrefix(out, "OK ") {
		t.Errorf("the client with two connections at one tuple: %s", out)
	} else {
		t.Logf("client: %s", strings.TrimSpace(out))
	}
}

// TestPairBackToShmAfterBackgroundSave: a redis-server saving in the
// background (BGSAVE forks) moves its same-host library client's shm
// connection down to a Unix socket pair, which a migration cannot park;
// once the save's child has exited, the agent brings the connection back
// onto shared memory while the client INCRs every 2 ms, and the server
// then moves to h2 with it parked. Every reply is the one before plus 1.
// Before, the connection stayed a socket pair and the move was refused.
func TestPairBackToShmAfterBackgroundSave(t *testing.T) {
	if m := testenv.Missing("redis-server", "redis-cli", "criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	ctl, flags := incrFlags(t)
	srv := "saving"
	c.StartDetached(t, "h1", srv, nil, "redis-server", "--protected-mode", "no", "--save", "", "--dir", "/tmp")
	c.WaitListening(t, srv, 6379)
	c.StartDetached(t, "h1", "counter", flags, "python3", "/run/incr.py", srv, "k", "/run/ctl/stop")
	testenv.WaitFor(t, "the client's connection on shm", func() bool {
		return strings.Count(c.MustFF(t, "conns"), " shm ") == 2
	})
	if out := c.MustFF(t, "exec", srv, "--", "redis-cli", "BGSAVE"); !strings.Contains(out, "Background saving started") {
		t.Fatalf("BGSAVE: %q", out)
	}
	testenv.WaitFor(t, "the connection moved down by the save's fork", func() bool {
		return strings.Contains(c.MustFF(t, "conns"), "moved-down")
	})
	testenv.WaitFor(t, "the connection back on shm once the save's child exited", func() bool {
		out := c.MustFF(t, "conns")
		return strings.Count(out, " shm ") == 2 && !strings.Contains(out, "moved-down")
	})
	if out := c.MustFF(t, "migrate", srv, "--to", "h2"); !strings.Contains(out, "1 shared-memory connection was parked") {
		t.Fatalf("migrate printed %q; want the client's connection parked", out)
	}
	time.Sleep(300 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(ctl, "stop"), nil, 0o644), "stop the client")
	testenv.WaitFor(t, "the client to finish", func() bool { return containerOf(t, c, "counter").Status == "exited" })
	if out := c.MustFF(t, "logs", "counter"); !strings.HasPrefix(out, "OK ") {
		t.Errorf("the client of the saving server: %s", out)
	} else {
		t.Logf("client: %s", strings.TrimSpace(out))
	}
}

// TestMigrateRefused: a migration that cannot be done safely says why and
// changes nothing: an unknown host, the host it is on; --dry-run moves
// nothing. (A library container's refusals: TestMigrateLibraryContainer.)
func TestMigrateRefused(t *testing.T) {
	if m := testenv.Missing("criu"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "nolib", []string{"--no-freeflow"}, "sleep", "3600")
	for _, tc := range []struct {
		args []string
		why  string
	}{
		{[]string{"nolib", "--to", "h9"}, "unknown host"},
		{[]string{"nolib", "--to", "h1"}, "already runs on h1"},
		{[]string{"nolib"}, "usage"},
	} {
		r := c.FF(t, append([]string{"migrate"}, tc.args...)...)
		if r.Code == 0 || !strings.Contains(r.Stderr, tc.why) {
			t.Errorf("migrate %s: exit %d, stderr %q; want a refusal saying %q", strings.Join(tc.args, " "), r.Code, r.Stderr, tc.why)
		}
	}
	if out := c.MustFF(t, "migrate", "nolib", "--to", "h2", "--dry-run"); !strings.Contains(out, "can migrate from h1 to h2") {
		t.Errorf("--dry-run printed %q", out)
	}
	if got := containerOf(t, c, "nolib"); got.Host != "h1" || got.Status != "running" {
		t.Errorf("after the refusals nolib is %+v; want it running on h1", got)
	}

	t.Run("replaced_bind_source", func(t *testing.T) {
		// A file bound into the container replaced on the host (as an
		// upgrade replaces bin/libfreeflow.so): CRIU could not restore the
		// bind, so the move is refused before it starts.
		dir := t.TempDir()
		f := filepath.Join(dir, "conf")
		must(t, os.WriteFile(f, []byte("one\n"), 0o644), "write %s", f)
		c.StartDetached(t, "h1", "bound", append([]string{"--no-freeflow"}, volume(f, "/run/conf")...), "sleep", "3600")
		must(t, os.WriteFile(f+".new", []byte("two\n"), 0o644), "write %s.new", f)
		must(t, os.Rename(f+".new", f), "replace %s", f)
		for _, dry := range []bool{true, false} {
			args := []string{"migrate", "bound", "--to", "h2"}
			if dry {
				args = append(args, "--dry-run")
			}
			r := c.FF(t, args...)
			if r.Code == 0 || !strings.Contains(r.Stderr, "replaced or deleted since it started") {
				t.Errorf("%s: exit %d, stderr %q; want a refusal naming the replaced file", strings.Join(args, " "), r.Code, r.Stderr)
			}
		}
		if got := containerOf(t, c, "bound"); got.Host != "h1" || got.Status != "running" {
			t.Errorf("after the refusal bound is %+v; want it running on h1", got)
		}
	})
}

type psLine struct {
	Name, Host, IP, Status string
}

// containerOf is container name's line of `freeflow ps`.
func containerOf(t *testing.T, c *testenv.Cluster, name string) psLine {
	t.Helper()
	var list []psLine
	must(t, json.Unmarshal([]byte(c.MustFF(t, "ps", "-o", "json")), &list), "parse ps -o json")
	for _, l := range list {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no container %s in ps", name)
	return psLine{}
}
