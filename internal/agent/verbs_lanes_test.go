package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// dialChild connects to the library socket (envSock) from the network
// namespace it runs in, hands the connection to its parent over its fd 3,
// and waits for its stdin to close: the agent identifies a session by the
// namespace of the process that connected, when it accepts it.
func dialChild() int {
	c, err := protocol.Dial(os.Getenv(envSock))
	if err == nil {
		var f *os.File
		if f, err = c.Unix().File(); err == nil {
			err = unix.Sendmsg(3, []byte{1}, unix.UnixRights(int(f.Fd())), nil, 0)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial child:", err)
		return 2
	}
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// libInNetns opens a library session of the container whose namespace is
// ns: a child connects from there and hands the connection over, and stays
// until the agent has answered HELLO. The session is closed when the test
// ends.
func libInNetns(t *testing.T, a *testAgent, ns string) *libClient {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	end := os.NewFile(uintptr(sp[1]), "dial-back")
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=dial", envSock+"="+a.cfg.LibrarySocket())
	cmd.ExtraFiles, cmd.Stderr = []*os.File{end}, os.Stderr
	stdin, _ := cmd.StdinPipe()
	err = cmd.Start()
	end.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sp[0], make([]byte, 1), oob, 0) // EOF if the child fails
	var fds []int
	if err == nil {
		var msgs []unix.SocketControlMessage
		if msgs, err = unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			fds, err = unix.ParseUnixRights(&msgs[0])
		}
	}
	if err != nil || len(fds) != 1 {
		t.Fatalf("the child in netns %s handed no connection (%d fds, %v)", ns, len(fds), err)
	}
	f := os.NewFile(uintptr(fds[0]), "session")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := &libClient{conn: protocol.NewConn(c.(*net.UnixConn))}
	t.Cleanup(func() { l.conn.Close() })
	if _, _, err := l.call(protocol.New(protocol.TypeHello, 0)); err != nil {
		t.Fatalf("HELLO from netns %s: %v", ns, err)
	}
	return l
}

// otherContainer starts an agent that knows selfContainer (A, this
// process's namespace) and container B in a namespace of its own (LID
// otherLID), and returns it with a session of B's.
func otherContainer(t *testing.T, mod func(*Config)) (*testAgent, *libClient) {
	t.Helper()
	ns := makeNetns(t)
	a := startAgent(t, newFakeDir(selfContainer, container("b0", "b", "10.244.1.40", ns)), mod)
	return a, libInNetns(t, a, ns)
}

const otherLID = 0x0128

// newUDQP registers a UD QP, with a doorbell if belled; it returns its QPN,
// its memfd and the owner's end of its doorbell (-1: none).
func newUDQP(t *testing.T, l *libClient, belled bool) (uint32, int, int) {
	t.Helper()
	fds, bell := []int{newQPMemfd(t)}, -1
	if belled {
		b := newDoorbell(t)
		fds, bell = append(fds, b[1]), b[0]
	}
	r, _, err := l.call(protocol.New(protocol.TypeVerbsQPCreate, 0, protocol.VerbsQP{Type: protocol.QPTypeUD, PD: 1}.Attr()), fds...)
	if err != nil {
		t.Fatalf("a UD QP: %v", err)
	}
	qpn, err := r.U32(protocol.AttrQPN)
	if err != nil {
		t.Fatal(err)
	}
	return qpn, fds[0], bell
}

// udLane asks for a lane from the caller's QP qpn to the QP to, on the lane
// memfd fd; it returns the doorbell the answer hands over (-1: none),
// closed when the test ends.
func (l *libClient) udLane(t *testing.T, qpn uint32, to protocol.VerbsPeer, fds ...int) (int, error) {
	r, got, err := l.call(protocol.New(protocol.TypeVerbsUDLane, 0, protocol.U32(protocol.AttrQPN, qpn), to.Attr()), fds...)
	if err != nil {
		return -1, err
	}
	t.Cleanup(func() { protocol.CloseFDs(got) })
	if r.Type != protocol.TypeOK || len(got) > 1 {
		return -1, errors.New("VERBS_UD_LANE answered " + r.Type.String() + " with more than one fd")
	}
	if len(got) == 0 {
		return -1, nil
	}
	return got[0], nil
}

