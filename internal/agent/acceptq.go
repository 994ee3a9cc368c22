package agent

// Slow acceptors (see "Slow acceptors" in the design note in broker.go):
// a connector whose local ACCEPT has not come within the first bound
// (meetWait same host, offerWait on the acceptor's agent of an offer)
// waits on while its connection is still in the listener's accept queue,
// which the agent reads from the kernel (NETLINK_SOCK_DIAG, inet_diag) in
// the acceptor's network namespace.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/netns"
)

// Bounds of the wait for a slow acceptor.
const (
	// queuedWait bounds, from its CONNECT, a same-host connector's wait
	// for an ACCEPT whose connection no process has accepted yet. The
	// library waits 250 ms for any answer (lib/src/agent/session.c) and an
	// answer it no longer waits for leaves the two ends on different
	// paths, so this stays 100 ms short of that, for a loaded host's
	// scheduling delays; it covers a server that accepts up to ~150 ms
	// after the handshake (a busy event loop's round, a sleep between
	// accepts). A later accept gets the overlay, peer-timeout, as before.
	queuedWait = 150 * time.Millisecond
	// offerQueuedWait is queuedWait for the acceptor's agent of a
	// cross-host offer, from the offer: its reply, and the COMMIT the
	// connector's agent writes on reading it, must still fit in that
	// agent's budget (offerBudget, 150 ms from its CONNECT), with 40 ms to
	// spare for a loaded host. Past the budget no COMMIT comes, and both
	// ends take the overlay, as they would have without the wait.
	offerQueuedWait = 110 * time.Millisecond
	// queuedCheck is how often, past meetWait, the accept queue is read.
	// A connection accepted with no ACCEPT following (the accepting
	// process has no library, or does not ask) is seen at the next check
	// and given acceptedLooks checks for its ACCEPT to arrive: it costs
	// meetWait plus a few of these, not queuedWait.
	queuedCheck = 10 * time.Millisecond
	// queuedPerContainer bounds the connectors of one container waiting
	// past meetWait at once (each reads the kernel every queuedCheck);
	// beyond it a connector gets peer-timeout at meetWait, as before.
	queuedPerContainer = 64
	// diagTimeout bounds one read of the accept queue: the kernel answers
	// within the send, so this is only a guard.
	diagTimeout = 5 * time.Millisecond
	// acceptedLooks is how many checks an accepted connection's ACCEPT gets
	// to arrive: the library sends it right after accept() returns, but may
	// first open a session, and a busy host delays it.
	acceptedLooks = 3
	// diagRetry is how long a container whose socket could not be made is
	// not tried again (and not logged again).
	diagRetry = time.Second
)

// acceptState is what the kernel says of the acceptor's end of a
// connection.
type acceptState int

const (
	acceptUnknown  acceptState = iota // gone, or not readable: wait no longer
	acceptQueued                      // in the accept queue: no process accepted it yet
	acceptAccepted                    // a process accepted it
)

// queuedAccept is a connector's wait past its first bound for the local
// ACCEPT of k, whose acceptor is container acc: a same-host connector's
// (meet), or the acceptor's agent's for an offer (meetOffer).
type queuedAccept struct {
	a        *Agent
	acc      string // the acceptor's container
	conn     string // the connecting container, charged in a.queued
	k        tuple
	until    time.Time // the end of the wait: queuedWait or offerQueuedWait after the ask
	held     bool      // a place in a.queued is taken
	accepted int       // checks that found k accepted
}

// awaitAccept is rv.await for a connector waiting on li's listener for
// the ACCEPT of m: past wait, it waits on while m's connection is still
// in the accept queue, until at most until.
func (a *Agent) awaitAccept(m *meeting, wait time.Duration, li *listenerInfo, until time.Time) turn {
	q := &queuedAccept{a: a, acc: li.key.id, conn: li.conn, k: m.k, until: until}
	defer q.done()
	return a.rv.await(m, wait, q.more)
}

// more says how much longer to wait for the ACCEPT: a check's interval
// while the connection is queued (or was just accepted, its ACCEPT on the
// way), within q.until; 0 otherwise.
func (q *queuedAccept) more() time.Duration {
	left := time.Until(q.until)
	if left <= 0 {
		return 0
	}
	if !q.held {
		if q.held = q.a.queued.take(q.conn); !q.held {
			return 0
		}
	}
	switch q.a.acceptState(q.acc, q.k) {
	case acceptQueued:
	case acceptAccepted:
		if q.accepted++; q.accepted >= acceptedLooks {
			return 0
		}
	default:
		return 0
	}
	return min(queuedCheck, left)
}

