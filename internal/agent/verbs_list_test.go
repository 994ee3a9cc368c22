package agent

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// setProd writes a QP memfd's prod counter, as its peer does.
func setProd(t *testing.T, fd int, v uint64) {
	t.Helper()
	mem := mapShared(t, fd, 4096, unix.PROT_READ|unix.PROT_WRITE)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[protocol.VQPOffProd])), v)
}

// listingAgent starts an agent and returns it with an admin connection
// opened before selfContainer, this process's namespace, is registered:
// the admin socket refuses callers in a container's namespace when they
// connect (only then), and the tests' library sessions run in this one.
func listingAgent(t *testing.T) (*testAgent, *agentapi.AdminClient) {
	t.Helper()
	dir := newFakeDir()
	a := startAgent(t, dir, nil)
	admin := adminClient(t, a)
	dir.putContainer(selfContainer)
	return a, admin
}

// qpsByQPN lists the agent's QPs through the admin client, by QPN.
func qpsByQPN(t *testing.T, admin *agentapi.AdminClient) map[uint32]agentapi.QPInfo {
	t.Helper()
	qps, err := admin.QPs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]agentapi.QPInfo{}
	for _, q := range qps {
		out[q.QPN] = q
	}
	return out
}

// `freeflow conns --qps`: each QP with its container, type, peer once
// connected, path, state and the bytes its ring's header counts; a QP
// whose peer went, or whose memfd is marked dead, is dead.
func TestConnsListsQueuePairs(t *testing.T) {
	a, admin := listingAgent(t)
	ini, tgt := newLib(t, a), newLib(t, a)
	qa, _ := newQP(t, ini, 1)
	qb, fdb := newQP(t, tgt, 5)
	qu, err := tgt.qpCreate(newQPMemfd(t), protocol.QPTypeUD, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range []struct {
		l         *libClient
		own, peer uint32
	}{{ini, qa, qb}, {tgt, qb, qa}} {
		connectBack(t, pair.l, pair.own, pair.peer) // the first end waits for the second (NOTFOUND)
	}
	setProd(t, fdb, 123456) // what qa's provider produced into qb's ring
	got := qpsByQPN(t, admin)
	want := map[uint32]agentapi.QPInfo{
		qa: {Container: "self", QPN: qa, Type: "RC", PeerContainer: "self", PeerQPN: qb, Path: "shm", State: "connected"},
		qb: {Container: "self", QPN: qb, Type: "RC", PeerContainer: "self", PeerQPN: qa, Path: "shm", State: "connected", RxBytes: 123456},
		qu: {Container: "self", QPN: qu, Type: "UD", Path: "shm", State: "registered"},
	}
	if len(got) != len(want) {
		t.Fatalf("listed %+v, want %+v", got, want)
	}
	for qpn, w := range want {
		if got[qpn] != w {
			t.Errorf("QP %#x listed %+v, want %+v", qpn, got[qpn], w)
		}
	}
	// A peer's counter is the peer's to write: any value is only shown.
	setProd(t, fdb, ^uint64(0))
	if q := qpsByQPN(t, admin)[qb]; q.RxBytes != ^uint64(0) {
		t.Errorf("QP %#x with prod 2^64-1 listed %+v", qb, q)
	}
	if err := tgt.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, qb); err != nil {
		t.Fatal(err)
	}
	if q := qpsByQPN(t, admin)[qa]; q.State != "dead" || q.PeerQPN != qb {
		t.Errorf("QP %#x after its peer was destroyed: %+v, want dead, peer %#x", qa, q, qb)
	}
	_, fda := newQP(t, ini, 1)
	mem := mapShared(t, fda, 4096, unix.PROT_READ|unix.PROT_WRITE)
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&mem[protocol.VQPOffDead])), 1)
	dead := 0
	for _, q := range qpsByQPN(t, admin) {
		if q.State == "dead" {
			dead++
		}
	}
	if dead != 2 {
		t.Errorf("%d QPs dead, want 2: the one whose peer went and the one whose memfd says so", dead)
	}
	ini.conn.Close()
	tgt.conn.Close()
	waitRegistryEmpty(t, a) // the listing's holds on the memfds are given back
}

