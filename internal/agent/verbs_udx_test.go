package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/policy"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// UD lanes across hosts (verbs_udx.go): the test process is container
// self on h1 and self2 on h2 (crosshost_test.go), so it plays sender and
// receiver.

// laneAcross asks VERBS_UD_LANE of UD QP qpn of l to the QP to names on
// another host, on the lane memfd memfd, and returns the socket the answer
// hands (closed when the test ends), or the agent's error. Safe in any
// goroutine.
func laneAcross(t *testing.T, l *libClient, qpn uint32, to protocol.VerbsPeer, memfd int) (int, error) {
	r, fds, err := l.call(protocol.New(protocol.TypeVerbsUDLane, 0, protocol.U32(protocol.AttrQPN, qpn), to.Attr()), memfd)
	if err != nil {
		return -1, err
	}
	t.Cleanup(func() { protocol.CloseFDs(fds) })
	kind, kerr := r.U8(protocol.AttrPathKind)
	if r.Type != protocol.TypeOK || len(fds) != 1 || kerr != nil || kind != pathHostTCP || !isSocket(fds[0]) {
		return -1, fmt.Errorf("VERBS_UD_LANE across hosts answered %v with %d fds, PATH_KIND %d (%v); want OK, host-tcp, one socket", r.Type, len(fds), kind, kerr)
	}
	return fds[0], nil
}

func isSocket(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// udState returns how many lanes UD QP qpn at agent a has (from another
// host: not handed yet), how many it is accepting, and how many sockets
// are parked for its container.
func udState(a *testAgent, qpn uint32, container string) (lanes, accepting, parked int) {
	a.verbs.mu.Lock()
	defer a.verbs.mu.Unlock()
	if qp := a.verbs.qps[qpn]; qp != nil {
		lanes, accepting = len(qp.lanes), qp.xaccepting
	}
	return lanes, accepting, a.verbs.parked[container]
}

// noLaneAdded fails the test if UD QP qpn of self2 at h2 (memfd fd) has a
// lane, counted or kept.
func noLaneAdded(t *testing.T, hs twoHosts, qpn uint32, fd int, after string) {
	t.Helper()
	if n, acc, parked := udState(hs.h2, qpn, ffSelf2.ID); n != 0 || acc != 0 || parked != 0 || lanesWord(t, fd) != 0 {
		t.Errorf("after %s, QP %#x at h2: %d lanes, %d accepting, %d parked, lanes word %d; want nothing", after, qpn, n, acc, parked, lanesWord(t, fd))
	}
}

// selfFrom is QP qpn of container self as a receiver is told of it: its
// QPN, LID and GID (10.244.1.9).
func selfFrom(qpn uint32) protocol.VerbsPeer {
	return protocol.VerbsPeer{QPN: qpn, LID: selfLID, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 244, 14: 1, 15: 9}}
}

