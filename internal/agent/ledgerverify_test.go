package agent

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// putHeld publishes entry i as putAnswer does, naming descriptor fd of the
// test process and the inode of the socket there, as the library does.
func (l *testLedger) putHeld(t *testing.T, i int, path uint8, bytes uint32, local, remote, reason string, fd int) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	f := entryFields(bytes, local, remote)
	f[entryOffPath] = path
	f[entryOffReasonLen] = byte(copy(f[entryOffReason:], reason))
	binary.NativeEndian.PutUint32(f[entryOffFD:], uint32(fd))
	binary.NativeEndian.PutUint64(f[entryOffIno:], st.Ino)
	l.publish(i, f)
}

// answeredShmPair has the agent answer a same-host shm connection and
// lists both ends in a ledger of the test process as a library does,
// each naming the bell socket the agent handed; it returns the results
// (the caller closes their descriptors) and the ledger.
func answeredShmPair(t *testing.T, port int) (*testAgent, pathResult, pathResult, *testLedger) {
	t.Helper()
	a := shmAgent(t, "")
	srv, cli := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc := meet(t, srv, cli, selfCli(port), selfSrv)
	wantShmPair(t, con, acc)
	l := newTestLedger(t, 4)
	l.putHeld(t, 0, pathShm, uint32(shmBytes), selfCli(port), selfSrv, "", con.FD)
	l.putHeld(t, 1, pathShm, uint32(shmBytes), selfSrv, selfCli(port), "", acc.FD)
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	return a, con, acc, l
}

// wantConns checks the listing, the live count and the shm bytes of STATUS,
// and what the test container is charged.
func wantConns(t *testing.T, a *testAgent, when string, want []agentapi.ConnInfo, bytes uint64) {
	t.Helper()
	sortConns(want)
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: conns\n got %+v\nwant %+v", when, got, want)
	}
	if c := a.status().Connections; c.Live != len(want) || c.ShmBytes != bytes {
		t.Errorf("%s: %d live, %d shm bytes; want %d, %d", when, c.Live, c.ShmBytes, len(want), bytes)
	}
	if held := a.shmHeld(ffSelf.ID, a.untabledBytes(ffSelf.ID, DefaultShmBudget)); held != bytes {
		t.Errorf("%s: the container holds %d bytes of its budget, want %d", when, held, bytes)
	}
}

func shmEnd(local, remote string) agentapi.ConnInfo {
	return agentapi.ConnInfo{Local: local, Remote: remote, LocalContainer: "self", RemoteContainer: "self", Path: "shm"}
}

// A connection end closed where the library cannot see it (an inline
// close system call, a Go program's own close): its process no longer
// holds the socket its ledger entry names, so the agent drops the end from
// its listing and its counts, and releases its shm charge, though neither
// CLOSED came nor the entry was freed.
func TestLedgerEndClosedBehindLibraryReleased(t *testing.T) {
	a, con, acc, _ := answeredShmPair(t, 48501)
	defer closeResult(acc)
	defer closeFD(con.Mem)
	both := []agentapi.ConnInfo{shmEnd(selfCli(48501), selfSrv), shmEnd(selfSrv, selfCli(48501))}
	wantConns(t, a, "both ends held", both, 2*shmBytes)

	unix.Close(con.FD) // the connector's end, closed behind its library
	wantConns(t, a, "the connector's socket closed", both[1:], shmBytes)
	if mine, _ := a.shm.charged(ffSelf.ID); mine != shmBytes {
		t.Errorf("%d bytes charged; want the acceptor's end alone, %d", mine, shmBytes)
	}
}

// An end held at another descriptor (a dup) than the one its entry names
// is still held.
func TestLedgerEndHeldAtDupStaysListed(t *testing.T) {
	a, con, acc, _ := answeredShmPair(t, 48502)
	defer closeResult(acc)
	defer closeResult(con)
	dup, err := unix.Dup(con.FD)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	unix.Dup2(acc.FD, con.FD) // the entry's descriptor now holds another socket
	both := []agentapi.ConnInfo{shmEnd(selfCli(48502), selfSrv), shmEnd(selfSrv, selfCli(48502))}
	wantConns(t, a, "the connector's socket held at a dup only", both, 2*shmBytes)
}