// newLane makes a fresh lane memfd and asks for a lane on it, which must
// be given; it returns the memfd.
func (l *libClient) newLane(t *testing.T, qpn uint32, to protocol.VerbsPeer) int {
	t.Helper()
	fd := newQPMemfd(t)
	if _, err := l.udLane(t, qpn, to, fd); err != nil {
		t.Fatalf("a lane from QP %#x to %+v: %v", qpn, to, err)
	}
	return fd
}

// udLanes asks for the lanes to the caller's QP qpn from id first on; the
// fds are closed when the test ends.
func (l *libClient) udLanes(t *testing.T, qpn, first uint32) ([]protocol.Lane, []int, error) {
	r, fds, err := l.call(protocol.New(protocol.TypeVerbsUDLanes, 0, protocol.U32(protocol.AttrQPN, qpn), protocol.U32(protocol.AttrOffset, first)))
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { protocol.CloseFDs(fds) })
	lanes, err := r.Lanes()
	if err == nil && (r.Type != protocol.TypeOK || len(lanes) != len(fds)) {
		err = errors.New("VERBS_UD_LANES answered " + r.Type.String() + " with lanes and fds that differ in number")
	}
	return lanes, fds, err
}

// laneIDs returns the ids of lanes.
func laneIDs(lanes []protocol.Lane) []uint32 {
	ids := make([]uint32, len(lanes))
	for i, l := range lanes {
		ids[i] = l.ID
	}
	return ids
}

// lanesWord reads the lanes word of the QP memfd fd.
func lanesWord(t *testing.T, fd int) uint32 {
	t.Helper()
	mem := mapShared(t, fd, 4096, unix.PROT_READ)
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[protocol.VQPOffLanes])))
}

// selfPeer and otherPeer name QP qpn of container A (this process's) and B
// by LID, as a UD address handle does.
func selfPeer(qpn uint32) protocol.VerbsPeer  { return lidPeer(qpn, selfLID) }
func otherPeer(qpn uint32) protocol.VerbsPeer { return lidPeer(qpn, otherLID) }

// A lane from a UD QP of container A to one of container B: A gets B's
// doorbell, B's lanes word counts it and its doorbell rings, and B's
// VERBS_UD_LANES names A's QP, LID and GID with A's very memfd, shared
// both ways. The lane is a held file of A's, not of B's.
func TestVerbsUDLaneBetweenContainers(t *testing.T) {
	a, lb := otherContainer(t, nil)
	la := newLib(t, a)
	qa, _, _ := newUDQP(t, la, false)
	qb, fdb, bellB := newUDQP(t, lb, true)
	lane := newQPMemfd(t)
	bell, err := la.udLane(t, qa, otherPeer(qb), lane)
	if err != nil {
		t.Fatal(err)
	}
	waitRing(t, bellB, "a new lane")
	if n := lanesWord(t, fdb); n != 1 {
		t.Fatalf("B's lanes word is %d after one lane, want 1", n)
	}
	if bell < 0 {
		t.Fatal("the lane's OK carries no doorbell; B's QP has one")
	}
	if _, err := unix.Write(bell, []byte{1}); err != nil {
		t.Fatalf("ring the handed doorbell: %v", err)
	}
	waitRing(t, bellB, "a ring on the doorbell handed to the sender")

	lanes, fds, err := lb.udLanes(t, qb, 1)
	if err != nil || len(lanes) != 1 {
		t.Fatalf("B's lanes: %+v, %v; want the one from A", lanes, err)
	}
	from := protocol.VerbsPeer{QPN: qa, LID: selfLID, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 244, 14: 1, 15: 9}}
	if lanes[0].ID != 1 || lanes[0].From != from {
		t.Fatalf("B's lane %+v, want id 1 from %+v (A's QP, LID and GID)", lanes[0], from)
	}
	if !sameFile(t, fds[0], lane) {
		t.Fatal("the lane B got is not A's memfd")
	}
	mine, theirs := mapShared(t, lane, 8192, unix.PROT_READ|unix.PROT_WRITE), mapShared(t, fds[0], 8192, unix.PROT_READ|unix.PROT_WRITE)
	mine[4096] = 0x5a
	theirs[protocol.VQPOffProd+64] = 0xa5 // the receiver's cons word
	if theirs[4096] != 0x5a || mine[protocol.VQPOffProd+64] != 0xa5 {
		t.Fatal("bytes written through one end of the lane are not at the other")
	}
	held := map[string]int{}
	for _, m := range a.verbsMemList() {
		held[m.Container] = m.Memfds
	}
	if held["self"] != 2 || held["b"] != 2 { // A: its QP's memfd and the lane; B: its QP's memfd and doorbell
		t.Fatalf("memfds held per container: %v; want self 2 (QP, lane), b 2 (QP, doorbell)", held)
	}
}