// A sender on h1 gets, for its lane to a UD QP on h2, one end of a TCP
// connection between the hosts' fabric addresses, marked as a handed
// connection; its agent keeps nothing of the request. The receiver's
// lanes word counts the lane and its doorbell rings; VERBS_UD_LANES hands
// it the other end, named by the sender's QPN, LID and GID, and its agent
// then forgets the lane and keeps no copy. The sender asking again gets a
// new connection and the receiver a new lane (a new id). The receiving QP
// is listed as a UD QP is, no peer, no bytes.
func TestVerbsUDLaneAcrossHostsIsATCPConnectionToTheReceiver(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _, _ := newUDQP(t, l1, false)
	qb, fdb, bellB := newUDQP(t, l2, true)
	memfd := newQPMemfd(t)
	sa, err := laneAcross(t, l1, qa, lidPeer(qb, self2LID), memfd)
	if err != nil {
		t.Fatal(err)
	}
	waitCopies(t, memfd, 1) // the agent holds nothing of the request
	waitRing(t, bellB, "a lane from another host")
	if n := lanesWord(t, fdb); n != 1 {
		t.Fatalf("the receiver's lanes word is %d after one lane, want 1", n)
	}
	lanes, fds, err := l2.udLanes(t, qb, 0)
	if err != nil || len(lanes) != 1 || lanes[0].ID != 1 || lanes[0].From != selfFrom(qa) {
		t.Fatalf("the receiver's lanes: %+v, %v; want id 1 from %+v", lanes, err, selfFrom(qa))
	}
	if !isSocket(fds[0]) {
		t.Fatal("the lane handed to the receiver is no socket")
	}
	oneConnection(t, hs, sa, fds[0])
	for _, fd := range []int{sa, fds[0]} {
		if mark, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK); err != nil || mark != fabricMarkConnected {
			t.Errorf("a handed end has mark %#x (%v); want %#x, a handed connection", mark, err, fabricMarkConnected)
		}
	}
	waitCopies(t, sa, 1) // neither agent keeps a copy of either end
	waitCopies(t, fds[0], 1)
	if again, _, err := l2.udLanes(t, qb, 0); err != nil || len(again) != 0 {
		t.Fatalf("lanes after the cross-host one was handed: %+v, %v; want none (the receiver holds it)", again, err)
	}
	if n, _, parked := udState(hs.h2, qb, ffSelf2.ID); n != 0 || parked != 0 {
		t.Fatalf("h2 after handing the lane: %d lanes, %d parked; want none", n, parked)
	}

	sa2, err := laneAcross(t, l1, qa, lidPeer(qb, self2LID), newQPMemfd(t))
	if err != nil {
		t.Fatalf("the sender asking again: %v", err)
	}
	waitRing(t, bellB, "the second lane")
	lanes, fds, err = l2.udLanes(t, qb, 0)
	if err != nil || len(lanes) != 1 || lanes[0].ID != 2 || lanes[0].From != selfFrom(qa) || lanesWord(t, fdb) != 2 {
		t.Fatalf("the receiver's lanes after the second: %+v, %v, lanes word %d; want id 2 from %+v, word 2", lanes, err, lanesWord(t, fdb), selfFrom(qa))
	}
	oneConnection(t, hs, sa2, fds[0])
	first, _ := sockAddrs(t, sa)
	if second, _ := sockAddrs(t, sa2); second == first {
		t.Errorf("the second lane is the first connection (%v)", first)
	}
	for _, q := range hs.h2.qpList() {
		if q.QPN == qb && (q.Type != "UD" || q.PeerContainer != "" || q.PeerQPN != 0 || q.RxBytes != 0) {
			t.Errorf("the receiving QP listed %+v; want UD, no peer, no bytes", q)
		}
	}
}

// A lane to no UD QP of that number on the other host (none, an RC QP, one
// destroyed) is NOTFOUND, a datagram lost, and the receiver's agent adds
// nothing; so is a lane to a host whose agent does not answer, naming the
// host, within the offer's budget.
func TestVerbsUDLaneAcrossHostsNotFoundWithoutTheQP(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _, _ := newUDQP(t, l1, false)
	qb, fdb, _ := newUDQP(t, l2, false)
	qrc, _ := newQP(t, l2, 1)
	gone, _, _ := newUDQP(t, l2, false)
	if err := l2.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, gone); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]uint32{"no such QP": qb + 100, "an RC QP": qrc, "a QP destroyed": gone} {
		_, err := laneAcross(t, l1, qa, lidPeer(to, self2LID), newQPMemfd(t))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound || !strings.Contains(err.Error(), reasonVerbsNoQP) {
			t.Errorf("%s: %v; want NOTFOUND (%s)", name, err, reasonVerbsNoQP)
		}
	}
	noLaneAdded(t, hs, qb, fdb, "lanes to no UD QP")
	nothingParked(t, hs.h2, qrc, "a lane to an RC QP")

	hs.h2.stop()
	start := time.Now()
	_, err := laneAcross(t, l1, qa, lidPeer(qb, self2LID), newQPMemfd(t))
	wantCode(t, err, protocol.CodeNotFound)
	if !strings.Contains(err.Error(), "host h2") || time.Since(start) > offerBudget+slackMax {
		t.Errorf("peer agent down: %v after %v; want NOTFOUND naming host h2 within %v", err, time.Since(start), offerBudget)
	}
}

