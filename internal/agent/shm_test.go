package agent

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// shmBytes is what one shm channel is charged to each of its ends.
var shmBytes = shmChannelBytes

// waitSettings waits until the agent has read the cluster settings and
// they satisfy ok.
func waitSettings(t *testing.T, a *testAgent, ok func(directory.Settings) bool) {
	t.Helper()
	for range 200 {
		if s, known := a.settings(); known && ok(s) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the agent did not load the cluster settings")
}

func anySettings(directory.Settings) bool { return true }

// meetSelf has srv accept and cli connect the connection from port to
// selfSrv, both at once, and returns the two answers; their descriptors
// are closed when the test ends.
func meetSelf(t *testing.T, srv, cli *libClient, port int) (con, acc pathResult) {
	t.Helper()
	con, acc = meet(t, srv, cli, selfCli(port), selfSrv)
	t.Cleanup(func() { closeResult(con); closeResult(acc) })
	return con, acc
}

func closeResult(r pathResult) {
	closeFD(r.FD)
	closeFD(r.Mem)
	closeFD(r.Link)
}

// mapShm checks that fd is a channel's memfd as docs/SHM.md says the
// agent hands it over (size, seals, header, the rest of the header page
// zero) and maps it shared.
func mapShm(fd int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != protocol.ShmSize(shmRingSize) {
		return nil, fmt.Errorf("memfd size %d (%v), want %d", st.Size, err, protocol.ShmSize(shmRingSize))
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL; err != nil || seals != want {
		return nil, fmt.Errorf("memfd seals %#x (%v), want %#x", seals, err, want)
	}
	if err := unix.Ftruncate(fd, 1<<30); err == nil {
		return nil, fmt.Errorf("the memfd could be grown")
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the memfd: %w", err)
	}
	hdr, _ := protocol.ShmHeader(shmRingSize)
	want := append(hdr, make([]byte, protocol.ShmHeaderSize-len(hdr))...)
	if !bytes.Equal(mem[:protocol.ShmHeaderSize], want) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("memfd header page starts %x, want %x and zeros", mem[:32], hdr)
	}
	return mem, nil
}

// mustMapShm is mapShm for the test process, unmapped when the test ends.
func mustMapShm(t *testing.T, fd int) []byte {
	t.Helper()
	mem, err := mapShm(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// wantShmPair checks that con and acc are the two ends of one shm
// channel: PATH shm without a reason, bell sockets that are one pair, and
// memfds that are one memory.
func wantShmPair(t *testing.T, con, acc pathResult) {
	t.Helper()
	if con.Kind != pathShm || acc.Kind != pathShm || con.Reason != "" || acc.Reason != "" {
		t.Fatalf("connector %+v, acceptor %+v; want shm for both", con, acc)
	}
	if err := exchange(con.FD, acc.FD); err != nil {
		t.Fatalf("the bell sockets are not one socketpair: %v", err)
	}
	mc, ma := mustMapShm(t, con.Mem), mustMapShm(t, acc.Mem)
	copy(mc[protocol.ShmHeaderSize:], "ring 0 byte")
	copy(ma[len(ma)-6:], "ring 1")
	if string(ma[protocol.ShmHeaderSize:][:11]) != "ring 0 byte" || string(mc[len(mc)-6:]) != "ring 1" {
		t.Fatal("the two memfds are not one memory")
	}
}

func TestShmChannelHandedOver(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	waitSettings(t, a, anySettings)
	srv, cli := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc := meetSelf(t, srv, cli, 45000)
	wantShmPair(t, con, acc)
	if c := a.connCounters(); c.Shm != 2 || c.FastPath != 2 || c.Unix != 0 || c.ShmBytes != 2*shmBytes {
		t.Errorf("counters with the channel live: %+v; want 2 shm ends charged %d bytes each", c, shmBytes)
	}
	for _, c := range a.live.list() {
		if c.Path != "shm" || c.Reason != "" {
			t.Errorf("conns entry %+v; want path shm", c)
		}
	}
	// CLOSED of each end releases its charge.
	cli.closed(selfCli(45000), selfSrv)
	srv.closed(selfSrv, selfCli(45000))
	for _, l := range []*libClient{cli, srv} {
		if _, err := l.lookup(selfIP); err != nil { // CLOSED is applied before it
			t.Fatal(err)
		}
	}
	if c := a.connCounters(); c.ShmBytes != 0 || c.Live != 0 {
		t.Errorf("after CLOSED of both ends: %+v; want nothing live or charged", c)
	}
}

// Every rule that keeps a same-host fast path off shm gives unix with its
// reason, the same to both ends, and the bytes still go through.
func TestShmDecisionTable(t *testing.T) {
	noShmSelf := ffSelf
	noShmSelf.NoShm = true
	cases := []struct {
		name       string
		self       directory.Container
		settings   string
		failDir    bool // the settings cannot be read
		conCaps    uint32
		accCaps    uint32
		wantReason string
	}{
		{name: "connector-library-without-caps", self: ffSelf, accCaps: protocol.CapShm, wantReason: reasonLibNoShm},
		{name: "acceptor-library-without-caps", self: ffSelf, conCaps: protocol.CapShm, wantReason: reasonLibNoShm},
		{name: "unknown-caps-bits-only", self: ffSelf, conCaps: ^protocol.CapShm, accCaps: ^protocol.CapShm, wantReason: reasonLibNoShm},
		{name: "container-no-shm", self: noShmSelf, conCaps: protocol.CapShm, accCaps: protocol.CapShm, wantReason: reasonShmOff},
		{name: "cluster-no-shm", self: ffSelf, settings: `{"no_shm": true}`, conCaps: protocol.CapShm, accCaps: protocol.CapShm, wantReason: reasonShmOffCluster},
		{name: "settings-not-read", self: ffSelf, failDir: true, conCaps: protocol.CapShm, accCaps: protocol.CapShm, wantReason: reasonNoSettings},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := newFakeDir(c.self)
			dir.setSettings(c.settings)
			dir.setFailWrites(c.failDir)
			a := startAgent(t, dir, nil)
			if !c.failDir {
				waitSettings(t, a, func(s directory.Settings) bool { return s.NoShm == (c.settings != "") })
			}
			srv, cli := newLibCaps(t, a, c.accCaps), newLibCaps(t, a, c.conCaps)
			if err := srv.listen(selfSrv); err != nil {
				t.Fatal(err)
			}
			con, acc := meetSelf(t, srv, cli, 45100+i)
			if con.Kind != pathUnix || acc.Kind != pathUnix || con.Reason != c.wantReason || acc.Reason != c.wantReason {
				t.Fatalf("connector %+v, acceptor %+v; want unix %s for both", con, acc, c.wantReason)
			}
			if err := exchange(con.FD, acc.FD); err != nil {
				t.Fatalf("the halves are not one socketpair: %v", err)
			}
			if n := a.connCounters().NotShmReasons[c.wantReason]; n != 2 {
				t.Errorf("not_shm_reasons[%s] = %d, want 2", c.wantReason, n)
			}
		})
	}
}

// A container whose budget is spent gets unix (shm-budget) until a
// channel it is charged for is closed. Here both ends are the same
// container, so each channel is charged to it twice.
func TestShmBudgetExhausted(t *testing.T) {
	dir := newFakeDir(ffSelf)
	dir.setSettings(fmt.Sprintf(`{"shm_budget": %d}`, 2*shmBytes))
	a := startAgent(t, dir, nil)
	waitSettings(t, a, func(s directory.Settings) bool { return s.ShmBudget != 0 })
	srv, cli := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	first, firstAcc := meetSelf(t, srv, cli, 45200)
	wantShmPair(t, first, firstAcc)
	con, acc := meetSelf(t, srv, cli, 45201)
	if con.Kind != pathUnix || acc.Kind != pathUnix || con.Reason != reasonShmBudget || acc.Reason != reasonShmBudget {
		t.Fatalf("over budget: connector %+v, acceptor %+v; want unix %s", con, acc, reasonShmBudget)
	}
	if mine, _ := a.shm.charged(ffSelf.ID); mine != 2*shmBytes {
		t.Errorf("charged %d bytes, want %d: a refused channel must charge nothing", mine, 2*shmBytes)
	}
	cli.closed(selfCli(45200), selfSrv)
	srv.closed(selfSrv, selfCli(45200))
	if _, err := cli.lookup(selfIP); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.lookup(selfIP); err != nil {
		t.Fatal(err)
	}
	con, acc = meetSelf(t, srv, cli, 45202)
	wantShmPair(t, con, acc)
}

// A parked meeting (simultaneous connects) decides shm for an acceptor
// that has not asked from what its listener's process said, and the
// parked half, claimed later, is the other end of the connector's.
func TestSimultaneousConnectsOnShm(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	waitSettings(t, a, anySettings)
	ca, cb, aa, ba := crossedPairs(t, a, protocol.CapShm, selfIP+":7101", selfIP+":7102", selfCli(45301), selfCli(45302))
	wantShmPair(t, ca, ba)
	wantShmPair(t, cb, aa)
}

// A parked half nobody claims is closed after the keep time, and the
// charge it carried goes with it; the connector's end keeps its own.
func TestShmParkedHalfExpiryReleasesCharge(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), func(c *Config) { c.keepDecided = 200 * time.Millisecond })
	waitSettings(t, a, anySettings)
	procA, procB := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	lisA, lisB := selfIP+":7201", selfIP+":7202"
	procA.listen(lisA)
	procB.listen(lisB)
	ca, cb := crossConnect(t, procA, procB, selfCli(45401), lisB, selfCli(45402), lisA)
	if ca.Kind != pathShm || cb.Kind != pathShm {
		t.Fatalf("connects: %+v, %+v; want shm", ca, cb)
	}
	if mine, _ := a.shm.charged(ffSelf.ID); mine != 4*shmBytes {
		t.Fatalf("charged %d bytes with two parked halves, want %d", mine, 4*shmBytes)
	}
	deadline := time.Now().Add(5 * time.Second)
	for mine, _ := a.shm.charged(ffSelf.ID); mine != 2*shmBytes; mine, _ = a.shm.charged(ffSelf.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("charged %d bytes after the parked halves expired, want %d (the connectors' ends)", mine, 2*shmBytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newShmHalves makes what docs/SHM.md says, and a half closed untaken
// gives its charge back exactly once.
func TestShmHalvesAndCharges(t *testing.T) {
	b := newShmBudget()
	charges, ok := b.reserve([2]string{"x", "y"}, shmBytes, shmBytes, nil)
	if !ok {
		t.Fatal("a channel within budget was refused")
	}
	if _, ok := b.reserve([2]string{"y", "z"}, shmBytes, shmBytes, nil); ok {
		t.Fatal("y's second channel fits a one-channel budget")
	}
	if mine, all := b.charged("z"); mine != 0 || all != 2*shmBytes {
		t.Fatalf("a refused reservation charged z %d (total %d)", mine, all)
	}
	hs, err := newShmHalves(shmRingSize)
	if err != nil {
		t.Fatal(err)
	}
	hs[0].charge, hs[1].charge = charges[0], charges[1]
	for _, h := range hs {
		if len(h.fds()) != 2 || h.fds()[0] != h.fd || h.fds()[1] != h.mem {
			t.Fatalf("half %+v: PATH must carry the bell socket, then the memfd", h)
		}
		mem := mustMapShm(t, h.mem)
		if len(mem) != int(protocol.ShmSize(shmRingSize)) {
			t.Fatalf("mapped %d bytes, want %d", len(mem), protocol.ShmSize(shmRingSize))
		}
	}
	closeHalves(hs)
	hs[0].charge.release() // a second release changes nothing
	if _, all := b.charged(""); all != 0 {
		t.Fatalf("%d bytes still charged after both halves were closed", all)
	}
	if _, err := unix.FcntlInt(uintptr(hs[0].mem), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("the memfd of a closed half is still open: %v", err)
	}
}

// shmPingPong is pingPong for an shm channel's end in another process:
// the memfd must be what docs/SHM.md says, and the connector's bytes put
// into ring 0 before its ping must be in the acceptor's mapping after it.
func shmPingPong(bell, memfd int, connector bool) string {
	mem, err := mapShm(memfd)
	if err != nil {
		return err.Error()
	}
	defer unix.Munmap(mem)
	const marker = "written by the connector"
	ring0 := mem[protocol.ShmHeaderSize:]
	if connector {
		copy(ring0, marker)
	}
	if res := pingPong(bell, connector); res != "ok" {
		return res
	}
	if !connector && string(ring0[:len(marker)]) != marker {
		return fmt.Sprintf("ring 0 holds %q, not the connector's bytes: the two memfds are not one memory", ring0[:len(marker)])
	}
	return "ok"
}

// Two processes in two containers' namespaces: shm when both libraries
// can and both containers allow it, with the memory shared across them;
// unix (shm-off) when either container runs with --no-shm; and a
// container whose budget is spent gets unix (shm-budget) until the
// process holding its channel exits.
func TestShmBetweenContainers(t *testing.T) {
	nsA, nsB := makeNetns(t), makeNetns(t)
	dir := newFakeDir()
	dir.setSettings(fmt.Sprintf(`{"shm_budget": %d}`, shmBytes)) // one channel per container
	a := startAgent(t, dir, nil)
	waitSettings(t, a, func(s directory.Settings) bool { return s.ShmBudget != 0 })
	web, db := container("ca", "web", "10.244.1.2", nsA), container("cb", "db", "10.244.1.3", nsB)
	register := func(noShmWeb, noShmDB bool) { // the fake directory applies a REGISTER at once
		t.Helper()
		web.FreeFlow, web.NoShm, db.FreeFlow, db.NoShm = true, noShmWeb, true, noShmDB
		admin := adminClient(t, a) // a session of the last call may have idled out
		for _, c := range []directory.Container{web, db} {
			if err := admin.Register(ctxT(t), c); err != nil {
				t.Fatal(err)
			}
		}
	}
	pair := func(port int) (*asker, *asker, askResult, askResult) {
		t.Helper()
		sock, cli, srv := a.cfg.LibrarySocket(), fmt.Sprintf("10.244.1.2:%d", port), "10.244.1.3:6379"
		return askPair(t, nsA, nsB,
			askSpec{Sock: sock, Caps: protocol.CapShm, Ask: "connect", Local: cli, Remote: srv},
			askSpec{Sock: sock, Caps: protocol.CapShm, Listen: "0.0.0.0:6379", Ask: "accept", Local: srv, Remote: cli})
	}

	register(false, false)
	cc, cs, con, acc := pair(40000)
	if con.Path != "shm" || acc.Path != "shm" || con.Data != "ok" || acc.Data != "ok" {
		t.Fatalf("connector %+v, acceptor %+v; want shm with the bytes through", con, acc)
	}
	_, _, con, acc = pair(40001)
	if con.Path != "unix" || acc.Reason != reasonShmBudget || con.Data != "ok" || acc.Data != "ok" {
		t.Fatalf("over budget: connector %+v, acceptor %+v; want unix %s", con, acc, reasonShmBudget)
	}
	cc.finish() // the processes exit without CLOSED: their charges go with them
	cs.finish()
	_, _, con, acc = pair(40002)
	if con.Path != "shm" || acc.Path != "shm" || con.Data != "ok" || acc.Data != "ok" {
		t.Fatalf("after the first channel's processes exited: connector %+v, acceptor %+v; want shm", con, acc)
	}

	for i, off := range [][2]bool{{true, false}, {false, true}} {
		register(off[0], off[1])
		_, _, con, acc := pair(40010 + i)
		if con.Path != "unix" || acc.Path != "unix" || con.Reason != reasonShmOff || acc.Reason != reasonShmOff || con.Data != "ok" || acc.Data != "ok" {
			t.Errorf("--no-shm on web %v, db %v: connector %+v, acceptor %+v; want unix %s", off[0], off[1], con, acc, reasonShmOff)
		}
	}
}