// A list of QPs longer than one message comes a page at a time, each QP
// once, and a session that pages through QPs and connections in turn gets
// each list whole.
func TestConnsQueuePairsListedInPages(t *testing.T) {
	const n = 1500 // about 170 KB of JSON
	a, admin := listingAgent(t)
	l := newLib(t, a)
	fd := newQPMemfd(t)
	for range n {
		if _, err := l.qpCreate(fd, protocol.QPTypeRC, 1); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		qps := qpsByQPN(t, admin)
		if len(qps) != n {
			t.Fatalf("listed %d QPs, want %d", len(qps), n)
		}
		if cs, err := admin.Conns(ctxT(t)); err != nil || len(cs) != 0 {
			t.Fatalf("connections after the QPs: %d, %v; want none", len(cs), err)
		}
	}
}

// `freeflow conns --regions`: per container, its QPs, regions, their
// bytes and the memfds the agent holds for them against the limit.
func TestConnsListsVerbsMemoryPerContainer(t *testing.T) {
	a, admin := listingAgent(t)
	if mem, err := admin.VerbsMem(ctxT(t)); err != nil || len(mem) != 0 {
		t.Fatalf("with no verbs objects: %+v, %v; want an empty list", mem, err)
	}
	l := newLib(t, a)
	_, qfd := newQP(t, l, 1)
	if _, err := l.qpCreate(qfd, protocol.QPTypeRC, 1); err != nil { // the same memfd: held once
		t.Fatal(err)
	}
	region(t, l, 2, 0, 1, accessRemoteRead)
	region(t, l, 3, 0, 1, accessRemoteRead)
	mem, err := admin.VerbsMem(ctxT(t))
	want := agentapi.VerbsMemInfo{Container: "self", QPs: 2, Regions: 2, RegionBytes: 5 * 4096, Memfds: 3, MemfdLimit: DefaultVerbsFDs}
	if err != nil || len(mem) != 1 || mem[0] != want {
		t.Fatalf("listed %+v, %v; want %+v", mem, err, want)
	}
	if got := a.status().Limits.VerbsFDsPerContainer; got != DefaultVerbsFDs {
		t.Errorf("STATUS says a container may hold %d verbs memfds, want %d", got, DefaultVerbsFDs)
	}
}

// A UD QP is listed with its peer fields empty and rx_bytes 0 whatever its
// own ring's counter says (its datagrams arrive in lanes); its senders'
// lanes are memfds their container holds, counted in `--regions`.
func TestConnsListsUDQPWithoutPeerOrBytes(t *testing.T) {
	a, admin := listingAgent(t)
	snd, rcv := newLib(t, a), newLib(t, a)
	qa, _, _ := newUDQP(t, snd, false)
	qr, fdr, _ := newUDQP(t, rcv, false)
	setProd(t, snd.newLane(t, qa, selfPeer(qr)), 4096)
	setProd(t, fdr, 777) // no peer produces here; a hostile one may write it
	want := agentapi.QPInfo{Container: "self", QPN: qr, Type: "UD", Path: "shm", State: "registered"}
	if q := qpsByQPN(t, admin)[qr]; q != want {
		t.Fatalf("UD QP listed %+v, want %+v", q, want)
	}
	mem, err := admin.VerbsMem(ctxT(t))
	if err != nil || len(mem) != 1 || mem[0].QPs != 2 || mem[0].Memfds != 3 {
		t.Fatalf("listed %+v, %v; want 2 QPs and 3 memfds (the QPs' and the lane)", mem, err)
	}
}

// A LISTING no agent lists is INVALID, and the session goes on.
func TestConnsUnknownListingInvalid(t *testing.T) {
	a := startAgent(t, newFakeDir(), nil)
	raw := rawAdmin(t, a)
	if err := raw.WriteMsg(protocol.New(protocol.TypeConns, 3, protocol.U8(protocol.AttrListing, 9))); err != nil {
		t.Fatal(err)
	}
	r, _, err := raw.ReadMsg()
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := r.U32(protocol.AttrErrCode); r.Type != protocol.TypeError || protocol.Code(code) != protocol.CodeInvalid {
		t.Fatalf("LISTING 9 answered %v code %d, want ERROR INVALID", r.Type, code)
	}
	if page, total, err := connsFrom(raw, 0); err != nil || len(page) != 0 || total != 0 {
		t.Fatalf("CONNS after it: %d of %d, %v", len(page), total, err)
	}
}
