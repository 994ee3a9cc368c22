package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// loNetns makes a network namespace with lo up and returns its path.
func loNetns(t *testing.T) string {
	t.Helper()
	ns := makeNetns(t)
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("bring up lo in %s: %v: %s", ns, err, out)
	}
	return "/run/netns/" + ns
}

// guardIn installs the fabric guard in the namespace at path.
func guardIn(t *testing.T, path string) {
	t.Helper()
	if err := netns.Do(path, installFabricGuard); err != nil {
		t.Fatal(err)
	}
}

// markedCannotConnectAgain checks, in the namespace at path, that an
// unmarked connection can disconnect (connect AF_UNSPEC) and connect
// elsewhere, so the rules are what stops a marked one, which cannot.
func markedCannotConnectAgain(t *testing.T, path string) {
	t.Helper()
	a, b := listenIn(t, path), listenIn(t, path)
	fd := socketIn(t, path)
	connectedTo(t, fd, a)
	disconnect(t, fd)
	if err := connectWithin(fd, port(b)); err != nil {
		t.Fatalf("control: an unmarked socket could not connect again (%v), so the test proves nothing", err)
	}
	acceptOne(t, b)

	fd = socketIn(t, path)
	connectedTo(t, fd, a)
	if err := markConnected(fd); err != nil {
		t.Fatal(err)
	}
	disconnect(t, fd)
	if err := connectWithin(fd, port(b)); err == nil {
		t.Fatal("a marked connection connected again after AF_UNSPEC")
	}
}

// A handed fabric socket cannot reach anything else: in a namespace of its
// own, with the rules installFabricGuard puts there, a marked connection
// that disconnects (connect AF_UNSPEC) can neither connect again nor
// accept, and a marked listener accepts but cannot connect out. The same
// moves without the mark succeed, so the rules are what stops them.
func TestHandedSocketCannotConnectElsewhere(t *testing.T) {
	needRoot(t, "ip")
	path := loNetns(t)
	guardIn(t, path)
	markedCannotConnectAgain(t, path)
	a, b := listenIn(t, path), listenIn(t, path)

	// A handed connection turned into a listener: nothing completes a
	// connection to it.
	fd := socketIn(t, path)
	connectedTo(t, fd, a)
	if err := markConnected(fd); err != nil {
		t.Fatal(err)
	}
	disconnect(t, fd)
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	if err := connectWithin(socketIn(t, path), sockPort(t, fd)); err == nil {
		t.Fatal("a marked connection turned listener accepted a connection")
	}

	// A handed listener accepts, and once disconnected cannot connect out.
	ln := socketIn(t, path)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := markListener(ln); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		t.Fatal(err)
	}
	if err := connectWithin(socketIn(t, path), sockPort(t, ln)); err != nil {
		t.Fatalf("a marked listener did not accept: %v", err)
	}
	disconnect(t, ln)
	if err := connectWithin(ln, port(b)); err == nil {
		t.Fatal("a marked listener connected out after AF_UNSPEC")
	}
	b.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := b.Accept(); err == nil {
		c.Close()
		t.Fatal("a marked socket reached listener B")
	}
}

// The agent's image has no shell, iptables or nft (docs/KUBERNETES-DEPLOY.md):
// the guard installs with an empty PATH and still holds.
func TestFabricGuardWithoutIptablesOrNft(t *testing.T) {
	needRoot(t, "ip")
	path := loNetns(t)
	t.Setenv("PATH", t.TempDir())
	guardIn(t, path)
	markedCannotConnectAgain(t, path)
}

// A restarted agent installs the guard again over its predecessor's and
// ends with one table holding one chain of the two rules.
func TestRestartedAgentOneGuard(t *testing.T) {
	needRoot(t, "ip")
	path := loNetns(t)
	guardIn(t, path)
	guardIn(t, path)
	var tables []string
	var chains, rules int
	err := netns.Do(path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, t := range ts {
			tables = append(tables, t.Name)
		}
		cs, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, ch := range cs {
			if ch.Table.Name == guardTable.Name {
				chains++
			}
		}
		rs, err := c.GetRules(guardTable, guardChain)
		rules = len(rs)
		return err
	})
	if err != nil {
		t.Fatalf("list the guard: %v", err)
	}
	if len(tables) != 1 || tables[0] != guardTable.Name || chains != 1 || rules != len(guardRules()) {
		t.Fatalf("after two installs: inet tables %v, %d chains and %d rules in %s; want only %[4]s, 1 chain, %d rules",
			tables, chains, rules, guardTable.Name, len(guardRules()))
	}
	markedCannotConnectAgain(t, path)
}