// done gives back the place q held.
func (q *queuedAccept) done() {
	if q.held {
		q.a.queued.release(q.conn)
	}
}

// acceptState reads the state of the acceptor's end of k in the network
// namespace of container id.
func (a *Agent) acceptState(id string, k tuple) acceptState {
	c, ns, ok := a.ids.local(id)
	if !ok {
		return acceptUnknown
	}
	s, err := a.diag.socket(c, ns, a.ids.has)
	if err != nil {
		if !errors.Is(err, errDiagRetryLater) {
			a.log.Warn("cannot read accept queues; a slow acceptor's connections get the overlay", "container", id, "err", err)
		}
		return acceptUnknown
	}
	st, err := s.state(k)
	if err != nil {
		a.log.Debug("read an accept queue", "container", id, "err", err)
	}
	return st
}

// diagSockets holds one NETLINK_SOCK_DIAG socket per local container,
// made in its network namespace when first needed (a socket stays in the
// namespace it was made in) and closed when the container goes.
type diagSockets struct {
	mu     sync.Mutex
	socks  map[string]*diagSocket // by container id
	failed map[string]time.Time   // containers whose socket could not be made, and when
}

// errDiagRetryLater: the container's socket could not be made within diagRetry.
var errDiagRetryLater = errors.New("socket-diagnostics socket failed lately; not tried again yet")

// diagSocket reads sockets of one network namespace, one query at a time.
type diagSocket struct {
	mu  sync.Mutex
	ns  nsKey
	fd  int // -1 once closed
	seq uint32
	buf []byte
}

func newDiagSockets() *diagSockets {
	return &diagSockets{socks: map[string]*diagSocket{}, failed: map[string]time.Time{}}
}

// socket returns container c's socket, made in its namespace ns; one made
// in an earlier namespace of c is replaced. A socket made for a container
// that registered says no longer (UNREGISTER ran meanwhile, and dropped
// what it found) is closed, not kept.
func (d *diagSockets) socket(c directory.Container, ns nsKey, registered func(id string) bool) (*diagSocket, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.socks[c.ID]; s != nil {
		if s.ns == ns {
			return s, nil
		}
		s.close()
		delete(d.socks, c.ID)
	}
	if at, ok := d.failed[c.ID]; ok && time.Since(at) < diagRetry {
		return nil, errDiagRetryLater
	}
	fd, err := openDiag(c.NetNS, ns)
	if err != nil {
		d.failed[c.ID] = time.Now()
		return nil, err
	}
	delete(d.failed, c.ID)
	s := &diagSocket{ns: ns, fd: fd, buf: make([]byte, 8192)}
	if !registered(c.ID) {
		s.close()
		return nil, fmt.Errorf("container %s unregistered", c.ID)
	}
	d.socks[c.ID] = s
	return s, nil
}

// drop closes container id's socket, if any.
func (d *diagSockets) drop(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.socks[id]; s != nil {
		s.close()
		delete(d.socks, id)
	}
	delete(d.failed, id)
}

// closeAll closes every socket (the agent stops).
func (d *diagSockets) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, s := range d.socks {
		s.close()
		delete(d.socks, id)
	}
}

func (s *diagSocket) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	closeFD(s.fd)
	s.fd = -1
}

// openDiag makes a NETLINK_SOCK_DIAG socket in the network namespace at
// path, and checks that it is namespace want (the path may have been
// bound anew since want was read).
func openDiag(path string, want nsKey) (int, error) {
	fd := -1
	err := netns.Do(path, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		return err
	})
	if err == nil {
		err = checkSocketNS(fd, want)
	}
	if err == nil {
		tv := unix.NsecToTimeval(diagTimeout.Nanoseconds())
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		if err == nil {
			err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		}
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("open a socket-diagnostics socket in network namespace %s: %w", path, err)
	}
	return fd, nil
}

// checkSocketNS fails unless socket fd lives in network namespace want.
func checkSocketNS(fd int, want nsKey) error {
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return fmt.Errorf("read the socket's namespace: %w", err)
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return fmt.Errorf("stat the socket's namespace: %w", err)
	}
	if (nsKey{dev: st.Dev, ino: st.Ino}) != want {
		return fmt.Errorf("the path names another namespace than the container registered")
	}
	return nil
}