// Lanes are a UD QP's: a lane from or to an RC QP, or the lanes of one,
// are INVALID, and nothing is counted.
func TestVerbsUDLaneRefusesRCQPs(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	snd, rcv := newLib(t, a), newLib(t, a)
	qu, _, _ := newUDQP(t, snd, false)
	qrc, _ := newQP(t, snd, 1)
	ru, fdr, _ := newUDQP(t, rcv, false)
	rrc, _ := newQP(t, rcv, 1)
	for name, c := range map[string]struct{ from, to uint32 }{"from an RC QP": {qrc, ru}, "to an RC QP": {qu, rrc}} {
		_, err := snd.udLane(t, c.from, selfPeer(c.to), newQPMemfd(t))
		wantCode(t, err, protocol.CodeInvalid)
		t.Logf("%s: %v", name, err)
	}
	_, _, err := rcv.udLanes(t, rrc, 1)
	wantCode(t, err, protocol.CodeInvalid)
	if n := lanesWord(t, fdr); n != 0 {
		t.Fatalf("the UD QP's lanes word is %d after refusals", n)
	}
	snd.newLane(t, qu, selfPeer(ru))
}

// A lane to a QP that is not there (no such QPN, a LID of no container or
// of one on another host, a QP of another container, a QP destroyed) is
// NOTFOUND: the sender takes its datagram as lost.
func TestVerbsUDLaneNotFoundWithoutTheQP(t *testing.T) {
	other := directory.Container{ID: "other0", Name: "other", Host: testHost, IP: "10.244.1.20", Tenant: "blue", NetNS: "/nonexistent"}
	a := startAgent(t, newFakeDir(selfContainer, other, remoteContainer), nil)
	snd, rcv := newLib(t, a), newLib(t, a)
	qa, _, _ := newUDQP(t, snd, false)
	qr, _, _ := newUDQP(t, rcv, false)
	gone, _, _ := newUDQP(t, rcv, false)
	if err := rcv.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, gone); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]protocol.VerbsPeer{
		"no such QP in the container":        selfPeer(qr + 100),
		"LID of no container":                lidPeer(qr, 0x0177),
		"LID of a container on another host": lidPeer(qr, 0x0205),
		"a QP that is not in the container":  lidPeer(qr, 0x0114),
		"a QP destroyed":                     selfPeer(gone),
	} {
		_, err := snd.udLane(t, qa, to, newQPMemfd(t))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound {
			t.Errorf("%s: %v, want NOTFOUND", name, err)
		}
	}
	if lanes, _, err := rcv.udLanes(t, qr, 0); err != nil || len(lanes) != 0 {
		t.Fatalf("lanes after refusals: %+v, %v", lanes, err)
	}
}

// Containers of tenants that may not talk get no lane, as they get no TCP
// connection; a policy that trusts the pair lets the request through.
func TestVerbsUDLaneDeniedAcrossTenants(t *testing.T) {
	a, trust := agentWithRedTenant(t)
	l := newLib(t, a)
	qa, _, _ := newUDQP(t, l, false)
	_, err := l.udLane(t, qa, lidPeer(1, redLID), newQPMemfd(t))
	wantCode(t, err, protocol.CodeDenied)
	trust()
	l = newLib(t, a) // the first may have idled out meanwhile
	qa, _, _ = newUDQP(t, l, false)
	_, err = l.udLane(t, qa, lidPeer(1, redLID), newQPMemfd(t))
	wantCode(t, err, protocol.CodeNotFound) // red has no QP 1: past the policy
}

