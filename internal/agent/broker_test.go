package agent

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// The in-process tests broker connections of a container with itself
// ("connect to self"): the test process is container ffself, so both ends
// of every tuple are ffself's address and one agent serves both asks.
var ffSelf = func() directory.Container {
	c := selfContainer
	c.FreeFlow = true
	return c
}()

const (
	selfIP   = "10.244.1.9"
	selfSrv  = selfIP + ":8080"
	slackMax = 150 * time.Millisecond // scheduling slack on a loaded 2-core machine
)

func selfCli(port int) string { return fmt.Sprintf("%s:%d", selfIP, port) }

func TestSameHostRendezvousGivesSocketPair(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	srv, cli := newLib(t, a), newLib(t, a)
	if err := srv.listen("0.0.0.0:8080"); err != nil {
		t.Fatal(err)
	}
	var acc pathResult
	var accErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		acc, accErr = srv.accept(selfSrv, selfCli(40000))
	}()
	con, err := cli.connect(selfCli(40000), selfSrv)
	<-done
	if err != nil || accErr != nil {
		t.Fatalf("connect: %v; accept: %v", err, accErr)
	}
	defer closeFD(con.FD)
	defer closeFD(acc.FD)
	if con.Kind != pathUnix || acc.Kind != pathUnix {
		t.Fatalf("paths: connect %+v, accept %+v; want unix for both", con, acc)
	}
	if socketDomain(con.FD) != syscall.AF_UNIX || socketDomain(acc.FD) != syscall.AF_UNIX {
		t.Errorf("the halves are not AF_UNIX sockets")
	}
	if err := exchange(con.FD, acc.FD); err != nil {
		t.Fatalf("the two halves are not one socketpair: %v", err)
	}
}

// One side alone gets overlay (peer-timeout) after the bound, and a late
// ask for that tuple gets the recorded decision at once.
func TestBoundedWaitAndLateAsk(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	srv, cli := newLib(t, a), newLib(t, a)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	for _, first := range []protocol.Type{protocol.TypeConnect, protocol.TypeAccept} {
		port := 41000 + int(first)
		ask := func(l *libClient, typ protocol.Type) pathResult {
			t.Helper()
			local, remote := selfCli(port), selfSrv
			if typ == protocol.TypeAccept {
				local, remote = remote, local
			}
			r, err := l.ask(typ, local, remote)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		alone := ask(cli, first)
		if alone.Kind != pathOverlay || alone.Reason != reasonTimeout {
			t.Fatalf("%v alone: %+v, want overlay %s", first, alone, reasonTimeout)
		}
		if alone.Elapsed < meetWait || alone.Elapsed > meetWait+slackMax {
			t.Errorf("%v alone answered after %v, want %v plus a little", first, alone.Elapsed, meetWait)
		}
		other := protocol.TypeAccept + protocol.TypeConnect - first
		late := ask(srv, other)
		if late.Kind != pathOverlay || late.Reason != reasonTimeout || late.Elapsed > 20*time.Millisecond {
			t.Errorf("late %v: %+v, want the recorded overlay %s at once", other, late, reasonTimeout)
		}
		if dup := ask(srv, other); dup.Kind != pathOverlay {
			t.Errorf("a repeated %v got %+v", other, dup)
		}
	}
}

// Many tuples at once, the two asks of each arriving in either order and
// some too far apart: both ends always get the same answer, and every
// fast path's halves belong together.
func TestDecideOnceUnderRace(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	if err := newLib(t, a).listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	const n = 120
	type end struct {
		r   pathResult
		err error
	}
	results := make([][2]end, n)
	var wg sync.WaitGroup
	for i := range n {
		for s := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(80)) * time.Millisecond)
				l, err := dialLib(a.cfg.LibrarySocket())
				if err != nil {
					results[i][s].err = err
					return
				}
				defer l.conn.Close()
				if s == 0 {
					results[i][s].r, results[i][s].err = l.connect(selfCli(20000+i), selfSrv)
				} else {
					results[i][s].r, results[i][s].err = l.accept(selfSrv, selfCli(20000+i))
				}
			}()
		}
	}
	wg.Wait()
	fast, slow := 0, 0
	for i, r := range results {
		c, acc := r[0], r[1]
		if c.err != nil || acc.err != nil {
			t.Fatalf("tuple %d: %v / %v", i, c.err, acc.err)
		}
		if c.r.Kind != acc.r.Kind || c.r.Reason != acc.r.Reason {
			t.Errorf("tuple %d: connector %+v, acceptor %+v: the ends disagree", i, c.r, acc.r)
		}
		if c.r.Kind == pathUnix && acc.r.Kind == pathUnix {
			fast++
			if err := exchange(c.r.FD, acc.r.FD); err != nil {
				t.Errorf("tuple %d: halves do not belong together: %v", i, err)
			}
		} else {
			slow++
		}
		closeFD(c.r.FD)
		closeFD(acc.r.FD)
	}
	t.Logf("%d fast paths, %d timeouts", fast, slow)
	if fast == 0 {
		t.Error("no tuple got a fast path")
	}
}

