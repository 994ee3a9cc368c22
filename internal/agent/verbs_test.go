package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// selfLID is the LID of selfContainer's verbs port (10.244.1.9).
const selfLID = 0x0109

// Access flags of ibv_access_flags the tests use.
const (
	accessLocalWrite  = 0x1
	accessRemoteRead  = 0x4
	accessRemoteWrite = protocol.AccessRemoteWrite
)

// newMemfd makes a memfd of size bytes, sealed with seals, closed when the
// test ends.
func newMemfd(t *testing.T, size int64, seals int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("fft-verbs-"+randName(6), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// qpHeader is a QP memfd's header: magic, version, ring_size.
func qpHeader(magic, version, ring uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	return binary.LittleEndian.AppendUint32(b, ring)
}

// newQPMemfdWith makes a QP memfd of 4096 + ring bytes with header h,
// sealed with seals.
func newQPMemfdWith(t *testing.T, ring int64, h []byte, seals int) int {
	t.Helper()
	fd := newMemfd(t, protocol.VQPHeaderSize+ring, 0)
	if _, err := unix.Pwrite(fd, h, 0); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// newQPMemfd makes a valid QP memfd with a ring of 4 KiB, as a provider does.
func newQPMemfd(t *testing.T) int {
	t.Helper()
	return newQPMemfdWith(t, 4096, qpHeader(protocol.VQPMagic, protocol.VQPVersion, 4096), verbsSeals)
}

func (l *libClient) qpCreate(fd int, typ, pd uint32) (uint32, error) {
	r, _, err := l.call(protocol.New(protocol.TypeVerbsQPCreate, 0, protocol.VerbsQP{Type: typ, PD: pd}.Attr()), fd)
	if err != nil {
		return 0, err
	}
	return r.U32(protocol.AttrQPN)
}

// newQP registers a fresh RC QP in PD pd and returns its QPN and memfd.
func newQP(t *testing.T, l *libClient, pd uint32) (uint32, int) {
	t.Helper()
	fd := newQPMemfd(t)
	qpn, err := l.qpCreate(fd, protocol.QPTypeRC, pd)
	if err != nil {
		t.Fatal(err)
	}
	return qpn, fd
}

// verbsConnect connects qpn to peer and returns the peer's QPN, type and
// memfd (closed when the test ends).
// connectBack connects QP qpn of l to QP to, as the program at that end
// moves its QP to RTR: a QP's ring goes only to the QP its owner connected
// it to, so the first of the two gets NOTFOUND.
func connectBack(t *testing.T, l *libClient, qpn, to uint32) {
	t.Helper()
	if _, _, _, err := l.verbsConnect(t, qpn, lidPeer(to, selfLID)); err != nil {
		if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeNotFound {
			t.Fatalf("connect QP %#x back to %#x: %v", qpn, to, err)
		}
	}
}

func (l *libClient) verbsConnect(t *testing.T, qpn uint32, peer protocol.VerbsPeer) (uint32, uint32, int, error) {
	r, fds, err := l.call(protocol.New(protocol.TypeVerbsConnect, 0, protocol.U32(protocol.AttrQPN, qpn), peer.Attr()))
	if err != nil {
		return 0, 0, -1, err
	}
	t.Cleanup(func() { protocol.CloseFDs(fds) })
	pq, err1 := r.U32(protocol.AttrQPN)
	q, err2 := r.VerbsQP()
	if r.Type != protocol.TypeVerbsPeerQP || len(fds) != 1 || err1 != nil || err2 != nil || q.PD != 0 {
		return 0, 0, -1, fmt.Errorf("VERBS_CONNECT answered %v with %d fds, QPN %v, VERBS_QP %+v %v", r.Type, len(fds), err1, q, err2)
	}
	return pq, q.Type, fds[0], nil
}

func lidPeer(qpn uint32, lid uint16) protocol.VerbsPeer {
	return protocol.VerbsPeer{QPN: qpn, LID: lid}
}

func (l *libClient) mrReg(mr protocol.VerbsMR, segs []protocol.Segment, fds ...int) (uint32, error) {
	r, _, err := l.call(protocol.New(protocol.TypeVerbsMRReg, 0, mr.Attr(), protocol.Segments(segs)), fds...)
	if err != nil {
		return 0, err
	}
	return r.U32(protocol.AttrRKey)
}

// grant is a VERBS_MR_GRANT as the initiator sees it.
type grant struct {
	mr   protocol.VerbsMR
	segs []protocol.Segment
	fds  []int
}

// mrGet asks for rkey through qpn; the fds are closed when the test ends.
func (l *libClient) mrGet(t *testing.T, qpn, rkey uint32) (grant, error) {
	r, fds, err := l.call(protocol.New(protocol.TypeVerbsMRGet, 0, protocol.U32(protocol.AttrQPN, qpn), protocol.U32(protocol.AttrRKey, rkey)))
	if err != nil {
		return grant{}, err
	}
	t.Cleanup(func() { protocol.CloseFDs(fds) })
	g := grant{fds: fds}
	g.mr, err = r.VerbsMR()
	if err == nil {
		g.segs, err = r.Segments()
	}
	if err == nil && (r.Type != protocol.TypeVerbsMRGrant || len(fds) != len(g.segs)) {
		err = fmt.Errorf("VERBS_MR_GET answered %v with %d fds for %d segments", r.Type, len(fds), len(g.segs))
	}
	return g, err
}

func (l *libClient) verbsDrop(t protocol.Type, a protocol.AttrType, v uint32) error {
	_, _, err := l.call(protocol.New(t, 0, protocol.U32(a, v)))
	return err
}

// mapShared maps size bytes of fd with prot.
func mapShared(t *testing.T, fd, size, prot int) []byte {
	t.Helper()
	mem, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("map %d bytes of fd %d: %v", size, fd, err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

func sameFile(t *testing.T, a, b int) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if unix.Fstat(a, &sa) != nil || unix.Fstat(b, &sb) != nil {
		t.Fatalf("fstat %d, %d", a, b)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func deadWord(mem []byte) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[protocol.VQPOffDead])))
}

// waitDead waits until the dead word of the QP header mapped at mem is 1:
// the agent marks it when it sees the session end, which the test cannot
// await otherwise.
func waitDead(t *testing.T, mem []byte) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); deadWord(mem) != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the QP's dead word stayed 0")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// registryEmpty reports whether the agent holds no verbs object any more.
func registryEmpty(a *testAgent) bool {
	r := a.verbs
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.qps) == 0 && len(r.mrs) == 0 && len(r.qpsOf) == 0 && len(r.owned) == 0 && len(r.files) == 0 && len(r.parked) == 0
}