// An end its library moved down to a socket pair (fork, exec, SCM_RIGHTS)
// is listed as its ledger entry says, unix moved-down, and holds no shm:
// the table's account of the agent's answer follows the entry.
func TestLedgerEndMovedDownListedAsUnix(t *testing.T) {
	a, con, acc, l := answeredShmPair(t, 48503)
	defer closeResult(acc)
	defer closeResult(con)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(pair[1])
	if err := unix.Dup2(pair[0], con.FD); err != nil { // as the library puts the new socket at the fd
		t.Fatal(err)
	}
	unix.Close(pair[0])
	l.free(0)
	l.putHeld(t, 0, pathUnix, 0, selfCli(48503), selfSrv, "moved-down", con.FD)
	moved := shmEnd(selfCli(48503), selfSrv)
	moved.Path, moved.Reason = "unix", "moved-down"
	wantConns(t, a, "the connector moved down", []agentapi.ConnInfo{moved, shmEnd(selfSrv, selfCli(48503))}, shmBytes)
}

// One end held by two processes (a fork child and its parent, each with its
// entry; the fork moved it down) is listed and counted once.
func TestLedgerEndHeldByTwoProcessesListedOnce(t *testing.T) {
	a, con, acc, parent := answeredShmPair(t, 48504)
	defer closeResult(acc)
	defer closeResult(con)
	child := exec.Command("sleep", "60")
	// The File owns a copy: its finalizer closes its number, which must not be acc.FD (closed below).
	dup, err := unix.FcntlInt(uintptr(acc.FD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	held := os.NewFile(uintptr(dup), "acceptor")
	defer held.Close()
	child.ExtraFiles = []*os.File{held} // its fd 3
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	parent.free(1)
	parent.putHeld(t, 1, pathUnix, 0, selfSrv, selfCli(48504), "moved-down", acc.FD)
	l := newTestLedger(t, 4)
	l.putHeld(t, 0, pathUnix, 0, selfSrv, selfCli(48504), "moved-down", acc.FD)
	binary.NativeEndian.PutUint32(l.mem[entryOff(0)+entryOffFD:], 3) // where the child holds it
	if err := a.ledgers.put(int32(child.Process.Pid), ffSelf, l.fd); err != nil {
		t.Fatal(err)
	}
	acceptor := shmEnd(selfSrv, selfCli(48504))
	acceptor.Path, acceptor.Reason = "unix", "moved-down"
	wantConns(t, a, "the acceptor's end in two ledgers", []agentapi.ConnInfo{shmEnd(selfCli(48504), selfSrv), acceptor}, shmBytes)
}

// A migrated container's processes hold their sockets under other inodes
// than their ledgers name (CRIU made them anew) and may never call their
// new host's agent: an overlay end whose descriptor holds a TCP socket at
// the entry's two ends is listed, one whose descriptor holds another
// connection is not, and once that socket is closed the end goes too.
func TestLedgerEndRestoredUnderAnotherInodeStaysListed(t *testing.T) {
	a := shmAgent(t, "")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	f, err := conn.(*net.TCPConn).File() // a descriptor of the test process's own
	if err != nil {
		t.Fatal(err)
	}
	local, remote := conn.LocalAddr().String(), conn.RemoteAddr().String()
	l := newTestLedger(t, 4)
	l.putHeld(t, 0, pathOverlay, 0, local, remote, "parked", int(f.Fd()))
	l.putHeld(t, 1, pathOverlay, 0, local, "127.0.0.1:1", "parked", int(f.Fd()))
	for i := 0; i < 2; i++ { // as written before the restore
		binary.NativeEndian.PutUint64(l.mem[entryOff(i)+entryOffIno:], 1<<40+uint64(i))
	}
	if err := a.ledgers.put(int32(os.Getpid()), ffSelf, l.fd); err != nil {
		t.Fatal(err)
	}
	restored := agentapi.ConnInfo{Local: local, Remote: remote, LocalContainer: "self", Path: "overlay", Reason: "parked"}
	for _, when := range []string{"first listing", "second listing"} {
		if got := a.connList(); fmt.Sprint(got) != fmt.Sprint([]agentapi.ConnInfo{restored}) {
			t.Errorf("%s: conns %+v; want the end at its own tuple only, %+v", when, got, restored)
		}
	}
	f.Close()
	conn.Close()
	if got := a.connList(); len(got) != 0 {
		t.Errorf("once the socket is closed: conns %+v; want none", got)
	}
}