// The host's firewall accepts everything on the output hook before the
// guard's chain runs: the guard still drops, as each base chain sees the
// packet and only a drop is final.
func TestFabricGuardHoldsBehindHostAccept(t *testing.T) {
	needRoot(t, "ip")
	path := loNetns(t)
	host := &nftables.Table{Family: nftables.TableFamilyINet, Name: "host-firewall"}
	err := netns.Do(path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.AddTable(host)
		ch := c.AddChain(&nftables.Chain{Table: host, Name: "output", Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10)})
		c.AddRule(&nftables.Rule{Table: host, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("add the host's accept-all chain: %v", err)
	}
	guardIn(t, path)
	markedCannotConnectAgain(t, path)
}

// Both ends of a host-tcp connection are handed marked.
func TestHostTCPSocketsMarked(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	withHostTCP(t, hs, 43500, func(con, acc pathResult) {
		for side, fd := range map[string]int{"connector": con.FD, "acceptor": acc.FD} {
			if m, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK); err != nil || m != fabricMarkConnected {
				t.Errorf("%s's host-tcp socket has mark %#x (%v), want %#x", side, m, err, fabricMarkConnected)
			}
		}
	})
}

// An agent that could not install its guard hands no fabric socket, on
// either side of a cross-host connection, and STATUS says why.
func TestNoFabricGuardOverlay(t *testing.T) {
	for _, unguarded := range []string{"h1", "h2"} {
		t.Run(unguarded, func(t *testing.T) {
			hs := startTwoHosts(t, func(c *Config) {
				if c.Host == unguarded {
					c.FabricGuard = true
					c.installGuard = func() error { return errors.New("no nf_tables") }
				}
			})
			bad := map[string]*testAgent{"h1": hs.h1, "h2": hs.h2}[unguarded]
			// (The test process is a container to both agents, so it
			// cannot ask STATUS on the admin socket.)
			if got := bad.status().FabricGuardError; !strings.Contains(got, "no nf_tables") {
				t.Errorf("STATUS fabric_guard_error = %q, want the install error", got)
			}
			if err := newLib(t, hs.h2).listen(srv2); err != nil {
				t.Fatal(err)
			}
			if unguarded == "h1" { // the connector's agent offers nothing
				r, err := newLib(t, hs.h1).connect(selfCli(43600), srv2)
				if err != nil || r.Kind != pathOverlay || r.Reason != reasonNoGuard || r.Elapsed > slackMax {
					t.Errorf("connect: %+v, %v; want overlay %s at once", r, err, reasonNoGuard)
				}
				return
			}
			con, acc := bothAsk(t, hs, 43601)
			if con.Kind != pathOverlay || con.Reason != reasonNoGuard || acc.Kind != pathOverlay || acc.Reason != reasonNoGuard {
				t.Errorf("connect %+v, accept %+v; want overlay %s for both", con, acc, reasonNoGuard)
			}
		})
	}
}