// waitRegistryEmpty waits until the sessions that ended are forgotten.
func waitRegistryEmpty(t *testing.T, a *testAgent) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !registryEmpty(a); {
		if time.Now().After(deadline) {
			t.Fatal("the agent still holds verbs objects of sessions that ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestVerbsQPCreateNumbersEachQPOnce(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	q1, _ := newQP(t, l, 1)
	q2, _ := newQP(t, newLib(t, a), 1)
	if q1 == 0 || q2 == 0 || q1 > 0xffffff || q2 > 0xffffff || q1 == q2 {
		t.Fatalf("QPNs %#x and %#x: want two different numbers in 1..0xffffff", q1, q2)
	}
	if err := l.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, q1); err != nil {
		t.Fatal(err)
	}
	if q3, _ := newQP(t, l, 1); q3 == q1 || q3 == q2 || q3 == 0 {
		t.Fatalf("after destroying %#x, a new QP got %#x (live: %#x)", q1, q3, q2)
	}
}

func TestVerbsQPCreateRejectsUnsealedMemfd(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	h := qpHeader(protocol.VQPMagic, protocol.VQPVersion, 4096)
	pipe := make([]int, 2)
	if err := unix.Pipe2(pipe, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer protocol.CloseFDs(pipe)
	for name, fd := range map[string]int{
		"unsealed":          newQPMemfdWith(t, 4096, h, 0),
		"shrink only":       newQPMemfdWith(t, 4096, h, unix.F_SEAL_SHRINK),
		"grow only":         newQPMemfdWith(t, 4096, h, unix.F_SEAL_GROW),
		"sealed read-only":  newQPMemfdWith(t, 4096, h, verbsSeals|unix.F_SEAL_FUTURE_WRITE),
		"not a memfd: pipe": pipe[0],
	} {
		_, err := l.qpCreate(fd, protocol.QPTypeRC, 1)
		wantCode(t, err, protocol.CodeInvalid)
		t.Logf("%s: %v", name, err)
	}
	newQP(t, l, 1) // the session goes on
}

func TestVerbsQPCreateRejectsBadSizeHeaderOrType(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	good := newQPMemfd(t)
	ro, err := reopenReadOnly(good)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ro)
	hdr := func(ring uint32) []byte { return qpHeader(protocol.VQPMagic, protocol.VQPVersion, ring) }
	cases := []struct {
		name string
		fds  []int
		typ  uint32
	}{
		{"ring below 4 KiB", []int{newQPMemfdWith(t, 2048, hdr(2048), verbsSeals)}, protocol.QPTypeRC},
		{"ring not a power of two", []int{newQPMemfdWith(t, 12288, hdr(12288), verbsSeals)}, protocol.QPTypeRC},
		{"ring above 16 MiB", []int{newQPMemfdWith(t, 32<<20, hdr(32<<20), verbsSeals)}, protocol.QPTypeRC},
		{"header ring_size differs", []int{newQPMemfdWith(t, 8192, hdr(4096), verbsSeals)}, protocol.QPTypeRC},
		{"bad magic", []int{newQPMemfdWith(t, 4096, qpHeader(0x4d534646, 1, 4096), verbsSeals)}, protocol.QPTypeRC},
		{"another version", []int{newQPMemfdWith(t, 4096, qpHeader(protocol.VQPMagic, protocol.VQPVersion+1, 4096), verbsSeals)}, protocol.QPTypeRC},
		{"version 1 (armed on the cons line)", []int{newQPMemfdWith(t, 4096, qpHeader(protocol.VQPMagic, 1, 4096), verbsSeals)}, protocol.QPTypeRC},
		{"opened read-only", []int{ro}, protocol.QPTypeRC},
		{"type UC (3)", []int{good}, 3},
		{"no memfd", nil, protocol.QPTypeRC},
		{"two memfds", []int{good, good}, protocol.QPTypeUD},
	}
	for _, c := range cases {
		r, _, err := l.call(protocol.New(protocol.TypeVerbsQPCreate, 0, protocol.VerbsQP{Type: c.typ, PD: 1}.Attr()), c.fds...)
		if err == nil {
			t.Errorf("%s: answered %v, want INVALID", c.name, r.Type)
			continue
		}
		wantCode(t, err, protocol.CodeInvalid)
	}
	if _, err := l.qpCreate(good, protocol.QPTypeUD, 1); err != nil {
		t.Fatalf("a good UD QP after the refusals: %v", err)
	}
}

func TestVerbsQPLimitPerContainer(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), func(c *Config) { c.verbsQPs = 3 })
	l := newLib(t, a)
	fd := newQPMemfd(t)
	var qpns []uint32
	for range 3 {
		qpn, err := l.qpCreate(fd, protocol.QPTypeRC, 1)
		if err != nil {
			t.Fatal(err)
		}
		qpns = append(qpns, qpn)
	}
	_, err := newLib(t, a).qpCreate(fd, protocol.QPTypeRC, 1) // the limit is the container's, not the session's
	wantCode(t, err, protocol.CodeLimit)
	if err := l.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qpns[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.qpCreate(fd, protocol.QPTypeRC, 1); err != nil {
		t.Fatalf("after a destroy, a QP within the limit: %v", err)
	}
}