// Every rule that decides overlay at once: the answer comes without
// waiting, carries its reason, and the other end gets the same.
func TestOverlayReasons(t *testing.T) {
	plain := directory.Container{ID: "plain0", Name: "plain", Host: testHost, IP: "10.244.1.20", Tenant: "blue", NetNS: "/nonexistent"}
	red := directory.Container{ID: "red0", Name: "red", Host: testHost, IP: "10.244.1.21", Tenant: "red", NetNS: "/nonexistent", FreeFlow: true}
	legacy := directory.Container{ID: "leg0", Name: "legacy", Host: testHost, IP: "10.244.1.22", Tenant: "blue", NetNS: "/nonexistent", FreeFlow: true}
	nolisten := directory.Container{ID: "nol0", Name: "nolisten", Host: testHost, IP: "10.244.1.23", Tenant: "blue", NetNS: "/nonexistent", FreeFlow: true}
	dir := newFakeDir(ffSelf, plain, red, legacy, nolisten)
	dir.setPolicy(`{"no_fast_path": ["legacy"]}`)
	a := startAgent(t, dir, nil)
	waitPolicy(t, a, "legacy")
	l := newLib(t, a)
	cases := []struct{ remote, reason string }{
		{"10.1.2.3:80", reasonNotContainer},
		{plain.IP + ":80", reasonPeerNoLib},
		{red.IP + ":80", "tenant-differs"},
		{legacy.IP + ":80", "no-fast-path"},
		{nolisten.IP + ":80", reasonNoListener},
	}
	for i, c := range cases {
		local := selfCli(30000 + i)
		r, err := l.connect(local, c.remote)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != pathOverlay || r.Reason != c.reason || r.Elapsed > 20*time.Millisecond {
			t.Errorf("connect to %s: %+v, want overlay %s at once", c.remote, r, c.reason)
		}
	}
	// The acceptor of a refused tuple learns the connector's reason at once
	// (here the connector saw no registered listener on our port 9090).
	con, _ := l.connect(selfCli(30100), selfIP+":9090")
	acc, err := newLib(t, a).accept(selfIP+":9090", selfCli(30100))
	if err != nil || acc.Kind != pathOverlay || acc.Reason != reasonNoListener || con.Reason != reasonNoListener || acc.Elapsed > 20*time.Millisecond {
		t.Errorf("acceptor after a refused connect: %+v, %v; connector %+v", acc, err, con)
	}
	// A container started --no-freeflow gets the overlay even if a library
	// asks from inside it.
	b := startAgent(t, newFakeDir(selfContainer), nil)
	if r, err := newLib(t, b).connect(selfCli(30200), selfSrv); err != nil || r.Reason != reasonSelfNoLib {
		t.Errorf("connect from a --no-freeflow container: %+v, %v", r, err)
	}
}