// A lane's memfd is checked as a QP's at VERBS_QP_CREATE, and must be one
// the container does not hold already (the agent marks it dead with the
// lane); a refused lane leaves nothing behind.
func TestVerbsUDLaneRejectsBadMemfd(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	snd, rcv := newLib(t, a), newLib(t, a)
	qa, fda, _ := newUDQP(t, snd, false)
	qr, fdr, _ := newUDQP(t, rcv, false)
	h := qpHeader(protocol.VQPMagic, protocol.VQPVersion, 4096)
	ro, err := reopenReadOnly(newQPMemfd(t))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ro)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer protocol.CloseFDs(pipe[:])
	for name, fds := range map[string][]int{
		"unsealed":                  {newQPMemfdWith(t, 4096, h, 0)},
		"shrink only":               {newQPMemfdWith(t, 4096, h, unix.F_SEAL_SHRINK)},
		"sealed read-only":          {newQPMemfdWith(t, 4096, h, verbsSeals|unix.F_SEAL_FUTURE_WRITE)},
		"opened read-only":          {ro},
		"bad magic":                 {newQPMemfdWith(t, 4096, qpHeader(0x4d534646, 1, 4096), verbsSeals)},
		"ring not a power of two":   {newQPMemfdWith(t, 12288, qpHeader(protocol.VQPMagic, 1, 12288), verbsSeals)},
		"not a memfd: pipe":         {pipe[0]},
		"no fd":                     nil,
		"two fds":                   {newQPMemfd(t), newQPMemfd(t)},
		"the sender's own QP memfd": {fda},
		"the receiver's QP memfd":   {fdr},
	} {
		_, err := snd.udLane(t, qa, selfPeer(qr), fds...)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalid {
			t.Errorf("%s: %v, want INVALID", name, err)
		}
	}
	if n := lanesWord(t, fdr); n != 0 {
		t.Fatalf("the receiver's lanes word is %d after refusals", n)
	}
	if lanes, _, err := rcv.udLanes(t, qr, 0); err != nil || len(lanes) != 0 {
		t.Fatalf("lanes after refusals: %+v, %v", lanes, err)
	}
	if deadWord(mapShared(t, fda, 4096, unix.PROT_READ)) != 0 || deadWord(mapShared(t, fdr, 4096, unix.PROT_READ)) != 0 {
		t.Fatal("a refused lane marked a QP dead")
	}
	if m := a.verbsMemList(); len(m) != 1 || m[0].Memfds != 2 {
		t.Fatalf("held after refusals: %+v; want the two QPs' memfds", m)
	}
	snd.newLane(t, qa, selfPeer(qr))
}

// A second lane from the same QP to the same QP replaces the first, which
// is marked dead before the answer and let go; another sender's lane is
// left alone. Ids are never given twice.
func TestVerbsUDLaneReplacesTheSendersEarlierLane(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	snd, rcv := newLib(t, a), newLib(t, a)
	qa, _, _ := newUDQP(t, snd, false)
	qb, _, _ := newUDQP(t, snd, false)
	qr, fdr, _ := newUDQP(t, rcv, false)
	first := snd.newLane(t, qa, selfPeer(qr))
	other := snd.newLane(t, qb, selfPeer(qr))
	second := snd.newLane(t, qa, selfPeer(qr))
	if deadWord(mapShared(t, first, 4096, unix.PROT_READ)) != 1 {
		t.Fatal("the replaced lane's dead word is 0")
	}
	for _, fd := range []int{other, second} {
		if deadWord(mapShared(t, fd, 4096, unix.PROT_READ)) != 0 {
			t.Fatal("a live lane was marked dead")
		}
	}
	lanes, fds, err := rcv.udLanes(t, qr, 0)
	if err != nil || len(lanes) != 2 || lanes[0].ID != 2 || lanes[1].ID != 3 || lanes[1].From.QPN != qa || !sameFile(t, fds[1], second) {
		t.Fatalf("lanes %+v, %v; want id 2 (QP %#x's) and 3 (QP %#x's second)", lanes, err, qb, qa)
	}
	if n := lanesWord(t, fdr); n != 3 {
		t.Fatalf("lanes word %d after three lanes given, want 3", n)
	}
	waitCopies(t, first, 1) // the agent let the replaced lane's memfd go
}