// The peer's memfd handed over is the peer QP's ring, writable: what the
// initiator writes there, the owner reads.
func TestVerbsConnectHandsOverPeerRing(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, fdb := newQP(t, tgt, 7)
	var gid [16]byte
	copy(gid[10:], []byte{0xff, 0xff, 10, 244, 1, 9})
	connectBack(t, tgt, qb, qa)
	for _, peer := range []protocol.VerbsPeer{lidPeer(qb, selfLID), {QPN: qb, GID: gid}, {QPN: qb, LID: selfLID, GID: gid}} {
		pq, typ, fd, err := ini.verbsConnect(t, qa, peer)
		if err != nil || pq != qb || typ != protocol.QPTypeRC || !sameFile(t, fd, fdb) {
			t.Fatalf("connect to %+v: QPN %#x type %d err %v; want QP %#x's memfd", peer, pq, typ, err, qb)
		}
		ring := mapShared(t, fd, 8192, unix.PROT_READ|unix.PROT_WRITE)
		ring[4096] = 0x5a
		if own := mapShared(t, fdb, 8192, unix.PROT_READ); own[4096] != 0x5a {
			t.Fatal("a byte written into the handed ring is not in the owner's")
		}
	}
}

// newDoorbell makes a doorbell as a provider does, a datagram socket pair;
// the ends are closed when the test ends.
func newDoorbell(t *testing.T) [2]int {
	t.Helper()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { protocol.CloseFDs(sp[:]) })
	return [2]int{sp[0], sp[1]}
}

// A QP made with a doorbell hands it to its peers with its memfd: what a
// peer rings arrives at the owner's end. One made without hands none.
func TestVerbsConnectHandsOverPeerDoorbell(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, bell := newBelledQP(t, tgt)
	connectBack(t, tgt, qb, qa)
	_, fds, err := ini.call(protocol.New(protocol.TypeVerbsConnect, 0, protocol.U32(protocol.AttrQPN, qa), lidPeer(qb, selfLID).Attr()))
	if err != nil || len(fds) != 2 {
		t.Fatalf("connect to a QP with a doorbell: %v, %d fds; want its memfd and doorbell", err, len(fds))
	}
	defer protocol.CloseFDs(fds)
	if _, err := unix.Write(fds[1], []byte{1}); err != nil {
		t.Fatalf("ring the handed doorbell: %v", err)
	}
	waitRing(t, bell, "a ring on the handed doorbell")
	if _, _, _, err := tgt.verbsConnect(t, qb, lidPeer(qa, selfLID)); err != nil {
		t.Fatalf("connect to a QP without a doorbell (one fd): %v", err)
	}
}

// A second descriptor that is no datagram socket (a pipe, a stream socket),
// or a third, is refused: a peer would ring it.
func TestVerbsQPCreateRejectsBadDoorbell(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer protocol.CloseFDs(p[:])
	st, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer protocol.CloseFDs(st[:])
	bell := newDoorbell(t)
	for _, fds := range [][]int{{newQPMemfd(t), p[1]}, {newQPMemfd(t), st[0]}, {newQPMemfd(t), bell[1], bell[1]}} {
		_, _, err := l.call(protocol.New(protocol.TypeVerbsQPCreate, 0, protocol.VerbsQP{Type: protocol.QPTypeRC, PD: 1}.Attr()), fds...)
		wantCode(t, err, protocol.CodeInvalid)
	}
	if !registryEmpty(a) {
		t.Fatal("a refused QP was kept")
	}
}

func TestVerbsConnectRejectsAnotherSessionsQPN(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qb, _ := newQP(t, tgt, 1)
	_, _, _, err := ini.verbsConnect(t, qb, lidPeer(qb, selfLID))
	wantCode(t, err, protocol.CodeInvalid)
}

func TestVerbsConnectNotFoundOffHostOrNoSuchQP(t *testing.T) {
	other := directory.Container{ID: "other0", Name: "other", Host: testHost, IP: "10.244.1.20", Tenant: "blue", NetNS: "/nonexistent"}
	a := startAgent(t, newFakeDir(selfContainer, other, remoteContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, _ := newQP(t, tgt, 1)
	for name, peer := range map[string]protocol.VerbsPeer{
		"LID of no container":                     lidPeer(qb, 0x0177),
		"LID of a container on another host":      lidPeer(qb, 0x0205),
		"a QP that is not in the container":       lidPeer(qb, 0x0114),
		"no such QP in the container":             lidPeer(qb+100, selfLID),
		"LID and GID of two different containers": {QPN: qb, LID: selfLID, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 244, 14: 1, 15: 20}},
	} {
		_, _, _, err := ini.verbsConnect(t, qa, peer)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound {
			t.Errorf("%s: %v, want NOTFOUND", name, err)
		}
	}
	_, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, 0))
	wantCode(t, err, protocol.CodeInvalid) // names no port at all
}

// redLID is the LID of the container of tenant red agentWithRedTenant
// starts (10.244.1.30).
const redLID = 0x011e