// waitPolicy waits until the agent applies a policy naming name.
func waitPolicy(t *testing.T, a *testAgent, name string) {
	t.Helper()
	for range 100 {
		for _, n := range a.policy().NoFastPath {
			if n == name {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the agent did not load the policy document")
}

// A container may speak only for its own address.
func TestLocalEndpointSpoofingRefused(t *testing.T) {
	other := directory.Container{ID: "o0", Name: "other", Host: testHost, IP: "10.244.1.30", Tenant: "blue", NetNS: "/nonexistent", FreeFlow: true}
	a := startAgent(t, newFakeDir(ffSelf, other), nil)
	l := newLib(t, a)
	_, err := l.connect(other.IP+":40000", selfSrv)
	wantCode(t, err, protocol.CodeDenied)
	_, err = l.accept(other.IP+":8080", selfCli(40000))
	wantCode(t, err, protocol.CodeDenied)
	wantCode(t, l.listen(other.IP+":8080"), protocol.CodeDenied)
	wantCode(t, l.listen("127.0.0.1:8080"), protocol.CodeDenied)
	if err := l.listen("[::]:8080"); err != nil {
		t.Errorf("LISTEN on the unspecified IPv6 address: %v", err)
	}
	if err := l.listen("[::ffff:" + selfIP + "]:8081"); err != nil {
		t.Errorf("LISTEN on the IPv4-mapped own address: %v", err)
	}
}

// `freeflow conns` lists what the agent answered; CLOSED removes an entry;
// STATUS counts both kinds.
func TestConnsListingAndClosed(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := fastPathListed(t, a, 40001)
	cli.connect(selfCli(40002), "10.1.2.3:443")
	// This process is a container here, so the admin socket refuses it:
	// read the tables directly (TestConnsOverAdminSocket goes over the wire).
	got := a.live.list()
	want := []agentapi.ConnInfo{ // sorted by container, then local address as text
		{Local: selfCli(40001), Remote: selfSrv, LocalContainer: "self", RemoteContainer: "self", Path: "unix", Reason: reasonLibNoShm},
		{Local: selfCli(40002), Remote: "10.1.2.3:443", LocalContainer: "self", Path: "overlay", Reason: reasonNotContainer},
		{Local: selfSrv, Remote: selfCli(40001), LocalContainer: "self", RemoteContainer: "self", Path: "unix", Reason: reasonLibNoShm},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("conns:\n got %+v\nwant %+v", got, want)
	}
	if err := cli.closed(selfCli(40001), selfSrv); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.lookup(selfIP); err != nil { // CLOSED is applied before it
		t.Fatal(err)
	}
	if got := a.live.list(); len(got) != 2 || got[0].Local == selfCli(40001) {
		t.Errorf("after CLOSED: %+v", got)
	}
	c := a.status().Connections
	if c.FastPath != 2 || c.Unix != 2 || c.Fallback != 1 || c.FallbackReasons[reasonNotContainer] != 1 || c.Live != 2 {
		t.Errorf("counters: %+v", c)
	}
}

// A client that connects fast reuses its ports within seconds, and a swapped
// connection's overlay socket is closed, so a 4-tuple both ends were already
// answered for comes back as a new connection: it meets afresh and gets its
// own fast path, not the old record (duplicate-request).
func TestReusedTupleMeetsAfresh(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	srv, cli := newLib(t, a), newLib(t, a)
	if err := srv.listen("0.0.0.0:8080"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		con, acc := meet(t, srv, cli, selfCli(40100), selfSrv)
		if con.Kind != pathUnix || acc.Kind != pathUnix {
			t.Fatalf("connection %d on the same tuple: connect %+v, accept %+v; want unix for both", i, con, acc)
		}
		if err := exchange(con.FD, acc.FD); err != nil {
			t.Errorf("connection %d: the two halves are not one channel: %v", i, err)
		}
		closeFD(con.FD)
		closeFD(acc.FD)
	}
}