// The tenant policy applies to lanes across hosts as on one: the sender's
// agent refuses a container it may not reach, the receiver's agent an
// offer from one; a refusal by the policy or the fabric guard there is
// DENIED to the sender, by a limit LIMIT, by anything else NOTFOUND.
func TestVerbsUDLaneAcrossHostsDeniedAcrossTenants(t *testing.T) {
	hs := startTwoHosts(t, nil)
	red1 := addRedTenant(t, hs)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _, _ := newUDQP(t, l1, false)
	_, err := laneAcross(t, l1, qa, lidPeer(1, red2LID), newQPMemfd(t))
	wantCode(t, err, protocol.CodeDenied)

	qb, fdb, _ := newUDQP(t, l2, false)
	m := verbsOfferOf(t, protocol.TypeVerbsUDOffer, hs.h1.clusterKey(), "h1", red1.IP, 1, lidPeer(qb, self2LID))
	if got := sendOffer(t, hs, m); got != "PATH overlay "+policy.ReasonTenantDiffers {
		t.Errorf("a lane from a container of another tenant: %s", got)
	}
	noLaneAdded(t, hs, qb, fdb, "an offer across tenants")

	for reason, code := range map[string]protocol.Code{
		policy.ReasonTenantDiffers: protocol.CodeDenied, policy.ReasonNoFastPath: protocol.CodeDenied,
		reasonMayClearMark: protocol.CodeDenied, reasonNoGuard: protocol.CodeDenied,
		reasonVerbsLaneLimit: protocol.CodeLimit, reasonVerbsLimit: protocol.CodeLimit,
		reasonVerbsNoQP: protocol.CodeNotFound, reasonNotContainer: protocol.CodeNotFound,
		reasonUnreachable: protocol.CodeNotFound, reasonNoCommit: protocol.CodeNotFound,
	} {
		var pe *protocol.Error
		if err := laneRefused(reason, qa, lidPeer(qb, self2LID), ffSelf2); !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("a lane refused by h2 (%s): %v; want %v", reason, err, code)
		}
	}
}

// A VERBS_UD_OFFER is taken only as an OFFER is: signed under the cluster
// key, fresh, from the fabric address of the host it names, from a
// container of that host to one of the receiver's host. Anything else is
// refused and adds no lane, nor does an accepted offer never committed;
// a lane is still made after.
func TestVerbsUDOfferForgedOrMisaddressedAddsNoLane(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _, _ := newUDQP(t, l1, false)
	qb, fdb, _ := newUDQP(t, l2, false)
	key, to := hs.h1.clusterKey(), lidPeer(qb, self2LID)
	offer := func(key []byte, ip string, to protocol.VerbsPeer) *protocol.Message {
		return verbsOfferOf(t, protocol.TypeVerbsUDOffer, key, "h1", ip, qa, to)
	}

	genuine := offer(key, ffSelf.IP, to)
	if got := sendOffer(t, hs, genuine); got != "PATH host-tcp " {
		t.Errorf("a genuine offer, never committed: %s", got)
	}
	waitFor(t, "the uncommitted acceptance ends", func() bool { _, acc, _ := udState(hs.h2, qb, ffSelf2.ID); return acc == 0 })
	noLaneAdded(t, hs, qb, fdb, "an accepted offer without COMMIT")

	for name, m := range map[string]*protocol.Message{
		"wrong key": offer(make([]byte, 32), ffSelf.IP, to),
		"unsigned":  offer(nil, ffSelf.IP, to),
		"replayed":  genuine,
	} {
		if got := sendOffer(t, hs, m); !strings.HasPrefix(got, "DENIED") {
			t.Errorf("%s: %s, want DENIED", name, got)
		}
		noLaneAdded(t, hs, qb, fdb, name)
	}
	for name, m := range map[string]*protocol.Message{
		"from a container of h2 itself": offer(key, ffSelf2.IP, to),
		"from no container":             offer(key, "10.244.1.77", to),
		"to a container of h1":          offer(key, ffSelf.IP, lidPeer(qb, selfLID)),
	} {
		if got := sendOffer(t, hs, m); got != "PATH overlay "+reasonNotContainer {
			t.Errorf("an offer %s: %s, want overlay %s", name, got, reasonNotContainer)
		}
		noLaneAdded(t, hs, qb, fdb, "an offer "+name)
	}

	// h1's key and name, but not h1's fabric address.
	if got := offerFromElsewhere(t, hs, offer(key, ffSelf.IP, to)); !strings.HasPrefix(got, "DENIED") {
		t.Errorf("an offer from another address naming h1: %s, want DENIED", got)
	}
	noLaneAdded(t, hs, qb, fdb, "an offer from another address")

	if _, err := laneAcross(t, l1, qa, to, newQPMemfd(t)); err != nil {
		t.Fatalf("the genuine lane after the refusals: %v", err)
	}
	waitFor(t, "the lane added", func() bool { n, _, _ := udState(hs.h2, qb, ffSelf2.ID); return n == 1 })
}