// agentWithRedTenant starts an agent that knows selfContainer (tenant
// blue) and a container of tenant red, which the default policy keeps
// apart; trust makes the policy trust the pair, once the agent has loaded
// it.
func agentWithRedTenant(t *testing.T) (a *testAgent, trust func()) {
	t.Helper()
	red := directory.Container{ID: "red0", Name: "red", Host: testHost, IP: "10.244.1.30", Tenant: "red", NetNS: "/nonexistent"}
	dir := newFakeDir(selfContainer, red)
	a = startAgent(t, dir, nil)
	return a, func() {
		t.Helper()
		dir.setPolicy(`{"trusted_tenant_pairs": [["blue", "red"]]}`)
		for i := 0; len(a.policy().TrustedTenantPairs) != 1; i++ {
			if i == 500 {
				t.Fatal("the agent did not load the policy document")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestVerbsConnectDeniedAcrossTenants(t *testing.T) {
	a, trust := agentWithRedTenant(t)
	ini := newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	_, _, _, err := ini.verbsConnect(t, qa, lidPeer(1, redLID))
	wantCode(t, err, protocol.CodeDenied)
	// A policy that trusts the pair lets the request through to the QP
	// lookup, as it would a TCP connection.
	trust()
	ini = newLib(t, a) // the first may have idled out meanwhile
	qa, _ = newQP(t, ini, 1)
	_, _, _, err = ini.verbsConnect(t, qa, lidPeer(1, redLID))
	wantCode(t, err, protocol.CodeNotFound)
}

func TestVerbsConnectRejectsMixedQPTypes(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, err := tgt.qpCreate(newQPMemfd(t), protocol.QPTypeUD, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = ini.verbsConnect(t, qa, lidPeer(qb, selfLID))
	wantCode(t, err, protocol.CodeInvalid)
}

// region registers a region of pages 4 KiB pages at address 0x10000 (its
// memfd of pages pages, filled with fill), in PD pd with access; sealed
// against writes once filled if access allows none, as the provider does.
func region(t *testing.T, l *libClient, pages int, fill byte, pd, access uint32) (uint32, int) {
	t.Helper()
	fd := newMemfd(t, int64(pages)*4096, verbsSeals)
	mem := mapShared(t, fd, pages*4096, unix.PROT_READ|unix.PROT_WRITE)
	for i := range mem {
		mem[i] = fill
	}
	if access&(accessRemoteWrite|protocol.AccessRemoteAtomic) == 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE); err != nil {
			t.Fatal(err)
		}
	}
	rkey, err := l.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: uint64(pages) * 4096, Access: access, PD: pd},
		[]protocol.Segment{{Offset: 0, Len: uint64(pages) * 4096}}, fd)
	if err != nil {
		t.Fatal(err)
	}
	return rkey, fd
}

func TestVerbsMRGrantedOnlyThroughConnectedQPInItsPD(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt, third := newLib(t, a), newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, _ := newQP(t, tgt, 5)
	inPD, _ := region(t, tgt, 2, 0xab, 5, accessRemoteRead)
	otherPD, _ := region(t, tgt, 1, 0xcd, 6, accessRemoteRead)
	otherSession, _ := region(t, third, 1, 0xef, 5, accessRemoteRead)

	_, err := ini.mrGet(t, qa, inPD)
	wantCode(t, err, protocol.CodeNotFound) // not connected yet
	connectBack(t, tgt, qb, qa)
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatal(err)
	}
	g, err := ini.mrGet(t, qa, inPD)
	if err != nil {
		t.Fatal(err)
	}
	if g.mr != (protocol.VerbsMR{Addr: 0x10000, Len: 8192, Access: accessRemoteRead}) || len(g.segs) != 1 || g.segs[0].Len != 8192 {
		t.Fatalf("grant %+v, want the region as registered with PD 0", g)
	}
	if mem := mapShared(t, g.fds[0], 8192, unix.PROT_READ); mem[0] != 0xab || mem[8191] != 0xab {
		t.Fatal("the granted memfd does not hold the region's bytes")
	}
	for name, rkey := range map[string]uint32{"another PD": otherPD, "another session": otherSession, "no such rkey": inPD ^ 1} {
		_, err := ini.mrGet(t, qa, rkey)
		if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeNotFound {
			t.Errorf("%s: %v, want NOTFOUND", name, err)
		}
	}
	_, err = ini.mrGet(t, qb, inPD)
	wantCode(t, err, protocol.CodeInvalid) // not the caller's QP
	if err := tgt.verbsDrop(protocol.TypeVerbsMRDereg, protocol.AttrRKey, inPD); err != nil {
		t.Fatal(err)
	}
	_, err = ini.mrGet(t, qa, inPD)
	wantCode(t, err, protocol.CodeNotFound) // deregistered
}

func TestVerbsMRGrantReadOnlyWithoutRemoteWrite(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, _ := newQP(t, tgt, 5)
	connectBack(t, tgt, qb, qa)
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatal(err)
	}
	ro, _ := region(t, tgt, 1, 1, 5, accessLocalWrite|accessRemoteRead)
	g, err := ini.mrGet(t, qa, ro)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Mmap(g.fds[0], 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EACCES) {
		t.Fatalf("mapping a read-only grant writable: %v, want EACCES", err)
	}
	mem := mapShared(t, g.fds[0], 4096, unix.PROT_READ)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE); !errors.Is(err, unix.EACCES) {
		t.Fatalf("mprotect of a read-only grant to writable: %v, want EACCES", err)
	}
	// The O_RDONLY descriptor alone can be reopened O_RDWR through
	// /proc/self/fd; a memfd its owner sealed F_SEAL_FUTURE_WRITE (after
	// mapping it) cannot be mapped writable even so (PROTOCOL.md, "Verbs").
	fd := newMemfd(t, 4096, verbsSeals)
	mapShared(t, fd, 4096, unix.PROT_READ|unix.PROT_WRITE)[0] = 9
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE); err != nil {
		t.Fatal(err)
	}
	sealed, err := tgt.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: 4096, Access: accessRemoteRead, PD: 5}, []protocol.Segment{{Len: 4096}}, fd)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = ini.mrGet(t, qa, sealed); err != nil {
		t.Fatal(err)
	}
	rw, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", g.fds[0]), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rw)
	if _, err := unix.Mmap(rw, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EPERM) {
		t.Fatalf("mapping a sealed read-only grant writable through /proc/self/fd: %v, want EPERM", err)
	}
	for _, access := range []uint32{accessRemoteWrite, protocol.AccessRemoteAtomic} {
		rw, fd := region(t, tgt, 1, 2, 5, accessLocalWrite|access)
		g, err := ini.mrGet(t, qa, rw)
		if err != nil {
			t.Fatal(err)
		}
		mapShared(t, g.fds[0], 4096, unix.PROT_READ|unix.PROT_WRITE)[100] = 0x77
		if mapShared(t, fd, 4096, unix.PROT_READ)[100] != 0x77 {
			t.Fatalf("access %#x: a write through the grant is not in the owner's region", access)
		}
	}
}