// state looks up the acceptor's end of k (local k.acc, remote k.conn) by
// its exact 4-tuple: found with an inode (a file: a process accepted it)
// is acceptAccepted; established, or with its handshake's last ACK still
// to come, with no inode (no process holds it) is acceptQueued;
// anything else (not found, the listener, which the kernel's lookup
// falls back to, one closed after its accept) is acceptUnknown.
func (s *diagSocket) state(k tuple) (acceptState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return acceptUnknown, fmt.Errorf("socket-diagnostics socket closed")
	}
	s.seq++
	if err := unix.Sendto(s.fd, diagRequest(k, s.seq), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return acceptUnknown, fmt.Errorf("send an inet_diag request: %w", err)
	}
	for range 4 { // replies to earlier queries whose reads timed out are skipped
		n, from, err := unix.Recvfrom(s.fd, s.buf, 0)
		if err == unix.EINTR {
			n, from, err = unix.Recvfrom(s.fd, s.buf, 0)
		}
		if err != nil {
			return acceptUnknown, fmt.Errorf("read an inet_diag reply: %w", err)
		}
		// Only the kernel (port id 0) answers; a process of the namespace could send too.
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue
		}
		if st, ok := diagReply(s.buf[:n], s.seq, k.conn.Port()); ok {
			return st, nil
		}
	}
	return acceptUnknown, fmt.Errorf("no inet_diag reply to request %d", s.seq)
}

// Layout of the kernel's inet_diag messages (linux/inet_diag.h,
// linux/netlink.h), in host byte order but for ports and addresses.
const (
	nlHeaderLen     = 16 // struct nlmsghdr
	diagReqLen      = 56 // struct inet_diag_req_v2
	diagMsgLen      = 72 // struct inet_diag_msg
	diagMsgInodeOff = 68 // idiag_inode in struct inet_diag_msg
	tcpEstablished  = 1  // TCP_ESTABLISHED (idiag_state)
	tcpSynRecv      = 3  // TCP_SYN_RECV
)

// diagRequest asks, with sequence number seq, for the TCP socket whose
// own address is k.acc and whose peer is k.conn.
func diagRequest(k tuple, seq uint32) []byte {
	b := make([]byte, nlHeaderLen+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST) // no NLM_F_DUMP: the exact 4-tuple
	ne.PutUint32(b[8:], seq)
	r := b[nlHeaderLen:]
	r[0], r[1] = unix.AF_INET, unix.IPPROTO_TCP
	if k.acc.Addr().Is6() {
		r[0] = unix.AF_INET6
	}
	ne.PutUint32(r[4:], ^uint32(0)) // idiag_states: any
	id := r[8:]                     // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], k.acc.Port())
	binary.BigEndian.PutUint16(id[2:], k.conn.Port())
	putDiagAddr(id[4:20], k.acc.Addr())
	putDiagAddr(id[20:36], k.conn.Addr())
	ne.PutUint32(id[40:], ^uint32(0)) // idiag_cookie: INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], ^uint32(0))
	return b
}

func putDiagAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// diagReply reads the reply to request seq, for peer port dport, in a
// datagram of netlink messages; ok is false if it holds none.
func diagReply(b []byte, seq uint32, dport uint16) (st acceptState, ok bool) {
	ne := binary.NativeEndian
	for len(b) >= nlHeaderLen {
		n := int(ne.Uint32(b[0:]))
		if n < nlHeaderLen || n > len(b) {
			return acceptUnknown, false
		}
		typ, got := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		switch {
		case got != seq:
		case typ == unix.SOCK_DIAG_BY_FAMILY && n >= nlHeaderLen+diagMsgLen:
			return diagState(b[nlHeaderLen:n], dport), true
		default: // NLMSG_ERROR: not found (ENOENT), or a malformed reply
			return acceptUnknown, true
		}
		b = b[min(len(b), (n+3)&^3):] // NLMSG_ALIGN
	}
	return acceptUnknown, false
}

// diagState reads struct inet_diag_msg m of a socket whose peer port
// should be dport (see state).
func diagState(m []byte, dport uint16) acceptState {
	inode, state := binary.NativeEndian.Uint32(m[diagMsgInodeOff:]), m[1]
	switch {
	case binary.BigEndian.Uint16(m[6:]) != dport: // idiag_dport: the listener's is 0
		return acceptUnknown
	case inode != 0:
		return acceptAccepted
	case state == tcpEstablished || state == tcpSynRecv:
		return acceptQueued
	}
	return acceptUnknown
}