// A lane dies with its sender's QP, destroyed or with its session: its
// dead word is set, the receiver's doorbell rung, the lane gone from
// VERBS_UD_LANES and its memfd let go.
func TestVerbsUDLaneDiesWithItsSender(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	rcv := newLib(t, a)
	qr, _, bell := newUDQP(t, rcv, true)
	first := uint32(0)
	for _, end := range []string{"session end", "VERBS_QP_DESTROY"} {
		snd, err := dialLib(a.cfg.LibrarySocket())
		if err != nil {
			t.Fatal(err)
		}
		qa, _, _ := newUDQP(t, snd, false)
		lane := snd.newLane(t, qa, selfPeer(qr))
		waitRing(t, bell, "a new lane")
		mem := mapShared(t, lane, 4096, unix.PROT_READ)
		// The receiver takes it: then it drains it itself once it is dead.
		lanes, fds, err := rcv.udLanes(t, qr, first)
		if err != nil || len(lanes) != 1 {
			t.Fatalf("%s: lanes %+v, %v; want the new one", end, lanes, err)
		}
		first = lanes[0].ID + 1
		protocol.CloseFDs(fds)
		endQP(t, snd, qa, end)
		waitRing(t, bell, end)
		if deadWord(mem) != 1 {
			t.Fatalf("%s: the receiver was rung before the lane's dead word was set", end)
		}
		if lanes, _, err := rcv.udLanes(t, qr, 0); err != nil || len(lanes) != 0 {
			t.Fatalf("%s: lanes %+v, %v; want none", end, lanes, err)
		}
		waitCopies(t, lane, 1)
		snd.conn.Close()
	}
	rcv.conn.Close()
	waitRegistryEmpty(t, a)
}

// A lane whose sender dies before its receiver took it stays listed, dead,
// until the receiver takes it, so what the sender wrote before it exited
// reaches the receiver (udaddy's server exits right after its replies;
// the receiver, rung for the new lane, asked once the lane was gone, and
// the replies were lost); taken, or with its receiver gone, its file goes.
func TestVerbsUDLaneOfADeadSenderKeptUntilTaken(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	for _, end := range []string{"session end", "VERBS_QP_DESTROY"} {
		for _, then := range []string{"taken", "receiver gone"} {
			rcv := newLib(t, a)
			qr, _, bell := newUDQP(t, rcv, true)
			snd, err := dialLib(a.cfg.LibrarySocket())
			if err != nil {
				t.Fatal(err)
			}
			qa, _, _ := newUDQP(t, snd, false)
			lane := snd.newLane(t, qa, selfPeer(qr))
			mem := mapShared(t, lane, 8192, unix.PROT_READ|unix.PROT_WRITE)
			copy(mem[4096:], "a datagram")
			waitRing(t, bell, "a new lane")
			endQP(t, snd, qa, end)
			waitRing(t, bell, end)
			if then == "taken" {
				lanes, fds, err := rcv.udLanes(t, qr, 0)
				if err != nil || len(lanes) != 1 || len(fds) != 1 {
					t.Fatalf("%s: lanes %+v, %v; want the dead sender's", end, lanes, err)
				}
				got := mapShared(t, fds[0], 8192, unix.PROT_READ)
				if deadWord(got) != 1 || string(got[4096:4106]) != "a datagram" {
					t.Fatalf("%s: the lane taken: dead word %d, data %q; want 1 and what the sender wrote",
						end, deadWord(got), got[4096:4106])
				}
				protocol.CloseFDs(fds)
				if lanes, _, err := rcv.udLanes(t, qr, 0); err != nil || len(lanes) != 0 {
					t.Fatalf("%s: once taken, lanes %+v, %v; want none", end, lanes, err)
				}
				waitCopies(t, lane, 1)
			}
			rcv.conn.Close()
			if end == "VERBS_QP_DESTROY" {
				snd.conn.Close()
			}
			waitRegistryEmpty(t, a)
			waitCopies(t, lane, 1)
		}
	}
}

