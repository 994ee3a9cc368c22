package agent

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/netns"
)

// vethPair joins namespaces a and b with a veth, a at 10.99.0.1/24 and b
// at 10.99.0.2/24.
func vethPair(t *testing.T, a, b string) {
	t.Helper()
	ends := "ffp" + randName(5)
	for _, args := range [][]string{
		{"link", "add", ends + "a", "netns", a, "type", "veth", "peer", "name", ends + "b", "netns", b},
		{"-n", a, "addr", "add", "10.99.0.1/24", "dev", ends + "a"},
		{"-n", b, "addr", "add", "10.99.0.2/24", "dev", ends + "b"},
		{"-n", a, "link", "set", ends + "a", "up"},
		{"-n", b, "link", "set", ends + "b", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
}

// TestParkedPairCarriesBytesBothWays: the TCP connection the agent makes
// without a handshake for a parked shm connection carries 8 MiB each way,
// intact and in order, and an end's close reaches the other as EOF; it
// can take the port of a listener at the tuple, as a parked accepted
// connection does; a second connection at one tuple gets a free port at
// its client's end (renumbered).
func TestParkedPairCarriesBytesBothWays(t *testing.T) {
	for _, renumbered := range []bool{false, true} {
		t.Run(fmt.Sprint("renumbered=", renumbered), func(t *testing.T) {
			nsA, nsB := makeNetns(t), makeNetns(t)
			vethPair(t, nsA, nsB)
			a, b := netip.MustParseAddrPort("10.99.0.1:40001"), netip.MustParseAddrPort("10.99.0.2:6379")
			lis, err := netns.Listen("/run/netns/"+nsB, "tcp4", b.String())
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			fa, fb, err := repairedPair("/run/netns/"+nsA, a, false, "/run/netns/"+nsB, b, false, renumbered)
			if err != nil {
				t.Fatal(err)
			}
			ca, cb := fileConn(t, fa), fileConn(t, fb)
			carries(t, ca, cb)
			if got := cb.LocalAddr().String(); got != b.String() {
				t.Errorf("b's end is at %s, want %s", got, b)
			}
			if got := ca.LocalAddr().String(); (got == a.String()) == renumbered || cb.RemoteAddr().String() != got {
				t.Errorf("a's end is at %s, b's is connected to %s (a's port %d, renumbered %v)", got, cb.RemoteAddr(), a.Port(), renumbered)
			}
			ca.Close()
			if n, err := cb.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("after a closed: read %d, %v; want EOF", n, err)
			}
		})
	}
}

// carries checks that 8 MiB written at each end arrive at the other intact.
func carries(t *testing.T, ca, cb net.Conn) {
	t.Helper()
	want := make([]byte, 8<<20)
	rand.Read(want)
	check := func(from, to net.Conn, name string) chan error {
		done := make(chan error, 1)
		go func() { _, err := from.Write(want); done <- err }()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(to, got); err != nil {
			t.Fatalf("%s: read: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the bytes read differ from those written", name)
		}
		return done
	}
	if err := <-check(ca, cb, "a to b"); err != nil {
		t.Fatal(err)
	}
	if err := <-check(cb, ca, "b to a"); err != nil {
		t.Fatal(err)
	}
}

func fileConn(t *testing.T, fd int) net.Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "parked")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// liveShmEnd is a live shm ledger entry of container c's process pid.
func liveShmEnd(c directory.Container, pid int32, local, remote string) ledgerEnd {
	return ledgerEnd{self: c, l: &ledger{self: c, pid: pid},
		ledgerEntry: ledgerEntry{path: pathShm, local: netip.MustParseAddrPort(local), remote: netip.MustParseAddrPort(remote)}}
}