func TestVerbsMRRegRejectsBadSegments(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	fd := newMemfd(t, 3*4096, verbsSeals)
	unsealed := newMemfd(t, 3*4096, 0)
	seg := func(off, n uint64) protocol.Segment { return protocol.Segment{Offset: off, Len: n} }
	// 0x10010 + 0x1000 spans two pages.
	mr := protocol.VerbsMR{Addr: 0x10010, Len: 0x1000, Access: accessRemoteWrite, PD: 1}
	readOnly := protocol.VerbsMR{Addr: 0x10010, Len: 0x1000, Access: accessRemoteRead, PD: 1}
	cases := []struct {
		name string
		mr   protocol.VerbsMR
		segs []protocol.Segment
		fds  []int
	}{
		{"one fd for two segments", mr, []protocol.Segment{seg(0, 4096), seg(4096, 4096)}, []int{fd}},
		{"two fds for one segment", mr, []protocol.Segment{seg(0, 8192)}, []int{fd, fd}},
		{"no fd", mr, []protocol.Segment{seg(0, 8192)}, nil},
		{"length not whole pages", mr, []protocol.Segment{seg(0, 8000)}, []int{fd}},
		{"offset not a page", mr, []protocol.Segment{seg(100, 8192)}, []int{fd}},
		{"past the memfd's end", mr, []protocol.Segment{seg(8192, 8192)}, []int{fd}},
		{"offset wraps", mr, []protocol.Segment{seg(^uint64(0)&^4095, 8192)}, []int{fd}},
		{"fewer pages than the region", mr, []protocol.Segment{seg(0, 4096)}, []int{fd}},
		{"more pages than the region", mr, []protocol.Segment{seg(0, 12288)}, []int{fd}},
		{"unsealed memfd", mr, []protocol.Segment{seg(0, 8192)}, []int{unsealed}},
		{"read-only region not sealed against writes", readOnly, []protocol.Segment{seg(0, 8192)}, []int{fd}},
		{"empty region", protocol.VerbsMR{Addr: 0x10000, PD: 1}, []protocol.Segment{seg(0, 4096)}, []int{fd}},
		{"region wraps", protocol.VerbsMR{Addr: ^uint64(0) - 10, Len: 4096, PD: 1}, []protocol.Segment{seg(0, 4096)}, []int{fd}},
	}
	for _, c := range cases {
		if _, err := l.mrReg(c.mr, c.segs, c.fds...); err == nil {
			t.Errorf("%s: registered, want INVALID", c.name)
		} else if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeInvalid {
			t.Errorf("%s: %v, want INVALID", c.name, err)
		}
	}
	if _, err := l.mrReg(mr, []protocol.Segment{seg(4096, 4096), seg(0, 4096)}, fd, fd); err != nil {
		t.Fatalf("two good segments after the refusals: %v", err)
	}
}

func TestVerbsMRLimitPerContainer(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), func(c *Config) { c.verbsMRs = 2 })
	l := newLib(t, a)
	k1, _ := region(t, l, 1, 0, 1, accessRemoteRead)
	k2, _ := region(t, newLib(t, a), 1, 0, 1, accessRemoteRead)
	if k1 == 0 || k2 == 0 || k1 == k2 {
		t.Fatalf("rkeys %#x, %#x: want two different nonzero keys", k1, k2)
	}
	fd := newMemfd(t, 4096, verbsSeals)
	_, err := l.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: 4096, Access: accessRemoteWrite, PD: 1}, []protocol.Segment{{Len: 4096}}, fd)
	wantCode(t, err, protocol.CodeLimit)
	if err := l.verbsDrop(protocol.TypeVerbsMRDereg, protocol.AttrRKey, k1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: 4096, Access: accessRemoteWrite, PD: 1}, []protocol.Segment{{Len: 4096}}, fd); err != nil {
		t.Fatalf("after a deregistration, a region within the limit: %v", err)
	}
}

// newBelledQP registers an RC QP with a doorbell, as a provider whose CQ has
// a completion channel does; it returns the QPN and the owner's end.
func newBelledQP(t *testing.T, l *libClient) (uint32, int) {
	t.Helper()
	bell := newDoorbell(t)
	r, _, err := l.call(protocol.New(protocol.TypeVerbsQPCreate, 0, protocol.VerbsQP{Type: protocol.QPTypeRC, PD: 1}.Attr()), newQPMemfd(t), bell[1])
	if err != nil {
		t.Fatalf("a QP with a doorbell: %v", err)
	}
	qpn, err := r.U32(protocol.AttrQPN)
	if err != nil {
		t.Fatal(err)
	}
	return qpn, bell[0]
}

// waitRing waits (5 s at most) for a ring on the owner's end of a doorbell.
func waitRing(t *testing.T, fd int, what string) {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(p, 5000); n != 1 || err != nil {
		t.Fatalf("%s: the survivor's doorbell was not rung (%d, %v)", what, n, err)
	}
	var b [8]byte
	unix.Read(fd, b[:])
}