// A lane from another host not handed yet goes with its receiving QP
// (destroyed, its session ended, or its agent stopped): the connection is
// closed, the sender reads EOF, and nothing stays parked.
func TestVerbsUDLaneNotHandedClosedWhenItsReceiverEnds(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1 := newLib(t, hs.h1)
	qa, _, _ := newUDQP(t, l1, false)
	for _, end := range []string{"session end", "VERBS_QP_DESTROY", "agent stop"} {
		l2, err := dialLib(hs.h2.cfg.LibrarySocket())
		if err != nil {
			t.Fatal(err)
		}
		qb, _, _ := newUDQP(t, l2, false)
		sa, err := laneAcross(t, l1, qa, lidPeer(qb, self2LID), newQPMemfd(t))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the lane added", func() bool { n, _, _ := udState(hs.h2, qb, ffSelf2.ID); return n == 1 })
		if end == "agent stop" {
			hs.h2.stop()
		} else {
			endQP(t, l2, qb, end)
		}
		if err := wantEOF(sa, 5*time.Second); err != nil {
			t.Errorf("%s: the sender %v", end, err)
		}
		if _, _, parked := udState(hs.h2, qb, ffSelf2.ID); parked != 0 {
			t.Errorf("%s: %d sockets still counted parked for self2", end, parked)
		}
		l2.conn.Close()
	}
}

// A process that could clear the mark of a handed fabric socket gets no
// lane across hosts (DENIED), and its agent refuses a lane to its QP (the
// test process holds CAP_NET_RAW and CAP_NET_ADMIN; the agents run with
// the guard configured, its rules not installed).
func TestVerbsUDLaneAcrossHostsCallerMayClearMarkGetsNoSocket(t *testing.T) {
	skipWithoutMarkCaps(t)
	hs := startTwoHosts(t, func(c *Config) {
		c.FabricGuard, c.installGuard = true, func() error { return nil }
	})
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _, _ := newUDQP(t, l1, false)
	qb, fdb, _ := newUDQP(t, l2, false)
	_, err := laneAcross(t, l1, qa, lidPeer(qb, self2LID), newQPMemfd(t))
	wantCode(t, err, protocol.CodeDenied)
	if !strings.Contains(err.Error(), reasonMayClearMark) {
		t.Errorf("a sender that may clear the mark: %v; want it said (%s)", err, reasonMayClearMark)
	}
	m := verbsOfferOf(t, protocol.TypeVerbsUDOffer, hs.h1.clusterKey(), "h1", ffSelf.IP, qa, lidPeer(qb, self2LID))
	if got := sendOffer(t, hs, m); got != "PATH overlay "+reasonMayClearMark {
		t.Errorf("a lane to a QP of a process that may clear the mark: %s", got)
	}
	noLaneAdded(t, hs, qb, fdb, "an offer it may not take")
}