// The lanes to a QP die with it, destroyed or with its session; a sender
// then finds no QP (NOTFOUND), and its QP lanes on to others.
func TestVerbsUDLanesDieWithTheirReceiver(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	s1, s2 := newLib(t, a), newLib(t, a)
	q1, _, _ := newUDQP(t, s1, false)
	q2, _, _ := newUDQP(t, s2, false)
	for _, end := range []string{"VERBS_QP_DESTROY", "session end"} {
		rcv, err := dialLib(a.cfg.LibrarySocket())
		if err != nil {
			t.Fatal(err)
		}
		qr, _, _ := newUDQP(t, rcv, false)
		lanes := []int{s1.newLane(t, q1, selfPeer(qr)), s2.newLane(t, q2, selfPeer(qr))}
		endQP(t, rcv, qr, end)
		for _, fd := range lanes {
			waitDead(t, mapShared(t, fd, 4096, unix.PROT_READ))
			waitCopies(t, fd, 1)
		}
		_, err = s1.udLane(t, q1, selfPeer(qr), newQPMemfd(t))
		wantCode(t, err, protocol.CodeNotFound)
		rcv.conn.Close()
	}
	qr, _, _ := newUDQP(t, s2, false)
	s1.newLane(t, q1, selfPeer(qr))
}

// A UD QP may send to itself: its lane to itself is listed once, and dies
// once with it.
func TestVerbsUDLaneToItsOwnQP(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	q, _, _ := newUDQP(t, l, false)
	lane := l.newLane(t, q, selfPeer(q))
	lanes, _, err := l.udLanes(t, q, 0)
	if err != nil || len(lanes) != 1 || lanes[0].From.QPN != q {
		t.Fatalf("a QP's lanes to itself: %+v, %v", lanes, err)
	}
	if err := l.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, q); err != nil {
		t.Fatal(err)
	}
	if deadWord(mapShared(t, lane, 4096, unix.PROT_READ)) != 1 {
		t.Fatal("the lane of a destroyed QP to itself is not dead")
	}
	if m := a.verbsMemList(); len(m) != 0 {
		t.Fatalf("the agent still holds %+v of the QP and its lane", m)
	}
}

// VERBS_UD_LANES pages: at most 16 lanes per answer, in id order, from
// OFFSET on, live lanes only; past the last, none and no fds.
func TestVerbsUDLanesInPages(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	snd, rcv := newLib(t, a), newLib(t, a)
	qr, _, _ := newUDQP(t, rcv, false)
	const n = 20
	qpns, fds := make([]uint32, n), make([]int, n)
	for i := range n {
		qpns[i], _, _ = newUDQP(t, snd, false)
		fds[i] = snd.newLane(t, qpns[i], selfPeer(qr))
	}
	check := func(first uint32, want ...uint32) {
		t.Helper()
		lanes, got, err := rcv.udLanes(t, qr, first)
		if err != nil || !slices.Equal(laneIDs(lanes), want) {
			t.Fatalf("lanes from %d: %v, %v; want %v", first, laneIDs(lanes), err, want)
		}
		for i, l := range lanes {
			if l.From.QPN != qpns[l.ID-1] || !sameFile(t, got[i], fds[l.ID-1]) {
				t.Fatalf("lane %d: from %#x, want %#x and its memfd", l.ID, l.From.QPN, qpns[l.ID-1])
			}
		}
	}
	ids := func(from, to uint32) (out []uint32) {
		for id := from; id <= to; id++ {
			out = append(out, id)
		}
		return out
	}
	check(1, ids(1, 16)...)
	check(17, ids(17, 20)...)
	check(21)
	if err := snd.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qpns[4]); err != nil {
		t.Fatal(err)
	}
	check(0, append(ids(1, 4), ids(6, 17)...)...)
	check(5, ids(6, 20)...)
}

