package agent

import (
	"fmt"
	"os"
	"testing"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// A listener's registration ends with its process: once the process that
// sent LISTEN has exited, a CONNECT to its port is answered overlay
// (listener-not-freeflow) at once, also within nsCheckEvery of the last
// check of its namespace.
func TestListenerGoneWithItsProcess(t *testing.T) {
	nsB := makeNetns(t)
	cb := container("cb", "db", "10.244.1.3", nsB)
	cb.FreeFlow = true
	a := startAgent(t, newFakeDir(ffSelf, cb), nil)
	srv := startAsker(t, nsB, askSpec{Sock: a.cfg.LibrarySocket(), Listen: "0.0.0.0:6379",
		Ask: "accept", Local: "10.244.1.3:6379", Remote: selfCli(40100)})
	cli := newLib(t, a)
	// Registered: the connector waits for an ACCEPT, which never comes.
	if r, err := cli.connect(selfCli(40101), "10.244.1.3:6379"); err != nil || r.Reason != reasonTimeout {
		t.Fatalf("CONNECT to the live listener: %+v, %v; want overlay %s", r, err, reasonTimeout)
	}
	srv.finish()
	r, err := cli.connect(selfCli(40102), "10.244.1.3:6379")
	if err != nil || r.Reason != reasonNoListener || r.Elapsed >= meetWait {
		t.Errorf("CONNECT after the listener's process exited: %+v, %v; want overlay %s at once", r, err, reasonNoListener)
	}
}

// keysOf lists exactly one process's registrations in its namespace,
// through every add and removal (it reads an index, not the whole table:
// every CONNECT and ACCEPT asks it).
func TestListenerKeysOfOneProcess(t *testing.T) {
	l := newListeners()
	ns, other := nsKey{1, 1}, nsKey{1, 2}
	p1, p2 := &session{pid: 10, ns: ns}, &session{pid: 11, ns: ns}
	for _, port := range []uint16{80, 443} {
		if err := l.add(p1, "c1", port); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.add(p2, "c1", 80); err != nil {
		t.Fatal(err)
	}
	want := func(pid int32, in nsKey, keys ...listenerKey) {
		t.Helper()
		got := l.keysOf(pid, in)
		if len(got) != len(keys) {
			t.Fatalf("keysOf(%d) = %v, want %v", pid, got, keys)
		}
		for _, k := range keys {
			if !got[k] {
				t.Fatalf("keysOf(%d) = %v, want %v", pid, got, keys)
			}
		}
	}
	want(10, ns, listenerKey{"c1", 80}, listenerKey{"c1", 443})
	want(11, ns, listenerKey{"c1", 80})
	want(10, other)
	l.remove(p1, "c1", 80)
	want(10, ns, listenerKey{"c1", 443})
	want(11, ns, listenerKey{"c1", 80})
	l.remove(p1, "c1", 443)
	want(10, ns)
	if len(l.byPid) != 1 {
		t.Errorf("index keeps %d processes, want 1: %v", len(l.byPid), l.byPid)
	}
}

// A connecting library older than the SYN mark (no CAPS bit 3) gets the
// overlay at once (old-library) to a listener whose every library asks
// only about marked SYNs: none of them will ask about its connection, and
// it waited meetWait for each (a rolling upgrade made every connection of
// a client not yet restarted wait 45 ms). A listener of an old library is
// still waited for, and so is a marking connector.
func TestOldConnectorLibraryTakesOverlayAtOnce(t *testing.T) {
	nsB := makeNetns(t)
	cb := container("cb", "db", "10.244.1.3", nsB)
	cb.FreeFlow = true
	a := startAgent(t, newFakeDir(ffSelf, cb), nil)
	startAsker(t, nsB, askSpec{Sock: a.cfg.LibrarySocket(), Listen: "0.0.0.0:6379", Caps: protocol.CapSynMark})
	startAsker(t, nsB, askSpec{Sock: a.cfg.LibrarySocket(), Listen: "0.0.0.0:6380"})
	old, marking := newLib(t, a), newLibCaps(t, a, protocol.CapSynMark)
	r, err := old.connect(selfCli(40201), "10.244.1.3:6379")
	if err != nil || r.Kind != pathOverlay || r.Reason != reasonOldLibrary || r.Elapsed >= meetWait {
		t.Errorf("old library to a marking listener: %+v, %v; want overlay %s at once", r, err, reasonOldLibrary)
	}
	for _, c := range []struct {
		lib  *libClient
		port int
		what string
	}{{old, 6380, "old library to an old listener"}, {marking, 6379, "marking library to a marking listener"}} {
		r, err := c.lib.connect(selfCli(40202+c.port-6379), fmt.Sprintf("10.244.1.3:%d", c.port))
		if err != nil || r.Reason != reasonTimeout || r.Elapsed < meetWait {
			t.Errorf("%s: %+v, %v; want its ACCEPT waited for (%s)", c.what, r, err, reasonTimeout)
		}
	}
}

// A process that accepted on a listener stays an acceptor when it
// registers the listener again (an agent restart, a listener reopened):
// links for that listener stay refused to the other process. One that
// only holds the listener (a pre-forking server's master) leaves the
// other the sole acceptor. Both are live processes of this namespace
// (the test and its parent), as soleAcceptor checks.
func TestListenerAcceptorKeptAcrossListenAgain(t *testing.T) {
	ns, err := nsOfPid(int32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	l := newListeners()
	worker, master := &session{pid: int32(os.Getpid()), ns: ns}, &session{pid: int32(os.Getppid()), ns: ns}
	for _, s := range []*session{worker, master} {
		if err := l.add(s, "c1", 80); err != nil {
			t.Fatal(err)
		}
	}
	l.accepting("c1", 80, worker.pid)
	if !l.soleAcceptor("c1", 80, worker.pid) {
		t.Fatal("the master never accepted, yet the worker is not the sole acceptor")
	}
	l.accepting("c1", 80, master.pid)
	if err := l.add(master, "c1", 80); err != nil {
		t.Fatal(err)
	}
	if l.soleAcceptor("c1", 80, worker.pid) {
		t.Fatal("the master accepted, then registered again: the worker is still called the sole acceptor")
	}
}