// endQP ends QP qpn of l as end says: "session end" closes l's session,
// "VERBS_QP_DESTROY" destroys the QP.
func endQP(t *testing.T, l *libClient, qpn uint32, end string) {
	t.Helper()
	if end == "session end" {
		l.conn.Close()
	} else if err := l.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qpn); err != nil {
		t.Fatal(err)
	}
}

// When a QP dies (its session ends, or it is destroyed), the doorbells of
// the QPs connected to it are rung after its dead word is set: a survivor
// asleep in ibv_get_cq_event wakes and finds the dead peer.
func TestVerbsPeerDeathRingsDoorbells(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini := newLib(t, a)
	qa, bell := newBelledQP(t, ini)
	for _, end := range []string{"session end", "VERBS_QP_DESTROY"} {
		tgt, err := dialLib(a.cfg.LibrarySocket())
		if err != nil {
			t.Fatal(err)
		}
		qb, fdb := newQP(t, tgt, 1)
		connectBack(t, tgt, qb, qa)
		if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
			t.Fatal(err)
		}
		hb := mapShared(t, fdb, 4096, unix.PROT_READ)
		endQP(t, tgt, qb, end)
		waitRing(t, bell, end)
		if deadWord(hb) != 1 {
			t.Fatalf("%s: the doorbell rang before the peer's dead word was set", end)
		}
		tgt.conn.Close()
	}
}

func TestVerbsSessionEndMarksQPsDead(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini := newLib(t, a)
	tgt, err := dialLib(a.cfg.LibrarySocket())
	if err != nil {
		t.Fatal(err)
	}
	qa, fda := newQP(t, ini, 1)
	qb, fdb := newQP(t, tgt, 5)
	rkey, _ := region(t, tgt, 1, 0, 5, accessRemoteRead)
	connectBack(t, tgt, qb, qa)
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatal(err)
	}
	hb := mapShared(t, fdb, 4096, unix.PROT_READ)
	tgt.conn.Close() // the process exited or closed the device
	waitDead(t, hb)
	if _, err := ini.mrGet(t, qa, rkey); err == nil {
		t.Fatal("a region of a session that ended was still granted")
	}
	_, _, _, err = ini.verbsConnect(t, qa, lidPeer(qb, selfLID))
	wantCode(t, err, protocol.CodeNotFound)
	if deadWord(mapShared(t, fda, 4096, unix.PROT_READ)) != 0 {
		t.Fatal("the survivor's own QP was marked dead")
	}
	ini.conn.Close()
	waitRegistryEmpty(t, a)
}

func TestVerbsQPDestroyMarksDeadAndForgets(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, fdb := newQP(t, tgt, 5)
	connectBack(t, tgt, qb, qa)
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatal(err)
	}
	if err := tgt.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qb); err != nil {
		t.Fatal(err)
	}
	if deadWord(mapShared(t, fdb, 4096, unix.PROT_READ)) != 1 {
		t.Fatal("a destroyed QP's dead word is 0")
	}
	rkey, _ := region(t, tgt, 1, 0, 5, accessRemoteRead)
	_, err := ini.mrGet(t, qa, rkey)
	wantCode(t, err, protocol.CodeNotFound) // its pair died with it
	// Forgetting what one does not have is no error; nor is a second destroy.
	for _, req := range []struct {
		t protocol.Type
		a protocol.AttrType
		v uint32
	}{{protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qb}, {protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qa}, {protocol.TypeVerbsMRDereg, protocol.AttrRKey, rkey ^ 1}} {
		if err := tgt.verbsDrop(req.t, req.a, req.v); err != nil {
			t.Errorf("%v %#x: %v, want OK", req.t, req.v, err)
		}
	}
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qa, selfLID)); err != nil {
		t.Fatalf("the other session's QP, which it did not destroy: %v", err)
	}
}

// An agent that stops closes what it holds but marks nothing dead: the
// pairs already connected keep their data path.
func TestVerbsAgentStopLeavesQPsLive(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	_, fd := newQP(t, l, 1)
	a.stop()
	waitRegistryEmpty(t, a)
	if deadWord(mapShared(t, fd, 4096, unix.PROT_READ)) != 0 {
		t.Fatal("stopping the agent marked a live QP dead")
	}
}

// Garbage from a hostile provider gets an ERROR and leaves the session and
// the others working; what it sent is not kept.
func TestVerbsHostileRequestsGetErrors(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	bad, good := newLib(t, a), newLib(t, a)
	qg, _ := newQP(t, good, 1)
	fds := make([]int, protocol.MaxFDs)
	for i := range fds {
		fds[i] = newQPMemfd(t)
	}
	for _, c := range []struct {
		m    *protocol.Message
		fds  []int
		code protocol.Code
	}{
		{protocol.New(protocol.TypeVerbsPeerQP, 0), nil, protocol.CodeUnknown},
		{protocol.New(protocol.TypeVerbsMRGrant, 0), fds[:2], protocol.CodeUnknown},
		{protocol.New(protocol.TypeVerbsQPCreate, 0), fds[:1], protocol.CodeInvalid},
		{protocol.New(protocol.TypeVerbsQPCreate, 0, protocol.VerbsQP{Type: 2}.Attr()), fds, protocol.CodeInvalid},
		{protocol.New(protocol.TypeVerbsConnect, 0, protocol.U32(protocol.AttrQPN, qg)), nil, protocol.CodeInvalid},
		{protocol.New(protocol.TypeVerbsMRGet, 0, protocol.U32(protocol.AttrQPN, qg)), nil, protocol.CodeInvalid},
		{protocol.New(protocol.TypeVerbsMRReg, 0, protocol.VerbsMR{Len: 4096}.Attr()), fds[:1], protocol.CodeInvalid},
		{protocol.New(protocol.TypeVerbsMRReg, 0, protocol.VerbsMR{Addr: 0, Len: 65536}.Attr(), protocol.Segments(make([]protocol.Segment, 16))), fds, protocol.CodeInvalid},
		{protocol.New(protocol.TypeVerbsMRDereg, 0), nil, protocol.CodeInvalid},
	} {
		_, _, err := bad.call(c.m, c.fds...)
		if pe, ok := err.(*protocol.Error); !ok || pe.Code != c.code {
			t.Errorf("%v with %d fds: %v, want %v", c.m.Type, len(c.fds), err, c.code)
		}
	}
	if _, _, _, err := good.verbsConnect(t, qg, lidPeer(qg, selfLID)); err != nil {
		t.Fatalf("the other session after the garbage: %v", err)
	}
	newQP(t, bad, 1) // and the hostile one still works
	bad.conn.Close()
	good.conn.Close()
	waitRegistryEmpty(t, a)
}