// A QP has at most MaxLanesPerQP live lanes: the next sender gets LIMIT, a
// sender that has one may replace it, and a lane that dies makes room.
func TestVerbsUDLaneLimitPerQP(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	snd, rcv := newLib(t, a), newLib(t, a)
	qr, _, _ := newUDQP(t, rcv, false)
	shared := newQPMemfd(t) // the senders' QPs share one memfd: one held file
	qpns := make([]uint32, MaxLanesPerQP+1)
	for i := range qpns {
		qpn, err := snd.qpCreate(shared, protocol.QPTypeUD, 1)
		if err != nil {
			t.Fatal(err)
		}
		qpns[i] = qpn
	}
	for _, qpn := range qpns[:MaxLanesPerQP] {
		snd.newLane(t, qpn, selfPeer(qr))
	}
	last := qpns[MaxLanesPerQP]
	_, err := snd.udLane(t, last, selfPeer(qr), newQPMemfd(t))
	wantCode(t, err, protocol.CodeLimit)
	snd.newLane(t, qpns[0], selfPeer(qr)) // a replacement at the limit
	qr2, _, _ := newUDQP(t, rcv, false)
	snd.newLane(t, last, selfPeer(qr2)) // the limit is the receiving QP's
	if err := snd.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qpns[1]); err != nil {
		t.Fatal(err)
	}
	snd.newLane(t, last, selfPeer(qr))
	lanes, _, err := rcv.udLanes(t, qr, MaxLanesPerQP)
	if err != nil || !slices.Equal(laneIDs(lanes), []uint32{MaxLanesPerQP, MaxLanesPerQP + 1, MaxLanesPerQP + 2}) {
		t.Fatalf("the last lanes: %v, %v; want ids %d to %d (the refused one took none)", laneIDs(lanes), err, MaxLanesPerQP, MaxLanesPerQP+2)
	}
}

// A lane's memfd is a held file of the sender's container, in its limit:
// the receiver's container, at its own limit, is not charged, and the
// sender gets LIMIT until one of its lanes goes.
func TestVerbsUDLaneCountsAsTheSendersHeldFile(t *testing.T) {
	a, lb := otherContainer(t, func(c *Config) { c.verbsFDs = 3 })
	la := newLib(t, a)
	qa, _, _ := newUDQP(t, la, false)
	var qb [3]uint32
	for i := range qb {
		qb[i], _, _ = newUDQP(t, lb, false) // B holds 3 files: its limit
	}
	la.newLane(t, qa, otherPeer(qb[0]))
	la.newLane(t, qa, otherPeer(qb[1])) // A holds 3: its QP and two lanes
	_, err := la.udLane(t, qa, otherPeer(qb[2]), newQPMemfd(t))
	wantCode(t, err, protocol.CodeLimit)
	if err := lb.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qb[0]); err != nil {
		t.Fatal(err)
	}
	la.newLane(t, qa, otherPeer(qb[2]))
}