// TestParkableTakesOnlyEndsAtTheirOwnAddress: the connections a move parks
// are the moving container's shm ends with their peers; a ledger entry
// whose local address is not its container's (a hostile container listing
// itself as a victim's peer, or the victim itself) neither refuses the move
// nor stands in for the peer; a connection inside the container is parked
// once (its bell is the agent's socket, which CRIU cannot take); one whose
// peer closed its end is left alone; a 4-tuple with two live
// ends is refused before anything is parked.
func TestParkableTakesOnlyEndsAtTheirOwnAddress(t *testing.T) {
	mover := directory.Container{ID: "m", Name: "m", IP: "10.244.1.2"}
	peer := directory.Container{ID: "p", Name: "p", IP: "10.244.1.3"}
	evil := directory.Container{ID: "e", Name: "e", IP: "10.244.1.9"}
	live := []ledgerEnd{
		liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.3:40000"),
		liveShmEnd(peer, 20, "10.244.1.3:40000", "10.244.1.2:6379"),
		// The hostile container claims the peer's end, and one of the mover's own.
		liveShmEnd(evil, 30, "10.244.1.3:40000", "10.244.1.2:6379"),
		liveShmEnd(evil, 30, "10.244.1.2:6379", "10.244.1.3:40000"),
		// Two processes of the mover talk to each other.
		liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.2:41000"),
		liveShmEnd(mover, 11, "10.244.1.2:41000", "10.244.1.2:6379"),
		// Not shm: moves with it as it is.
		{self: mover, l: &ledger{self: mover, pid: 10}, ledgerEntry: ledgerEntry{path: pathOverlay,
			local: netip.MustParseAddrPort("10.244.1.2:6379"), remote: netip.MustParseAddrPort("10.244.1.3:40001")}},
	}
	pairs, lonely, err := parkable(live, "m", clientPorts)
	if err != nil || len(lonely) != 0 || len(pairs) != 2 || pairs[0].m.l.pid != 10 || pairs[0].p.self.ID != "p" || pairs[0].p.l.pid != 20 || pairs[0].renumber != renumberNone {
		t.Fatalf("parkable: %v, %v; want the connection to p, the peer's end its own, then the one inside m", pairs, err)
	}
	if inside := pairs[1]; inside.m.l.pid != 10 || inside.p.l.pid != 11 {
		t.Fatalf("the connection inside m parked as %v; want it once, from one end to the other", inside)
	}
	// A client closed its end, the mover's is still open: not parked, not refused.
	closedByPeer := append(live, liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.3:40002"))
	if pairs, lonely, err := parkable(closedByPeer, "m", clientPorts); err != nil || len(pairs) != 2 || len(lonely) != 1 || lonely[0].remote.Port() != 40002 {
		t.Fatalf("parkable with a peer's end gone: %v, lonely %v, %v; want the one pair and the end left alone", pairs, lonely, err)
	}
	// The peer reused the tuple while the first connection lives on, in another process.
	reused := append(live, liveShmEnd(peer, 21, "10.244.1.3:40000", "10.244.1.2:6379"))
	if pairs, _, err := parkable(reused, "m", clientPorts); err == nil || len(pairs) != 0 || !strings.Contains(err.Error(), "1 ends here and 2 at its peer") {
		t.Fatalf("parkable with a tuple reused: %v, %v; want a refusal and nothing to park", pairs, err)
	}
}

// TestParkableRenumbersATupleSharedByTwoConnections: two live connections
// between the same two processes at one 4-tuple (a swap freed the first
// one's overlay port, the client's next connect got it) are both parked,
// the second with a port of its own at the client's end; ends of one
// tuple spread over two processes are refused, as the libraries could not
// pair them.
func TestParkableRenumbersATupleSharedByTwoConnections(t *testing.T) {
	mover := directory.Container{ID: "m", Name: "m", IP: "10.244.1.2"}
	peer := directory.Container{ID: "p", Name: "p", IP: "10.244.1.3"}
	live := []ledgerEnd{
		liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.3:40005"),
		liveShmEnd(peer, 20, "10.244.1.3:40005", "10.244.1.2:6379"),
		liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.3:40005"),
		liveShmEnd(peer, 20, "10.244.1.3:40005", "10.244.1.2:6379"),
	}
	pairs, _, err := parkable(live, "m", clientPorts)
	if err != nil || len(pairs) != 2 || pairs[0].renumber != renumberNone || pairs[1].renumber != renumberP {
		t.Fatalf("parkable: %+v, %v; want both, the second renumbered at the peer (the client)", pairs, err)
	}
	// The moving container is the client.
	if pairs, _, err := parkable(live, "p", clientPorts); err != nil || len(pairs) != 2 || pairs[1].renumber != renumberM {
		t.Fatalf("parkable of the client: %+v, %v; want both, the second renumbered at the mover", pairs, err)
	}
	// Two processes of the mover, two connections at one tuple: parked once each.
	inside := []ledgerEnd{
		liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.2:40007"),
		liveShmEnd(mover, 11, "10.244.1.2:40007", "10.244.1.2:6379"),
		liveShmEnd(mover, 10, "10.244.1.2:6379", "10.244.1.2:40007"),
		liveShmEnd(mover, 11, "10.244.1.2:40007", "10.244.1.2:6379"),
	}
	if pairs, _, err := parkable(append(inside, live...), "m", clientPorts); err != nil || len(pairs) != 4 ||
		pairs[0].renumber != renumberNone || pairs[1].renumber != renumberNone || pairs[2].renumber == renumberNone || pairs[3].renumber == renumberNone {
		t.Fatalf("parkable with a tuple shared inside the mover too: %+v, %v; want four pairs, the renumbered ones last", pairs, err)
	}
	live[3] = liveShmEnd(peer, 22, "10.244.1.3:40005", "10.244.1.2:6379")
	if pairs, _, err := parkable(live, "m", clientPorts); err == nil || len(pairs) != 0 {
		t.Fatalf("parkable with the peer's ends in two processes: %+v, %v; want a refusal", pairs, err)
	}
}

// clientPorts is the default ephemeral range's test.
func clientPorts(_ string, p uint16) bool { return p >= 32768 && p <= 60999 }

// TestParkingThreadKnownByContainerAndPid: a session of another container
// whose process had the pid a victim's process has now never takes the
// victim's place, nor is the victim's parking thread known through it.
func TestParkingThreadKnownByContainerAndPid(t *testing.T) {
	w := newWatchers()
	victim, stale := &session{pid: 77, self: directory.Container{ID: "v"}}, &session{pid: 77, self: directory.Container{ID: "h"}}
	vk, hk := watchKey{"v", 77}, watchKey{"h", 77}
	w.attach(hk, stale)
	if w.known(vk) {
		t.Fatal("the victim's parking thread is known through another container's session")
	}
	w.attach(vk, victim)
	w.attach(hk, stale) // the stale session WATCHes again
	job := &parkJob{done: make(chan error, 1)}
	w.push(vk, job)
	if got := w.pop(hk, stale); got != nil {
		t.Fatal("the other container's session got the victim's job")
	}
	if got := w.pop(vk, stale); got != nil {
		t.Fatal("the other container's session got the victim's job by its key")
	}
	if got := w.pop(vk, victim); got != job {
		t.Fatal("the victim's session did not get its job")
	}
	// An older session of the victim's process that ends does not unregister the newer one.
	newer := &session{pid: 77, self: directory.Container{ID: "v"}}
	w.attach(vk, newer)
	w.drop(victim)
	if !w.known(vk) {
		t.Fatal("the end of an older session unregistered the process's newer one")
	}
}