// openCopies returns how many of this process's descriptors (the agent's
// included: it runs in the test's process) are the file fd is.
func openCopies(t *testing.T, fd int) int {
	t.Helper()
	var want unix.Stat_t
	if err := unix.Fstat(fd, &want); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat("/proc/self/fd/"+e.Name(), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			n++
		}
	}
	return n
}

// waitCopies waits until want descriptors are the file fd is: the agent
// closes a request's descriptors after it has answered it.
func waitCopies(t *testing.T, fd, want int) {
	t.Helper()
	first := openCopies(t, fd)
	for n, deadline := first, time.Now().Add(time.Second); n != want; n = openCopies(t, fd) {
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors are the memfd (%d a second ago), want %d: the test's own and the agent's", n, first, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The provider sends the same memfd again for regions that share pages:
// the agent keeps one descriptor for it however many segments and regions
// name it, and closes it when the last of them goes.
func TestVerbsSharedMemfdHeldOnce(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	const pages, regions = protocol.MaxFDs, 64
	fd := newMemfd(t, pages*4096, verbsSeals)
	segs := make([]protocol.Segment, pages)
	fds := make([]int, pages)
	for i := range segs {
		segs[i], fds[i] = protocol.Segment{Offset: uint64(i) * 4096, Len: 4096}, fd
	}
	var rkeys []uint32
	for range regions {
		rkey, err := tgt.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: pages * 4096, Access: accessRemoteWrite, PD: 5}, segs, fds...)
		if err != nil {
			t.Fatal(err)
		}
		rkeys = append(rkeys, rkey)
	}
	waitCopies(t, fd, 2)
	// Each grant still hands one descriptor per segment, each the file.
	qa, _ := newQP(t, ini, 1)
	qb, _ := newQP(t, tgt, 5)
	connectBack(t, tgt, qb, qa)
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatal(err)
	}
	g, err := ini.mrGet(t, qa, rkeys[regions-1])
	if err != nil || len(g.fds) != pages || !sameFile(t, g.fds[pages-1], fd) {
		t.Fatalf("grant of a region on a shared memfd: %d fds, %v", len(g.fds), err)
	}
	protocol.CloseFDs(g.fds)
	for _, rkey := range rkeys[1:] {
		if err := tgt.verbsDrop(protocol.TypeVerbsMRDereg, protocol.AttrRKey, rkey); err != nil {
			t.Fatal(err)
		}
	}
	waitCopies(t, fd, 2) // one region still uses it
	if err := tgt.verbsDrop(protocol.TypeVerbsMRDereg, protocol.AttrRKey, rkeys[0]); err != nil {
		t.Fatal(err)
	}
	waitCopies(t, fd, 1)
}

// A container holds at most DefaultVerbsFDs distinct memfds at the agent,
// QPs' and regions' together; a file it holds already costs nothing more,
// and what it gives back makes room.
func TestVerbsFDsBoundedPerContainer(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	_, qfd := newQP(t, l, 1)
	var last uint32
	for i := 1; i < DefaultVerbsFDs; i++ {
		rkey, _ := region(t, l, 1, 0, 1, accessRemoteRead)
		last = rkey
	}
	fd := newMemfd(t, 4096, verbsSeals)
	_, err := l.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: 4096, Access: accessRemoteWrite, PD: 1}, []protocol.Segment{{Len: 4096}}, fd)
	wantCode(t, err, protocol.CodeLimit)
	_, err = newLib(t, a).qpCreate(newQPMemfd(t), protocol.QPTypeRC, 1) // the container's, not the session's
	wantCode(t, err, protocol.CodeLimit)
	if _, err := l.qpCreate(qfd, protocol.QPTypeRC, 1); err != nil {
		t.Fatalf("a second QP on a memfd held already: %v", err)
	}
	if err := l.verbsDrop(protocol.TypeVerbsMRDereg, protocol.AttrRKey, last); err != nil {
		t.Fatal(err)
	}
	if _, err := l.mrReg(protocol.VerbsMR{Addr: 0x10000, Len: 4096, Access: accessRemoteWrite, PD: 1}, []protocol.Segment{{Len: 4096}}, fd); err != nil {
		t.Fatalf("after a deregistration, a region on a new memfd: %v", err)
	}
	l.conn.Close()
	waitRegistryEmpty(t, a)
}