// Malformed requests from a hostile provider get a clear ERROR (missing
// attributes, QPN 0 or another session's, no port named, the wrong number
// of fds; a wrong attribute size is BADMSG from the codec, which closes
// only that session); nothing else breaks and no session learns another's
// lanes.
func TestVerbsUDLaneHostileRequestsGetErrors(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	bad, good := newLib(t, a), newLib(t, a)
	gs, _, _ := newUDQP(t, good, false)
	gr, _, _ := newUDQP(t, good, false)
	glane := good.newLane(t, gs, selfPeer(gr))
	bq, _, _ := newUDQP(t, bad, false)
	fds := make([]int, protocol.MaxFDs)
	for i := range fds {
		fds[i] = newQPMemfd(t)
	}
	qpn := func(v uint32) protocol.Attr { return protocol.U32(protocol.AttrQPN, v) }
	off := protocol.U32(protocol.AttrOffset, 0)
	lane, lanes := protocol.TypeVerbsUDLane, protocol.TypeVerbsUDLanes
	for _, c := range []struct {
		name string
		m    *protocol.Message
		fds  []int
	}{
		{"no attributes", protocol.New(lane, 0), fds[:1]},
		{"no VERBS_PEER", protocol.New(lane, 0, qpn(bq)), fds[:1]},
		{"no QPN", protocol.New(lane, 0, selfPeer(gr).Attr()), fds[:1]},
		{"QPN 0", protocol.New(lane, 0, qpn(0), selfPeer(gr).Attr()), fds[:1]},
		{"another session's QPN", protocol.New(lane, 0, qpn(gs), selfPeer(gr).Attr()), fds[:1]},
		{"no LID, no GID", protocol.New(lane, 0, qpn(bq), lidPeer(gr, 0).Attr()), fds[:1]},
		{"no fd", protocol.New(lane, 0, qpn(bq), selfPeer(gr).Attr()), nil},
		{"16 fds", protocol.New(lane, 0, qpn(bq), selfPeer(gr).Attr()), fds},
		{"lanes without OFFSET", protocol.New(lanes, 0, qpn(bq)), nil},
		{"lanes without QPN", protocol.New(lanes, 0, off), nil},
		{"lanes of QPN 0", protocol.New(lanes, 0, qpn(0), off), nil},
		{"lanes of another session's QP", protocol.New(lanes, 0, qpn(gr), off), nil},
	} {
		r, got, err := bad.call(c.m, c.fds...)
		protocol.CloseFDs(got)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalid {
			t.Errorf("%s: %v %v, want INVALID", c.name, r, err)
		}
	}
	worse := newLib(t, a)
	raw := append(header(1, byte(lane), 99, 20), 29, 0, 3, 0, 1, 2, 3, 0) // QPN of 3 bytes
	raw = append(raw, 30, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	sendBytes(t, worse.conn, raw)
	wantError(t, worse.conn, protocol.CodeBadMsg, 99)
	wantClosed(t, worse.conn)

	got, gfds, err := good.udLanes(t, gr, 0)
	if err != nil || len(got) != 1 || got[0].From.QPN != gs || !sameFile(t, gfds[0], glane) {
		t.Fatalf("the good session's lanes after the garbage: %+v, %v", got, err)
	}
	blane := bad.newLane(t, bq, selfPeer(gr)) // and the hostile one still works
	bad.conn.Close()
	waitDead(t, mapShared(t, blane, 4096, unix.PROT_READ))
	if deadWord(mapShared(t, glane, 4096, unix.PROT_READ)) != 0 {
		t.Fatal("the hostile session's end killed the good session's lane")
	}
	good.conn.Close()
	waitRegistryEmpty(t, a)
}

// The orphans a container's dead UD QPs leave at a receiver in another
// container that never takes its lanes are not the sender's held files: a
// new QP of the sender still makes a lane (before, they used up the
// sender's limit, so one tenant's idle receiver blocked another).
func TestVerbsUDLaneOrphansNotChargedToTheirSender(t *testing.T) {
	a, lb := otherContainer(t, func(c *Config) { c.verbsFDs = 3 })
	la := newLib(t, a)
	qb, _, _ := newUDQP(t, lb, false) // never asks for its lanes
	for i := 0; i < 2; i++ {
		qa, _, _ := newUDQP(t, la, false)
		la.newLane(t, qa, otherPeer(qb))
		endQP(t, la, qa, "VERBS_QP_DESTROY")
	}
	qa, _, _ := newUDQP(t, la, false)
	if _, err := la.udLane(t, qa, otherPeer(qb), newQPMemfd(t)); err != nil {
		t.Fatalf("a lane from the sender's only live QP: %v", err)
	}
	if lanes, _, err := lb.udLanes(t, qb, 0); err != nil || len(lanes) != 3 {
		t.Fatalf("the receiver's lanes: %+v, %v; want the two orphans and the live one", lanes, err)
	}
}