// A QP takes at most MaxLanesPerQP live lanes, from this host and others
// together: past them a sender on another host gets LIMIT, and a lane
// once one has died.
func TestVerbsUDLaneAcrossHostsLimitPerQP(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _, _ := newUDQP(t, l1, false)
	qr, _, _ := newUDQP(t, l2, false)
	shared := newQPMemfd(t) // the local senders' QPs share one memfd: one held file
	local := make([]uint32, MaxLanesPerQP)
	for i := range local {
		qpn, err := l2.qpCreate(shared, protocol.QPTypeUD, 1)
		if err != nil {
			t.Fatal(err)
		}
		local[i] = qpn
		l2.newLane(t, qpn, lidPeer(qr, self2LID))
	}
	_, err := laneAcross(t, l1, qa, lidPeer(qr, self2LID), newQPMemfd(t))
	wantCode(t, err, protocol.CodeLimit)
	if !strings.Contains(err.Error(), reasonVerbsLaneLimit) {
		t.Errorf("a lane past the limit: %v; want it said (%s)", err, reasonVerbsLaneLimit)
	}
	if err := l2.verbsDrop(protocol.TypeVerbsQPDestroy, protocol.AttrQPN, local[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := laneAcross(t, l1, qa, lidPeer(qr, self2LID), newQPMemfd(t)); err != nil {
		t.Fatalf("once a lane died: %v", err)
	}
	waitFor(t, "the lane added", func() bool {
		lanes, _, err := l2.udLanes(t, qr, MaxLanesPerQP)
		return err == nil && slices.Equal(laneIDs(lanes), []uint32{MaxLanesPerQP, MaxLanesPerQP + 1})
	})
}

// A lane from another host not handed yet counts as a file the receiving
// container holds, as a parked RC end does: a program that never takes its
// lanes makes its agent hold no more for it than its memfds may. Offers
// at once cannot pass the limit together; once the receiver takes its
// lanes there is room again.
func TestVerbsUDLanesNotHandedCountInTheReceiversHeldFiles(t *testing.T) {
	hs := startTwoHosts(t, func(c *Config) { c.verbsFDs = 3 })
	l2 := newLib(t, hs.h2)
	qr, _, _ := newUDQP(t, l2, false) // one held file of self2's: room for two parked lanes
	const senders = 6
	shared := newQPMemfd(t)
	libs, qpns, memfds := make([]*libClient, senders), make([]uint32, senders), make([]int, senders)
	for i := range senders {
		libs[i] = newLib(t, hs.h1)
		qpn, err := libs[i].qpCreate(shared, protocol.QPTypeUD, 1)
		if err != nil {
			t.Fatal(err)
		}
		qpns[i], memfds[i] = qpn, newQPMemfd(t)
	}
	errs := make([]error, senders)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = laneAcross(t, libs[i], qpns[i], lidPeer(qr, self2LID), memfds[i])
		}()
	}
	close(start)
	wg.Wait()
	given := 0
	for i, err := range errs {
		var pe *protocol.Error
		switch {
		case err == nil:
			given++
		case !errors.As(err, &pe) || pe.Code != protocol.CodeLimit:
			t.Errorf("sender %d: %v; want a lane or LIMIT", i, err)
		}
	}
	if given != 2 {
		t.Fatalf("%d of %d senders at once got a lane; want 2, the receiving container's room", given, senders)
	}
	waitFor(t, "both lanes added", func() bool { n, acc, _ := udState(hs.h2, qr, ffSelf2.ID); return n == 2 && acc == 0 })
	if lanes, _, err := l2.udLanes(t, qr, 0); err != nil || len(lanes) != 2 {
		t.Fatalf("the receiver takes its lanes: %+v, %v", lanes, err)
	}
	if _, err := laneAcross(t, libs[0], qpns[0], lidPeer(qr, self2LID), newQPMemfd(t)); err != nil {
		t.Fatalf("once the receiver took its lanes: %v", err)
	}
}