// A process that could clear the mark of a handed socket gets none: the
// test process (root in the host's user namespace, with every capability)
// takes the overlay, caller-may-clear-mark, whether it connects (its agent
// offers nothing) or accepts (its agent refuses the offer, and the
// connector learns why from the reply). A process without CAP_NET_RAW and
// CAP_NET_ADMIN, or with all capabilities in a user namespace of its own,
// gets host-tcp on either side. The agents run with the guard configured,
// but the rules are not installed: what they do is tested above.
func TestCallerMayClearMarkOverlay(t *testing.T) {
	needRoot(t, "setpriv", "unshare")
	if caps, err := capSets(int32(os.Getpid())); err != nil || caps&markCaps != markCaps {
		t.Fatalf("the test process has capability sets %#x (%v), without CAP_NET_RAW and CAP_NET_ADMIN: the test proves nothing", caps, err)
	}
	ownUserNS := []string{"unshare", "--user", "--map-root-user", "--"}
	hs := startTwoHosts(t, func(c *Config) {
		c.FabricGuard, c.installGuard = true, func() error { return nil }
	})
	h1Sock, h2Sock := hs.h1.cfg.LibrarySocket(), hs.h2.cfg.LibrarySocket()

	t.Run("connector", func(t *testing.T) {
		lis, cli := ffSelf2.IP+":5301", selfCli(43701)
		acc := startAskerVia(t, withoutMarkCaps, askSpec{Sock: h2Sock, Listen: lis, Ask: "accept", Local: lis, Remote: cli})
		acc.goAhead()
		con, err := newLib(t, hs.h1).connect(cli, lis)
		if err != nil || con.Kind != pathOverlay || con.Reason != reasonMayClearMark || con.Elapsed > slackMax {
			t.Errorf("connect: %+v, %v; want overlay %s at once", con, err, reasonMayClearMark)
		}
		if r := acc.result(t); r.Path != "overlay" {
			t.Errorf("accept: %+v; want overlay, as the connector", r)
		}
	})

	t.Run("acceptor", func(t *testing.T) {
		lis, cli := ffSelf2.IP+":5302", selfCli(43702)
		lib := newLib(t, hs.h2)
		if err := lib.listen(lis); err != nil {
			t.Fatal(err)
		}
		con := startAskerVia(t, withoutMarkCaps, askSpec{Sock: h1Sock, Ask: "connect", Local: cli, Remote: lis})
		con.goAhead()
		acc, err := lib.accept(lis, cli)
		if err != nil || acc.Kind != pathOverlay || acc.Reason != reasonMayClearMark {
			t.Errorf("accept: %+v, %v; want overlay %s", acc, err, reasonMayClearMark)
		}
		if r := con.result(t); r.Path != "overlay" || r.Reason != reasonMayClearMark {
			t.Errorf("connect: %+v; want overlay %s, as the acceptor", r, reasonMayClearMark)
		}

		// A parked meeting's acceptor has not asked yet: the processes
		// that registered the listener stand for it.
		good, bad := int32(con.cmd.Process.Pid), int32(os.Getpid())
		for _, c := range []struct {
			pids []int32
			want string
		}{{[]int32{good}, ""}, {[]int32{good, bad}, reasonMayClearMark}} {
			if got := hs.h2.acceptorRefusal(&meeting{park: true}, &listenerInfo{pids: c.pids}); got != c.want {
				t.Errorf("parked, listener registered by %v: %q, want %q", c.pids, got, c.want)
			}
		}
	})

	for i, c := range []struct {
		name       string
		viaC, viaA []string
	}{
		{"connector in its own user namespace", ownUserNS, withoutMarkCaps},
		{"acceptor in its own user namespace", withoutMarkCaps, ownUserNS},
	} {
		t.Run(c.name, func(t *testing.T) {
			lis, cli := fmt.Sprintf("%s:%d", ffSelf2.IP, 5310+i), selfCli(43710+i)
			_, _, cr, ar := askPairVia(t, c.viaC, c.viaA,
				askSpec{Sock: h1Sock, Ask: "connect", Local: cli, Remote: lis},
				askSpec{Sock: h2Sock, Listen: lis, Ask: "accept", Local: lis, Remote: cli})
			if cr.Path != "host-tcp" || ar.Path != "host-tcp" || cr.Data != "ok" || ar.Data != "ok" {
				t.Errorf("connect %+v, accept %+v; want host-tcp carrying data for both", cr, ar)
			}
		})
	}
}

// socketIn makes a TCP socket in the network namespace at path, closed
// when the test ends.
func socketIn(t *testing.T, path string) int {
	t.Helper()
	fd := -1
	err := netns.Do(path, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// listenIn listens on a free port of 127.0.0.1 in the namespace at path.
func listenIn(t *testing.T, path string) net.Listener {
	t.Helper()
	l, err := netns.Listen(path, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

func sockPort(t *testing.T, fd int) int {
	t.Helper()
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*unix.SockaddrInet4).Port
}

// connectedTo connects fd to l and takes the connection off l's queue.
func connectedTo(t *testing.T, fd int, l net.Listener) {
	t.Helper()
	if err := connectWithin(fd, port(l)); err != nil {
		t.Fatal(err)
	}
	acceptOne(t, l)
}

func acceptOne(t *testing.T, l net.Listener) {
	t.Helper()
	l.(*net.TCPListener).SetDeadline(time.Now().Add(time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// connectWithin connects fd to 127.0.0.1:port and reports whether it was
// connected within a second (a dropped SYN leaves it trying).
func connectWithin(fd, port int) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		return err
	}
	err := unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port})
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINPROGRESS) {
		return err
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(pfd, 1000)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("not connected within 1s")
	}
	if e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
		return errors.Join(err, unix.Errno(e))
	}
	return nil
}

// disconnect dissolves fd's association as a container's process can:
// connect with an AF_UNSPEC address (x/sys has no Sockaddr for it).
func disconnect(t *testing.T, fd int) {
	t.Helper()
	var sa [16]byte // sa_family 0: AF_UNSPEC
	if _, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), uintptr(len(sa))); e != 0 {
		t.Fatalf("connect AF_UNSPEC: %v", e)
	}
}