// Under a file limit short of the subnet's need, a container's verbs
// memfds are lowered with its session share (limits.go, sharesFitting).
func TestVerbsFDsFollowAShortFileLimit(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l := newLib(t, a)
	// One container registered; room for 30 descriptors past the fixed ones.
	a.files.Store(refusalsStrangers + DefaultAdminConns + fdReserve + perContainerFDs + 30)
	share := a.share().verbsFDs
	if share >= DefaultVerbsFDs || share < minVerbsFDs {
		t.Fatalf("verbs memfd share under a short limit: %d", share)
	}
	for i := range share {
		if _, err := l.qpCreate(newQPMemfd(t), protocol.QPTypeRC, 1); err != nil {
			t.Fatalf("QP %d of a share of %d: %v", i+1, share, err)
		}
	}
	_, err := l.qpCreate(newQPMemfd(t), protocol.QPTypeRC, 1)
	wantCode(t, err, protocol.CodeLimit)
}

// A third QP, in a container the policy lets talk to the target, gets
// neither the ring nor the regions of a QP connected to another: an RC QP
// on a NIC takes packets from its own remote QP only. And the first end of
// a pair to connect waits (NOTFOUND) until the other has connected back.
func TestVerbsThirdQPCannotJoinAConnectedPair(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt, third := newLib(t, a), newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, _ := newQP(t, tgt, 5)
	qc, _ := newQP(t, third, 1)
	rkey, _ := region(t, tgt, 1, 0xab, 5, accessRemoteWrite|accessRemoteRead|accessLocalWrite)
	_, _, _, err := tgt.verbsConnect(t, qb, lidPeer(qa, selfLID))
	wantCode(t, err, protocol.CodeNotFound) // qa is not connected to qb yet
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatalf("the second end of a pair: %v", err)
	}
	if _, _, _, err := tgt.verbsConnect(t, qb, lidPeer(qa, selfLID)); err != nil {
		t.Fatalf("the first end, asking again: %v", err)
	}
	if _, _, fd, err := third.verbsConnect(t, qc, lidPeer(qb, selfLID)); err == nil {
		t.Errorf("QP %#x (connected to %#x) was handed to a third QP %#x: its ring fd %d, writable", qb, qa, qc, fd)
	}
	if g, err := third.mrGet(t, qc, rkey); err == nil {
		t.Errorf("the third QP got QP %#x's region (rkey %#x): %d fds", qb, rkey, len(g.fds))
	}
	if _, err := ini.mrGet(t, qa, rkey); err != nil {
		t.Errorf("the QP connected to it: %v", err)
	}
}

// qpReset sends VERBS_QP_RESET for qpn with fds (its new memfd).
func (l *libClient) qpReset(qpn uint32, fds ...int) error {
	_, _, err := l.call(protocol.New(protocol.TypeVerbsQPReset, 0, protocol.U32(protocol.AttrQPN, qpn)), fds...)
	return err
}

// A QP taken back to RESET gets a new ring: the old one, which its peer
// still maps, is marked reset and the peer rung; neither end gets the
// other's ring until both connected again, then the new one.
func TestVerbsQPResetRenewsRingAndUnpairs(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, bell := newBelledQP(t, ini)
	qb, fdb := newQP(t, tgt, 5)
	connectBack(t, tgt, qb, qa)
	if _, _, _, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil {
		t.Fatal(err)
	}
	old := mapShared(t, fdb, 4096, unix.PROT_READ)
	fresh := newQPMemfd(t)
	if err := tgt.qpReset(qb, fresh); err != nil {
		t.Fatalf("VERBS_QP_RESET: %v", err)
	}
	if d := deadWord(old); d != protocol.VQPDeadReset {
		t.Fatalf("the old ring's dead word is %d, want %d (reset)", d, protocol.VQPDeadReset)
	}
	waitRing(t, bell, "VERBS_QP_RESET")
	// Neither end is handed the other's ring until both connected since the reset.
	_, _, _, err := tgt.verbsConnect(t, qb, lidPeer(qa, selfLID))
	wantCode(t, err, protocol.CodeNotFound)
	if _, _, fd, err := ini.verbsConnect(t, qa, lidPeer(qb, selfLID)); err != nil || !sameFile(t, fd, fresh) {
		t.Fatalf("connected again: %v; want QP %#x's new memfd", err, qb)
	}
	r, fds, err := tgt.call(protocol.New(protocol.TypeVerbsConnect, 0, protocol.U32(protocol.AttrQPN, qb), lidPeer(qa, selfLID).Attr()))
	protocol.CloseFDs(fds)
	if err != nil || r.Type != protocol.TypeVerbsPeerQP {
		t.Fatalf("the other end, asking again: %v", err)
	}
	if deadWord(mapShared(t, fresh, 4096, unix.PROT_READ)) != 0 {
		t.Fatal("the new ring is marked")
	}
	tgt.conn.Close()
	ini.conn.Close()
	waitRegistryEmpty(t, a)
}

func TestVerbsQPResetRejectsBadRequests(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	l, other := newLib(t, a), newLib(t, a)
	qp, fd := newQP(t, l, 1)
	ud, err := l.qpCreate(newQPMemfd(t), protocol.QPTypeUD, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		l    *libClient
		qpn  uint32
		fds  []int
	}{
		{"no memfd", l, qp, nil},
		{"its own memfd again", l, qp, []int{fd}},
		{"an unsealed memfd", l, qp, []int{newMemfd(t, 8192, 0)}},
		{"another session's QP", other, qp, []int{newQPMemfd(t)}},
		{"a UD QP", l, ud, []int{newQPMemfd(t)}},
	} {
		if err := c.l.qpReset(c.qpn, c.fds...); err == nil {
			t.Errorf("%s: VERBS_QP_RESET answered OK", c.what)
		} else {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalid {
				t.Errorf("%s: %v, want INVALID", c.what, err)
			}
		}
	}
	if d := deadWord(mapShared(t, fd, 4096, unix.PROT_READ)); d != 0 {
		t.Fatalf("a refused reset marked the QP's memfd (%d)", d)
	}
}
